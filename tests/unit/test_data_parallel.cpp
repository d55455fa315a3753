// Data parallelism's keys and plan (issue 36, docs/parallel.md): validation
// with file:line, keys that change nothing said to, the fingerprint, the
// global batch and the implicit baseline, and the planner's optimizer state
// under ZeRO-1 (Megatron-LM's distributed-optimizer bytes per parameter).
#include <string>

#include <catch2/catch.hpp>

#include "../support/config_text.hpp"

#include "pipebench/core/config.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/core/workload_identity.hpp"
#include "pipebench/model/model.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/plan/plan_format.hpp"

using namespace pipebench;

namespace {

// Line numbers matter: the error tests point at them.
const std::string kJob = R"(schema = 1
[job]
name = "dp"
[model]
hidden = 64
layers = 4
heads = 4
seq_len = 16
vocab = 128
[device]
backend = "cpu"
[[run]]
name = "base"
micro_batch_size = 2
num_microbatches = 8
[[run]]
name = "pp2_dp2"
pipeline_size = 2
data_parallel = 2
micro_batch_size = 2
num_microbatches = 4
optimizer_sharding = "zero1"
grad_sync = "overlap"
)";

std::string error_of(const std::vector<std::string>& overrides) { return testing::error_of(kJob, overrides); }

}  // namespace

TEST_CASE("data parallel: the keys, the global batch and the implicit baseline", "[data_parallel]") {
  const Job job = parse_job(kJob, "w.toml");
  REQUIRE(job.warnings.empty());  // the baseline's global batch is the same: 2 x 8 = 2 x 4 x 2 replicas
  const RunSpec& r = job.runs[1];
  CHECK(r.data_parallel == 2);
  CHECK(r.ranks() == 4);
  CHECK(r.global_batch() == 16);
  CHECK(r.optimizer_sharding == OptimizerSharding::zero1);
  CHECK(r.grad_sync == GradSync::overlap);
  CHECK(r.rank_order == RankOrder::tp_dp_pp);
  CHECK(r.baseline == "base");  // the single-rank run, found for a 2 x 2 run as for a pipeline
  CHECK(job.runs[0].data_parallel == 1);
  CHECK(job.runs[0].ranks() == 1);

  CHECK_THAT(error_of({"run.pp2_dp2.data_parallel=0"}), Catch::Contains("run.pp2_dp2.data_parallel"));
  // From the file, with its line.
  CHECK_THAT(testing::error_of(testing::replaced(kJob, "grad_sync = \"overlap\"", "grad_sync = \"after\"")),
             Catch::Contains("w.toml:23: run.pp2_dp2.grad_sync"));
  CHECK_THAT(error_of({"run.pp2_dp2.data_parallel=1048576"}), Catch::Contains("run.pp2_dp2.data_parallel"));
  CHECK_THAT(error_of({"run.pp2_dp2.optimizer_sharding=\"zero3\""}), Catch::Contains("(--set run.pp2_dp2.optimizer_sharding=\"zero3\"): run.pp2_dp2.optimizer_sharding: unknown value"));
  CHECK_THAT(error_of({"run.pp2_dp2.grad_sync=\"eager\""}), Catch::Contains("run.pp2_dp2.grad_sync: unknown value \"eager\" (expected one of \"after_flush\", \"overlap\")"));
  CHECK_THAT(error_of({"run.pp2_dp2.rank_order=\"pp-dp-tp\""}), Catch::Contains("run.pp2_dp2.rank_order"));

  // A different global batch is flagged with its formula.
  const Job other = parse_job(kJob, "w.toml", {"run.pp2_dp2.data_parallel=4"});
  REQUIRE(other.warnings.size() == 1);
  CHECK_THAT(other.warnings[0], Catch::Contains("global batch 32 (= 2 x 4 x 4 replicas) differs from baseline \"base\" (16 = 2 x 8)"));
}

TEST_CASE("data parallel: sharding and synchronisation keys without replicas are said to do nothing", "[data_parallel]") {
  const Job one = parse_job(kJob, "w.toml", {"run.pp2_dp2.data_parallel=1"});
  REQUIRE(one.warnings.size() >= 2);
  CHECK_THAT(one.warnings[0], Catch::Contains("run.pp2_dp2.optimizer_sharding: ignored: data_parallel = 1"));
  CHECK_THAT(one.warnings[1], Catch::Contains("run.pp2_dp2.grad_sync: ignored"));
  CHECK(one.runs[1].optimizer_sharding == OptimizerSharding::none);
  const Job inf = parse_job(kJob, "w.toml", {"run.pp2_dp2.mode=\"inference\"", "run.base.mode=\"inference\""});
  CHECK_THAT(inf.warnings[0], Catch::Contains("ignored: inference has no gradients or optimizer"));
}

TEST_CASE("data parallel: the fingerprint holds the keys, and older workloads keep theirs", "[data_parallel]") {
  const Job job = parse_job(kJob, "w.toml");
  const WorkloadKeys dp = workload_keys(job, job.runs[1]);
  CHECK(dp.at("run.data_parallel") == "2");
  CHECK(dp.at("run.optimizer_sharding") == "zero1");
  CHECK(dp.at("run.grad_sync") == "overlap");
  CHECK(dp.at("run.rank_order") == "tp-dp-pp");
  const WorkloadKeys single = workload_keys(job, job.runs[0]);
  for (const char* key : {"run.data_parallel", "run.optimizer_sharding", "run.grad_sync", "run.rank_order"})
    CHECK(single.count(key) == 0);
  const Job other = parse_job(kJob, "w.toml", {"run.pp2_dp2.rank_order=\"tp-pp-dp\""});
  CHECK(workload_fingerprint(workload_keys(other, other.runs[1])) != workload_fingerprint(dp));
}

// Megatron-LM's distributed optimizer: 16 -> 8 + 8/d bytes per parameter in
// fp32, 18 -> 6 + 12/d in bf16 with fp32 gradients (docs/parallel.md). Only
// the optimizer state (AdamW m, v, the fp32 master) is sharded: ceil(n/d).
TEST_CASE("data parallel: the planner shards the optimizer state over the replicas", "[data_parallel]") {
  for (const char* dtype : {"fp32", "bf16"})
    for (const int d : {1, 2, 4})
      for (const char* sharding : {"none", "zero1"}) {
        INFO(dtype << ", d = " << d << ", " << sharding);
        const Job job = parse_job(kJob, "w.toml",
                                  {std::string("model.dtype=\"") + dtype + "\"", "device.backend=\"sim\"",
                                   "run.pp2_dp2.data_parallel=" + std::to_string(d),
                                   std::string("run.pp2_dp2.optimizer_sharding=\"") + sharding + "\""});
        const RunPlan plan = plan_run(job, job.runs[1]);
        const bool bf16 = std::string(dtype) == "bf16";
        for (const StagePlan& sp : plan.stages) {
          const std::int64_t n = sp.cost.params;
          const std::int64_t kept = std::string(sharding) == "zero1" && d > 1 ? (n + d - 1) / d : n;
          CHECK(sp.params_bytes == n * (bf16 ? 2 : 4));
          CHECK(sp.grads_bytes == n * 4);
          CHECK(sp.optimizer_bytes == kept * (bf16 ? 12 : 8));
        }
      }
}

TEST_CASE("data parallel: plan prints the replicas, the ranks and the global batch", "[data_parallel]") {
  const Job job = parse_job(kJob, "w.toml");
  const JobPlan plan = plan_job(job);
  const std::string text = format_plan_text(plan);
  CHECK_THAT(text, Catch::Contains("data parallel: 2 replicas x 2 stages = 4 ranks (tp-dp-pp); global batch 16 = 2 x 4 x 2; "
                                   "optimizer_sharding=zero1, grad_sync=overlap"));
  const std::string json = format_plan_json(plan);
  CHECK_THAT(json, Catch::Contains("\"data_parallel\": 2") && Catch::Contains("\"ranks\": 4") &&
                       Catch::Contains("\"global_batch\": 16") && Catch::Contains("\"optimizer_sharding\": \"zero1\""));
}
