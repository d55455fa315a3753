// Workload parsing and validation (SPEC §2): defaults, overrides, and every
// rejection naming file, line and key.
#include <string>

#include <catch2/catch.hpp>

#include "pipebench/core/config.hpp"
#include "pipebench/core/error.hpp"

using namespace pipebench;

namespace {

// Line numbers matter: tests below point at them.
const std::string kBase = R"(schema = 1
[job]
name = "t"
[model]
hidden = 64
layers = 4
heads = 4
seq_len = 16
vocab = 128
[[run]]
name = "base"
pipeline_size = 1
micro_batch_size = 2
num_microbatches = 4
[[run]]
name = "pipe"
pipeline_size = 2
micro_batch_size = 2
num_microbatches = 4
)";

// kBase with `from` replaced by `to` (which must occur).
std::string edit(const std::string& from, const std::string& to) {
  std::string s = kBase;
  const auto pos = s.find(from);
  REQUIRE(pos != std::string::npos);
  return s.replace(pos, from.size(), to);
}

std::string error_of(const std::string& toml, const std::vector<std::string>& overrides = {}) {
  try {
    parse_job(toml, "w.toml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("accepted:\n" << toml);
  return "";
}

}  // namespace

TEST_CASE("a minimal workload gets documented defaults", "[config]") {
  const Job job = parse_job(kBase, "w.toml");
  CHECK(job.name == "t");
  CHECK(job.model.kind == ModelKind::gpt);
  CHECK(job.model.ffn_hidden == 256);
  CHECK(job.model.dtype == DType::fp32);
  CHECK(job.model.seed == 1234);
  CHECK(job.train.optimizer == OptimizerKind::adamw);
  CHECK(job.train.warmup == 2);
  CHECK(job.train.repeats == 5);
  CHECK(job.device.backend == BackendKind::cpu);
  CHECK(job.device.memory_capacity_bytes == 4ull << 30);
  REQUIRE(job.runs.size() == 2);
  CHECK(job.runs[1].schedule == ScheduleKind::one_f_one_b);
  CHECK(job.runs[1].mode == RunMode::train);
  CHECK(job.runs[1].remainder == Remainder::first);
  CHECK(job.runs[1].baseline == "base");  // the pipeline_size = 1 run
  CHECK(job.runs[0].baseline.empty());
  CHECK(job.runs[1].source_line == 15);
  CHECK(job.warnings.empty());
}

TEST_CASE("all keys of SPEC §2 are read", "[config]") {
  const Job job = parse_job(edit("vocab = 128\n", R"(vocab = 128
kind = "gpt"
ffn_hidden = 100
dtype = "bf16"
seed = 7
[train]
optimizer = "sgd"
learning_rate = 0.5
warmup = 0
repeats = 3
grad_clip = 0.0
step_timeout_s = 30
[device]
backend = "sim"
memory_capacity = "1.5GiB"
threads_per_rank = 2
sim_flops_per_s = 1e12
sim_link_latency_us = 0
sim_link_gbps = 25
)") + R"(schedule = "fill_drain"
mode = "train"
layers_per_stage = [3, 1]
layers_per_stage_origin = 1
remainder = "last"
balance_by = "params"
baseline = "base"
)", "w.toml");
  CHECK(job.model.ffn_hidden == 100);
  CHECK(job.model.dtype == DType::bf16);
  CHECK(job.model.seed == 7);
  CHECK(job.train.optimizer == OptimizerKind::sgd);
  CHECK(job.train.learning_rate == 0.5);
  CHECK(job.train.warmup == 0);
  CHECK(job.train.grad_clip == 0.0);
  CHECK(job.train.step_timeout_s == 30.0);
  CHECK(job.device.backend == BackendKind::sim);
  CHECK(job.device.memory_capacity_bytes == 1610612736ull);
  CHECK(job.device.threads_per_rank == 2);
  CHECK(job.device.sim_link_gbps == 25.0);
  const RunSpec& r = job.runs[1];
  CHECK(r.schedule == ScheduleKind::gpipe);
  CHECK(r.layers_per_stage == std::vector<int>{3, 1});
  CHECK(r.layers_per_stage_origin == 1);
  CHECK(r.remainder == Remainder::last);
  CHECK(r.balance_by == BalanceBy::params);
  CHECK(r.baseline == "base");
}

TEST_CASE("overrides (--set) apply to any key before validation and are recorded", "[config][override]") {
  const Job job = parse_job(kBase, "w.toml",
                            {"model.hidden=128", "run.pipe.schedule=gpipe", "device.backend=sim",
                             "run.pipe.layers_per_stage=[1, 3]", "train.learning_rate=2e-3",
                             "device.memory_capacity=8GiB"});
  CHECK(job.model.hidden == 128);
  CHECK(job.runs[1].schedule == ScheduleKind::gpipe);
  CHECK(job.runs[1].layers_per_stage == std::vector<int>{1, 3});
  CHECK(job.device.backend == BackendKind::sim);  // [device] did not exist: created
  CHECK(job.train.learning_rate == 2e-3);
  CHECK(job.device.memory_capacity_bytes == 8ull << 30);
  CHECK(job.overrides.size() == 6);
  CHECK_THAT(job.effective_toml, Catch::Contains("hidden = 128"));
}

TEST_CASE("override errors name the override", "[config][override]") {
  CHECK_THAT(error_of(kBase, {"model.hidden=0"}),
             Catch::Contains("w.toml (--set model.hidden=0): model.hidden: expected a positive integer >= 1, got 0"));
  CHECK_THAT(error_of(kBase, {"model.hiden=3"}), Catch::Contains("model.hiden: unknown key"));
  CHECK_THAT(error_of(kBase, {"run.nope.schedule=gpipe"}), Catch::Contains("no [[run]] named \"nope\""));
  CHECK_THAT(error_of(kBase, {"hidden"}), Catch::Contains("expected dotted.key=value"));
  CHECK_THAT(error_of(kBase, {"job.name.x=1"}), Catch::Contains("\"name\" is not a table"));
  CHECK_THAT(error_of(kBase, {"run.pipe.schedule=zigzag"}),
             Catch::Contains("run.pipe.schedule: unknown value \"zigzag\""));
}

TEST_CASE("invalid workloads are rejected with file, line and key", "[config][invalid]") {
  // unknown key (a typo), in a table and at the top level
  CHECK_THAT(error_of(edit("heads = 4", "heads = 4\nhead_dim = 16")),
             Catch::Contains("w.toml:8: model.head_dim: unknown key"));
  CHECK_THAT(error_of(edit("[[run]]\nname = \"base\"", "[[run]]\nnmae = \"x\"\nname = \"base\"")),
             Catch::Contains("w.toml:11: run.base.nmae: unknown key"));
  CHECK_THAT(error_of("extra = 1\n" + kBase), Catch::Contains("w.toml:1: extra: unknown key"));
  CHECK_THAT(error_of(edit("[job]", "[jobs]\nname = \"x\"\n[job]")), Catch::Contains("jobs: unknown key"));
  // wrong types
  CHECK_THAT(error_of(edit("hidden = 64", "hidden = \"64\"")),
             Catch::Contains("w.toml:5: model.hidden: expected an integer, got a string"));
  CHECK_THAT(error_of(edit("name = \"pipe\"\npipeline_size = 2", "name = \"pipe\"\npipeline_size = 2.0")),
             Catch::Contains("w.toml:17: run.pipe.pipeline_size: expected an integer, got a float"));
  // non-positive sizes
  CHECK_THAT(error_of(edit("seq_len = 16", "seq_len = 0")),
             Catch::Contains("w.toml:8: model.seq_len: expected a positive integer >= 1, got 0"));
  CHECK_THAT(error_of(edit("name = \"pipe\"\npipeline_size = 2\nmicro_batch_size = 2",
                           "name = \"pipe\"\npipeline_size = 2\nmicro_batch_size = -1")),
             Catch::Contains("w.toml:18: run.pipe.micro_batch_size: expected a positive integer >= 1, got -1"));
  CHECK_THAT(error_of(edit("num_microbatches = 4\n[[run]]", "num_microbatches = 0\n[[run]]")),
             Catch::Contains("w.toml:14: run.base.num_microbatches"));
  // layers_per_stage: length, sum, empty stage
  CHECK_THAT(error_of(kBase + "layers_per_stage = [1, 1, 2]\n"),
             Catch::Contains("w.toml:20: run.pipe.layers_per_stage: has 3 entries but pipeline_size = 2"));
  CHECK_THAT(error_of(kBase + "layers_per_stage = [2, 3]\n"),
             Catch::Contains("w.toml:20: run.pipe.layers_per_stage: sums to 5 but model.layers = 4"));
  CHECK_THAT(error_of(kBase + "layers_per_stage = [4, 0]\n"),
             Catch::Contains("w.toml:20: run.pipe.layers_per_stage: stage 1 has 0 layers"));
  CHECK_THAT(error_of(edit("pipeline_size = 2", "pipeline_size = 5")),
             Catch::Contains("w.toml:17: run.pipe.pipeline_size: 5 stages for 4 layers would leave a stage with 0 layers"));
  // hidden % heads
  CHECK_THAT(error_of(edit("heads = 4", "heads = 5")),
             Catch::Contains("w.toml:7: model.heads: hidden (64) must be divisible by heads (5)"));
  // unknown schedule and other enumerations
  CHECK_THAT(error_of(kBase + "schedule = \"interleaved\"\n"),
             Catch::Contains("w.toml:20: run.pipe.schedule: unknown value \"interleaved\" (expected one of \"gpipe\", "
                             "\"fill_drain\", \"1f1b\", \"eager-1f1b\")"));
  CHECK_THAT(error_of(edit("vocab = 128", "vocab = 128\ndtype = \"fp8\"")), Catch::Contains("w.toml:10: model.dtype"));
  CHECK_THAT(error_of(kBase + "remainder = \"middle\"\n"), Catch::Contains("w.toml:20: run.pipe.remainder"));
  CHECK_THAT(error_of(kBase + "layers_per_stage_origin = 2\n"),
             Catch::Contains("w.toml:20: run.pipe.layers_per_stage_origin: expected 0 or 1"));
  // duplicate run names
  CHECK_THAT(error_of(edit("name = \"pipe\"", "name = \"base\"")),
             Catch::Contains("w.toml:16: run.base.name: duplicate run name (first defined at line 10)"));
  // baselines
  CHECK_THAT(error_of(kBase + "baseline = \"nothing\"\n"),
             Catch::Contains("w.toml:20: run.pipe.baseline: no run named \"nothing\""));
  CHECK_THAT(error_of(kBase + "baseline = \"pipe\"\n"), Catch::Contains("cannot be its own baseline"));
  // missing required keys and tables
  CHECK_THAT(error_of(edit("hidden = 64\n", "")), Catch::Contains("w.toml:4: model.hidden: missing required key"));
  CHECK_THAT(error_of(edit("schema = 1\n", "")), Catch::Contains("schema: missing required key"));
  CHECK_THAT(error_of(edit("schema = 1", "schema = 2")), Catch::Contains("w.toml:1: schema: unsupported schema 2"));
  CHECK_THAT(error_of(kBase.substr(0, kBase.find("[[run]]"))), Catch::Contains("run: missing required key"));
  // sizes and names
  CHECK_THAT(error_of(edit("vocab = 128", "vocab = 128\n[device]\nmemory_capacity = \"lots\"")),
             Catch::Contains("w.toml:11: device.memory_capacity: expected a positive size"));
  CHECK_THAT(error_of(edit("name = \"t\"", "name = \"a b\"")), Catch::Contains("w.toml:3: job.name"));
  // TOML syntax errors carry toml11's location
  CHECK_THAT(error_of(edit("hidden = 64", "hidden = ")), Catch::Contains("w.toml: TOML syntax error"));
}

TEST_CASE("warnings: a baseline with a different global batch, cpu with bf16, ignored keys", "[config]") {
  const Job job = parse_job(edit("name = \"pipe\"\npipeline_size = 2\nmicro_batch_size = 2",
                                 "name = \"pipe\"\npipeline_size = 2\nmicro_batch_size = 1"),
                            "w.toml", {"model.dtype=bf16"});
  REQUIRE(job.warnings.size() == 2);
  CHECK_THAT(job.warnings[0], Catch::Contains("cpu backend computes in fp32"));
  CHECK_THAT(job.warnings[1], Catch::Contains("run.pipe: global batch 4 (= 1 x 4) differs from baseline \"base\" (8 = 2 x 4)"));
  const Job inf = parse_job(kBase + "mode = \"inference\"\nschedule = \"gpipe\"\n", "w.toml");
  CHECK_THAT(inf.warnings.at(0), Catch::Contains("run.pipe.schedule: ignored: inference runs use the forward-only schedule"));
  CHECK(inf.runs[1].baseline.empty());  // no inference baseline exists
}

TEST_CASE("device.transport: auto resolves by backend; nccl needs the cuda backend", "[config]") {
  CHECK(parse_job(kBase, "w.toml").device.resolved_transport() == TransportKind::mpi);
  CHECK(parse_job(kBase, "w.toml", {"device.backend=\"cuda\""}).device.resolved_transport() == TransportKind::nccl);
  CHECK(parse_job(kBase, "w.toml", {"device.backend=\"cuda\"", "device.transport=\"mpi\""}).device.resolved_transport() ==
        TransportKind::mpi);
  CHECK_THAT(error_of(kBase, {"device.transport=\"nccl\""}),
             Catch::Contains("device.transport") && Catch::Contains("needs backend = \"cuda\""));
  CHECK_THAT(error_of(kBase, {"device.transport=\"ib\""}), Catch::Contains("device.transport"));
}

TEST_CASE("load_job reads files and reports a missing one", "[config]") {
  CHECK_THROWS_WITH(load_job("/nonexistent/x.toml"), Catch::Contains("/nonexistent/x.toml: cannot open workload file"));
}

TEST_CASE("limits: pipeline_size, num_microbatches and their product are bounded, quoted as written", "[config]") {
  CHECK_THAT(error_of(kBase, {"run.pipe.num_microbatches=2147483647"}),
             Catch::Contains("num_microbatches: expected at most 65536, got 2147483647"));
  CHECK_THAT(error_of(kBase, {"run.pipe.pipeline_size=2000"}), Catch::Contains("pipeline_size: expected at most 1024, got 2000"));
  CHECK_THAT(error_of(kBase, {"model.layers=512", "run.pipe.pipeline_size=512", "run.pipe.num_microbatches=4096"}),
             Catch::Contains("pipeline_size x num_microbatches = 512 x 4096 is above the limit of 1048576"));
  // At the limits themselves: accepted.
  CHECK_NOTHROW(parse_job(kBase, "w.toml", {"model.layers=1024", "run.pipe.pipeline_size=1024", "run.pipe.num_microbatches=1024"}));
  CHECK_NOTHROW(parse_job(kBase, "w.toml", {"run.pipe.num_microbatches=65536"}));
}

TEST_CASE("limits: nesting depth and size of the TOML text, before the parser sees it", "[config]") {
  const std::string deep = "x = " + std::string(20000, '[') + std::string(20000, ']') + "\n";
  CHECK_THAT(error_of(kBase + "[device]\n" + deep), Catch::Contains("w.toml:21: arrays or inline tables nested deeper than 32"));
  CHECK_THAT(error_of(kBase, {"run.pipe.schedule=" + std::string(20000, '[')}),
             Catch::StartsWith("--set run.pipe.schedule=") && Catch::Contains(":1: arrays or inline tables nested deeper than 32"));
  CHECK_THAT(error_of(kBase + "# " + std::string(2 << 20, 'x') + "\n"), Catch::Contains("larger than a workload may be"));
  // Brackets inside strings and comments do not count; 32 levels are fine for the scanner.
  CHECK_NOTHROW(parse_job(
      edit("name = \"t\"", "name = \"t\"\ndescription = \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\" # {{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{"),
      "w.toml"));
}
