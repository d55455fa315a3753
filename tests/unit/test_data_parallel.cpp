// Data parallelism's keys and plan (issue 36, docs/parallel.md): validation
// with file:line, keys that change nothing said to, the fingerprint, the
// global batch and the implicit baseline, and the planner's optimizer state
// under ZeRO-1 (Megatron-LM's distributed-optimizer bytes per parameter).
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/config_text.hpp"

#include "pipebench/core/config.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/core/workload_identity.hpp"
#include "pipebench/model/model.hpp"
#include "pipebench/parallel/collectives.hpp"
#include "pipebench/parallel/shards.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/plan/plan_format.hpp"
#include "pipebench/runtime/mpi_comm.hpp"

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
  CHECK_THAT(error_of({"run.pp2_dp2.grad_sync=\"eager\""}), Catch::Contains("run.pp2_dp2.grad_sync: unknown value \"eager\" (expected one of \"after_flush\", \"after_chunk\", \"overlap\")"));
  CHECK_THAT(error_of({"run.pp2_dp2.grad_bucket_bytes=0"}), Catch::Contains("run.pp2_dp2.grad_bucket_bytes: expected a positive size"));
  CHECK_THAT(error_of({"run.pp2_dp2.grad_bucket_bytes=\"2GiB\""}), Catch::Contains("above the limit of 1 GiB"));
  CHECK(parse_job(kJob, "w.toml", {"run.pp2_dp2.grad_bucket_bytes=\"40MiB\""}).runs[1].grad_bucket_bytes == 40 << 20);
  // Only the bucketed overlap has buckets of that size: said, not silently kept.
  const Job flush = parse_job(kJob, "w.toml", {"run.pp2_dp2.grad_sync=\"after_flush\"", "run.pp2_dp2.grad_bucket_bytes=1000"});
  CHECK(std::any_of(flush.warnings.begin(), flush.warnings.end(),
                    [](const std::string& w) { return w.find("grad_bucket_bytes: ignored") != std::string::npos; }));
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

TEST_CASE("data parallel: ring collectives' cost and bus bandwidth (nccl-tests' busbw)", "[data_parallel]") {
  using parallel::Collective;
  CHECK(parallel::bus_factor(Collective::all_reduce, 1) == 0.0);
  CHECK(parallel::bus_factor(Collective::all_reduce, 2) == 1.0);
  CHECK(parallel::bus_factor(Collective::all_reduce, 4) == 1.5);
  CHECK(parallel::bus_factor(Collective::reduce_scatter, 4) == 0.75);
  CHECK(parallel::bus_factor(Collective::all_gather, 8) == 0.875);
  // 1 GB at 8 Gbit/s is 1 s of link time; an all-reduce over 4 moves 1.5x that, plus one latency.
  CHECK(parallel::ring_time_s(Collective::all_reduce, 1000000000, 4, 1e-5, 8.0) == Approx(1.5 + 1e-5).epsilon(1e-12));
  CHECK(parallel::ring_time_s(Collective::all_gather, 1000000000, 4, 0.0, 8.0) == Approx(0.75).epsilon(1e-12));
  CHECK(parallel::ring_time_s(Collective::all_reduce, 1000000000, 1, 1e-5, 8.0) == 0.0);  // nothing moves
  CHECK(parallel::bus_bandwidth(Collective::all_reduce, 1000000000, 4, 1.5) == Approx(1e9));
  CHECK(parallel::bus_bandwidth(Collective::all_reduce, 1000000000, 4, 0.0) == 0.0);
  parallel::LinkChain chain;
  CHECK(chain.add(1.0, 0.5) == 1.5);  // starts at its launch
  CHECK(chain.add(1.2, 0.5) == 2.0);  // waits for the first
  CHECK(chain.add(3.0, 0.25) == 3.25);  // the link was free
}

namespace {
// The planner's gradient all-reduce of `run` over the sim link of `job`, by hand.
double by_hand_all_reduce_s(const Job& job, std::int64_t bytes, int d) {
  double t = 0.0;
  for (std::int64_t off = 0; off < bytes; off += static_cast<std::int64_t>(parallel::kGradBucketBytes))
    t += parallel::ring_time_s(parallel::Collective::all_reduce,
                               std::min<std::uint64_t>(parallel::kGradBucketBytes, static_cast<std::uint64_t>(bytes - off)),
                               d, job.device.sim_link_latency_us * 1e-6, job.device.sim_link_gbps);
  return t;
}
}  // namespace

TEST_CASE("data parallel: the planner's gradient all-reduce and the step with it", "[data_parallel]") {
  // After the flush every rank's all-reduce is exposed whole: its buckets one
  // after another from the rank's last action's end; the step ends with the
  // last of them. After each chunk with two chunks per rank, the first
  // finished chunk's all-reduce starts in the cool-down: less is exposed.
  const std::vector<std::string> big{"model.hidden=2048", "model.heads=16", "model.layers=8", "device.backend=\"sim\"",
                                     "run.pp2_dp2.optimizer_sharding=\"none\""};
  for (const char* sync : {"after_flush", "after_chunk"}) {
    INFO(sync);
    std::vector<std::string> set = big;
    set.push_back(std::string("run.pp2_dp2.grad_sync=\"") + sync + "\"");
    const Job job = parse_job(kJob, "w.toml", set);
    const RunPlan plan = plan_run(job, job.runs[1]);
    double latest = plan.simulated.makespan;
    for (const StagePlan& sp : plan.stages) {
      const double last_end = plan.simulated.last_end[static_cast<std::size_t>(sp.stage)];
      CHECK(sp.grad_sync.bytes == sp.grads_bytes);
      CHECK(sp.grad_sync.bytes > static_cast<std::int64_t>(parallel::kGradBucketBytes));  // several buckets
      // One chunk per rank: its last backward is the rank's last action, overlap or not.
      CHECK(sp.grad_sync.launch_s == last_end);
      CHECK(sp.grad_sync.sync_s() == Approx(by_hand_all_reduce_s(job, sp.grad_sync.bytes, 2)).epsilon(1e-12));
      CHECK(sp.grad_sync.exposed_s == Approx(sp.grad_sync.sync_s()).epsilon(1e-12));
      latest = std::max(latest, sp.grad_sync.end_s);
    }
    CHECK(plan.step_s == latest);
    CHECK(plan.step_s > plan.simulated.makespan);
  }
  std::vector<std::string> set = big;
  for (const char* s : {"run.pp2_dp2.grad_sync=\"after_chunk\"", "run.pp2_dp2.schedule=\"interleaved-1f1b\"",
                        "run.pp2_dp2.virtual_stages_per_rank=2"})
    set.emplace_back(s);
  const Job job = parse_job(kJob, "w.toml", set);
  const RunPlan plan = plan_run(job, job.runs[1]);
  for (const StagePlan& sp : plan.stages) {
    INFO("stage " << sp.stage);
    CHECK(sp.grad_sync.launch_s < plan.simulated.last_end[static_cast<std::size_t>(sp.stage)]);
    CHECK(sp.grad_sync.exposed_s < sp.grad_sync.sync_s());
    CHECK(sp.grad_sync.exposed_s > 0.0);
  }
  // Inference and one replica: nothing to synchronise, the step is the makespan.
  const Job one = parse_job(kJob, "w.toml", {"run.pp2_dp2.data_parallel=1", "run.pp2_dp2.optimizer_sharding=\"none\""});
  const RunPlan p1 = plan_run(one, one.runs[1]);
  CHECK(p1.step_s == p1.simulated.makespan);
  CHECK(p1.stages[0].grad_sync.bytes == 0);
}

TEST_CASE("data parallel: the ring is Open MPI's non-blocking all-reduce unless the user chose", "[data_parallel]") {
  const char* name = "OMPI_MCA_coll_libnbc_iallreduce_algorithm";
  unsetenv(name);
  prefer_ring_iallreduce();
  CHECK(std::string(std::getenv(name)) == "1");
  setenv(name, "3", 1);
  prefer_ring_iallreduce();
  CHECK(std::string(std::getenv(name)) == "3");
  unsetenv(name);
}

TEST_CASE("data parallel: ZeRO-1's shards cover the rank's parameters once, in replica order", "[data_parallel]") {
  for (const std::int64_t n : {1, 7, 8, 1000003})
    for (const int d : {1, 2, 3, 4, 8}) {
      INFO("n = " << n << ", d = " << d);
      std::int64_t covered = 0, next = 0;
      for (int q = 0; q < d; ++q) {
        const parallel::Span s = parallel::shard_of(n, d, q);
        CHECK(s.begin == std::min(n, next));
        CHECK(s.size() <= parallel::shard_size(n, d));
        covered += s.size();
        next = std::max(next, s.end);
      }
      CHECK(covered == n);
      CHECK(parallel::shard_size(n, d) == (n + d - 1) / d);
    }
  CHECK(parallel::intersect({0, 10}, {5, 20}).size() == 5);
  CHECK(parallel::intersect({0, 10}, {12, 20}).size() == 0);
}

TEST_CASE("data parallel: ZeRO-1's reduce-scatter and parameter all-gather in the plan", "[data_parallel]") {
  const Job job = parse_job(kJob, "w.toml", {"model.hidden=2048", "model.heads=16", "model.layers=8", "device.backend=\"sim\"",
                                             "run.pp2_dp2.grad_sync=\"after_flush\""});
  const RunPlan plan = plan_run(job, job.runs[1]);  // optimizer_sharding = "zero1", d = 2
  const StateBytes per = state_bytes_per_param(job.train.optimizer, plan.storage_dtype);
  for (const StagePlan& sp : plan.stages) {
    INFO("stage " << sp.stage);
    auto by_hand = [&](parallel::Collective kind, std::int64_t bytes) {
      double t = 0.0;
      for (std::int64_t off = 0; off < bytes; off += static_cast<std::int64_t>(parallel::kGradBucketBytes))
        t += parallel::ring_time_s(kind, std::min<std::uint64_t>(parallel::kGradBucketBytes, static_cast<std::uint64_t>(bytes - off)),
                                   2, job.device.sim_link_latency_us * 1e-6, job.device.sim_link_gbps);
      return t;
    };
    const double reduce = by_hand(parallel::Collective::reduce_scatter, sp.grad_sync.bytes);
    const double gather = by_hand(parallel::Collective::all_gather, sp.cost.params * per.params);
    CHECK(sp.grad_sync.end_s - sp.grad_sync.launch_s == Approx(reduce).epsilon(1e-12));
    CHECK(sp.grad_sync.gather_s == Approx(gather).epsilon(1e-12));
    CHECK(sp.grad_sync.sync_s() == Approx(reduce + gather).epsilon(1e-12));
    CHECK(sp.grad_sync.recorded_exposed_s() == Approx(reduce + gather).epsilon(1e-12));  // after the flush: all of it
    // Half an all-reduce's link time for d = 2, latencies aside.
    CHECK(reduce == Approx(0.5 * by_hand(parallel::Collective::all_reduce, sp.grad_sync.bytes)).epsilon(0.01));
  }
}

// Nodes on the modelled machine (device.ranks_per_node): a stage's data group
// on one node reduces over the sim link, one spanning nodes over the
// inter-node link; unset inter-node keys fall back to the sim link's.
TEST_CASE("data parallel: a data group across nodes reduces over the inter-node link", "[data_parallel]") {
  std::vector<std::string> set{"model.hidden=2048", "model.heads=16", "model.layers=8", "device.backend=\"sim\"",
                               "run.pp2_dp2.optimizer_sharding=\"none\"", "run.pp2_dp2.grad_sync=\"after_flush\""};
  // 2 stages x 2 replicas, Megatron's order: stage 0 = ranks 0-1, stage 1 = ranks 2-3.
  const Job one_node = parse_job(kJob, "w.toml", set);
  for (const char* s : {"device.ranks_per_node=3", "device.sim_inter_node_gbps=25", "device.sim_inter_node_latency_us=50"})
    set.emplace_back(s);
  const Job three = parse_job(kJob, "w.toml", set);
  // Nodes {0,1,2} and {3}: stage 0's group is on node 0, stage 1's spans both.
  const parallel::Link l0 = parallel::data_group_link(three.device, three.runs[1], 0);
  const parallel::Link l2 = parallel::data_group_link(three.device, three.runs[1], 2);
  CHECK_FALSE(l0.inter_node);
  CHECK(l0.gbps == three.device.sim_link_gbps);
  CHECK(l0.latency_s == three.device.sim_link_latency_us * 1e-6);
  CHECK(l2.inter_node);
  CHECK(l2.gbps == 25.0);
  CHECK(l2.latency_s == Approx(50e-6));
  const RunPlan before = plan_run(one_node, one_node.runs[1]), after = plan_run(three, three.runs[1]);
  CHECK(after.stages[0].grad_sync.sync_s() == before.stages[0].grad_sync.sync_s());
  CHECK_FALSE(after.stages[0].grad_sync.inter_node);
  CHECK(after.stages[1].grad_sync.inter_node);
  CHECK(after.stages[1].grad_sync.sync_s() > 3.9 * before.stages[1].grad_sync.sync_s());  // a quarter of the bandwidth
  CHECK(after.step_s > before.step_s);
  // tp-pp-dp: replica r's pipeline is ranks 2r, 2r+1, so each stage's group {s, s+2} spans nodes 0 and 1 only
  // for stage 1 ({1, 3}); stage 0's {0, 2} is on node 0.
  RunSpec pp_dp = three.runs[1];
  pp_dp.rank_order = RankOrder::tp_pp_dp;
  CHECK_FALSE(parallel::data_group_link(three.device, pp_dp, 0).inter_node);
  CHECK(parallel::data_group_link(three.device, pp_dp, 1).inter_node);
  // Unset inter-node keys: the sim link's figures, the flag still set.
  Job plain = three;
  plain.device.sim_inter_node_gbps = plain.device.sim_inter_node_latency_us = -1.0;
  const parallel::Link same = parallel::data_group_link(plain.device, plain.runs[1], 2);
  CHECK(same.inter_node);
  CHECK(same.gbps == plain.device.sim_link_gbps);
  // The keys are checked, with file:line, and fingerprinted only when set.
  CHECK_THAT(error_of({"device.ranks_per_node=0"}), Catch::Contains("device.ranks_per_node"));
  CHECK_THAT(error_of({"device.sim_inter_node_gbps=0"}), Catch::Contains("device.sim_inter_node_gbps"));
  CHECK(workload_keys(one_node, one_node.runs[1]).count("device.ranks_per_node") == 0);
  CHECK(workload_keys(three, three.runs[1]).at("device.ranks_per_node") == "3");
}

// The cuda backend runs plain replicas (gradients host-staged over MPI); its
// optimizer is not sharded yet, so a ZeRO-1 run there is skipped with the reason.
TEST_CASE("data parallel: which backends execute replicas and each sharding", "[data_parallel]") {
  const Job job = parse_job(kJob, "w.toml");
  RunSpec run = job.runs[1];  // 2 x 2, zero1, grad_sync overlap: the parameters gathered inside the forward
  CHECK_THAT(not_executed(run, BackendKind::cuda), Catch::Contains("not inside the forward"));
  CHECK(not_executed(run, BackendKind::cpu).empty());
  CHECK(not_executed(run, BackendKind::sim).empty());
  run.grad_sync = GradSync::after_chunk;  // gathered after the optimizer: cuda runs it
  CHECK(not_executed(run, BackendKind::cuda).empty());
  for (OptimizerSharding s : {OptimizerSharding::zero2, OptimizerSharding::fsdp}) {
    run.optimizer_sharding = s;
    CHECK_THAT(not_executed(run, BackendKind::cuda), Catch::Contains("shards only its optimizer"));
    CHECK(not_executed(run, BackendKind::sim).empty());
  }
  // The cpu backend keeps a chunk's gathered parameters: FSDP resharding is modelled only.
  run.fsdp_reshard_after_forward = true;
  CHECK_THAT(not_executed(run, BackendKind::cpu), Catch::Contains("fsdp_reshard_after_forward"));
  run.fsdp_reshard_after_forward = false;
  CHECK(not_executed(run, BackendKind::cpu).empty());
  run.optimizer_sharding = OptimizerSharding::none;
  CHECK(not_executed(run, BackendKind::cuda).empty());
  CHECK(not_executed(job.runs[0], BackendKind::cuda).empty());
}

TEST_CASE("grad buckets: Megatron-Core's default size, whole layers in backward order", "[data_parallel][grad_buckets]") {
  using parallel::GradBucket;
  using parallel::GradLayer;
  // max(40M, 1M x d) parameters, at 4 bytes per gradient element.
  CHECK(parallel::default_grad_bucket_bytes(8, 4) == 160'000'000ull);
  CHECK(parallel::default_grad_bucket_bytes(40, 4) == 160'000'000ull);
  CHECK(parallel::default_grad_bucket_bytes(64, 4) == 256'000'000ull);
  CHECK(parallel::default_grad_bucket_bytes(64, 2) == 128'000'000ull);
  // A head of 50, four blocks of 30, an embedding of 50 parameters (backward
  // order), each block costing 2, the head 1, the embedding nothing; buckets
  // of at least 60 elements × 4 bytes.
  const std::vector<GradLayer> layers{{50, 1.0}, {30, 2.0}, {30, 2.0}, {30, 2.0}, {30, 2.0}, {50, 0.0}};
  const std::vector<GradBucket> b = parallel::grad_buckets(layers, 240, 4);
  REQUIRE(b.size() == 3);
  CHECK((b[0].first == 0 && b[0].last == 1 && b[0].params == 80 && b[0].bytes == 320));  // head + the last block
  CHECK((b[1].first == 2 && b[1].last == 3 && b[1].params == 60));
  CHECK((b[2].first == 4 && b[2].last == 5 && b[2].params == 80));  // what is left: the first block and the embedding
  CHECK(b[0].ready == Approx(3.0 / 9.0));
  CHECK(b[1].ready == Approx(7.0 / 9.0));
  CHECK(b[2].ready == 1.0);  // the last bucket at the action's end
  std::int64_t total = 0;
  for (const auto& k : b) total += k.params;
  CHECK(total == 220);
  // A lead (full recomputation's forward) delays every bucket but the last.
  const std::vector<GradBucket> led = parallel::grad_buckets(layers, 240, 4, 9.0);
  CHECK(led[0].ready == Approx(12.0 / 18.0));
  CHECK(led[2].ready == 1.0);
  // One bucket when it holds the whole chunk; none without parameters.
  CHECK(parallel::grad_buckets(layers, 1ull << 30, 4).size() == 1);
  CHECK(parallel::grad_buckets({{0, 1.0}}, 240, 4).empty());
}

TEST_CASE("grad_sync overlap: the planner launches buckets inside the last backward, earlier than after_chunk",
          "[data_parallel][grad_buckets]") {
  Job job = load_job(std::string(PIPEBENCH_SOURCE_DIR) + "/tests/data/parallel/dp_sim_virtual.toml");
  RunSpec run = job.runs.at(0);
  run.data_parallel = 4;
  run.grad_bucket_bytes = 64 << 10;  // several buckets per chunk
  run.grad_sync = GradSync::after_chunk;
  const RunPlan after = plan_run(job, run);
  run.grad_sync = GradSync::overlap;
  const RunPlan inside = plan_run(job, run);
  REQUIRE(inside.sync.inside);
  for (std::size_t r = 0; r < inside.stages.size(); ++r) {
    INFO("rank " << r);
    const GradSyncPlan& a = after.stages[r].grad_sync;
    const GradSyncPlan& g = inside.stages[r].grad_sync;
    CHECK(g.bytes == a.bytes);
    REQUIRE(g.buckets.size() == static_cast<std::size_t>(inside.schedule.chunks_per_rank));
    std::int64_t params = 0;
    for (const auto& chunk : g.buckets) {
      CHECK(chunk.size() > 1);
      for (const auto& k : chunk) params += k.params;
    }
    std::int64_t stage_params = 0;
    for (int c = 0; c < inside.schedule.chunks_per_rank; ++c)
      stage_params += inside.stage_costs[static_cast<std::size_t>(inside.schedule.virtual_stage(static_cast<int>(r), c))].params;
    CHECK(params == stage_params);
    CHECK(g.launch_s < a.launch_s);  // the first bucket inside the action, before its end
    CHECK(g.end_s <= a.end_s + 1e-12);
    CHECK(g.exposed_s <= a.exposed_s + 1e-12);
  }
  CHECK(inside.step_s <= after.step_s + 1e-12);
}
