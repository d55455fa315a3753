// Workload parsing and validation (SPEC §2): defaults, overrides, and every
// rejection naming file, line and key.
#include <string>

#include <catch2/catch.hpp>

#include "../support/config_text.hpp"

#include "pipebench/core/config.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/core/workload_identity.hpp"

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
std::string edit(const std::string& from, const std::string& to) { return testing::replaced(kBase, from, to); }
using testing::error_of;

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

// The effective TOML (kept in every results file, re-read by report, rerun
// and compare) wrote floats with 17 digits: "learning_rate =
// 0.10000000000000001" in tuned workloads and compare's key table. Now the
// fewest digits that read back as the same double.
TEST_CASE("the effective TOML writes floats short and reads them back exactly", "[config][override]") {
  const Job short_floats = parse_job(kBase, "w.toml", {"train.learning_rate=0.1", "train.grad_clip=2.5"});
  CHECK_THAT(short_floats.effective_toml, Catch::Contains("learning_rate = 0.1\n"));
  CHECK_THAT(short_floats.effective_toml, Catch::Contains("grad_clip = 2.5\n"));
  // 0.1 + 0.2 needs all 17 digits: the document gets them, and the values survive.
  const Job exact = parse_job(kBase, "w.toml", {"train.learning_rate=0.30000000000000004", "train.grad_clip=0.1"});
  const Job again = parse_job(exact.effective_toml, "again.toml");
  CHECK(again.train.learning_rate == 0.1 + 0.2);
  CHECK(again.train.grad_clip == 0.1);
  CHECK(again.effective_toml == exact.effective_toml);
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

// A rule broken by a key's default together with the keys given (found by the
// schedule-file fuzzer, tests/fuzz): the error points at the [[run]] table; it
// used to dereference the missing key's value and crash.
TEST_CASE("a rule broken through a left-out key's default is an error at the table, not a crash", "[config][invalid]") {
  // pipeline_size left out (1): 1 x 64 chunks for 4 layers.
  const std::string chunks = testing::replaced(kBase, "name = \"base\"\npipeline_size = 1\n",
                                               "name = \"base\"\nschedule = \"interleaved-1f1b\"\nvirtual_stages_per_rank = 64\n");
  CHECK_THAT(error_of(chunks), Catch::Contains("w.toml:10: run.base.pipeline_size: 1 stages x 64 chunks = 64 model chunks "
                                               "for 4 layers would leave a chunk with 0 layers"));
  // virtual_stages_per_rank left out (zb-v's 2): 64 x 2 x 65536 actions.
  const std::string actions = edit("name = \"pipe\"\npipeline_size = 2\nmicro_batch_size = 2\nnum_microbatches = 4",
                                   "name = \"pipe\"\npipeline_size = 64\nmicro_batch_size = 2\nnum_microbatches = 65536\n"
                                   "schedule = \"zb-v\"");
  CHECK_THAT(error_of(testing::replaced(actions, "layers = 4", "layers = 128")),
             Catch::Contains("w.toml:15: run.pipe.virtual_stages_per_rank: pipeline_size x virtual_stages_per_rank x "
                             "num_microbatches = 64 x 2 x 65536 is above the limit"));
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
                             "\"fill_drain\", \"1f1b\", \"eager-1f1b\", \"interleaved-1f1b\", \"zb-h1\", \"zb-v\", "
                             "\"looped-bfs\", \"interleaved-zb\", \"dualpipev\", or "
                             "\"file:PATH\" for a CSV schedule)"));
  // DualPipeV: m >= 2p, 2 chunks, no full recomputation (its backward is split).
  CHECK_THAT(error_of(edit("pipeline_size = 2\nmicro_batch_size = 2\nnum_microbatches = 4",
                           "pipeline_size = 2\nmicro_batch_size = 2\nnum_microbatches = 3\nschedule = \"dualpipev\"")),
             Catch::Contains("w.toml:19: run.pipe.num_microbatches: dualpipev needs num_microbatches >= 2 x pipeline_size = 4") &&
                 Catch::Contains("got 3"));
  CHECK_THAT(error_of(kBase + "schedule = \"dualpipev\"\nvirtual_stages_per_rank = 3\n"),
             Catch::Contains("schedule \"dualpipev\" holds 2 model chunk(s) per rank"));
  CHECK_THAT(error_of(kBase + "schedule = \"dualpipev\"\nrecompute = \"full\"\n"), Catch::Contains("run.pipe.recompute"));
  CHECK(parse_job(kBase + "schedule = \"dualpipev\"\n", "w.toml").runs.at(1).virtual_stages_per_rank == 2);
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
  CHECK_THAT(error_of(kBase, {"model.layers=512", "run.pipe.pipeline_size=512", "run.pipe.num_microbatches=16384"}),
             Catch::Contains("pipeline_size x num_microbatches = 512 x 16384 is above the limit of 4194304"));
  // At the limits themselves: accepted.
  CHECK_NOTHROW(parse_job(kBase, "w.toml", {"model.layers=1024", "run.pipe.pipeline_size=1024", "run.pipe.num_microbatches=4096"}));
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

TEST_CASE("limits: model sizes, steps, threads and runs are bounded, quoted as written", "[config]") {
  // Issue 13: hidden >= 2^29 wrapped 4*hidden (the ffn_hidden default) to 0.
  CHECK_THAT(error_of(kBase, {"model.hidden=536870912"}), Catch::Contains("model.hidden: expected at most 1048576, got 536870912"));
  CHECK_THAT(error_of(kBase, {"model.hidden=2147483647", "model.heads=1"}), Catch::Contains("expected at most 1048576"));
  CHECK_THAT(error_of(kBase, {"model.ffn_hidden=4194305"}), Catch::Contains("model.ffn_hidden: expected at most 4194304"));
  CHECK_THAT(error_of(kBase, {"model.layers=65537"}), Catch::Contains("model.layers: expected at most 65536"));
  CHECK_THAT(error_of(kBase, {"model.seq_len=1048577"}), Catch::Contains("model.seq_len: expected at most 1048576"));
  CHECK_THAT(error_of(kBase, {"model.vocab=16777217"}), Catch::Contains("model.vocab: expected at most 16777216"));
  CHECK_THAT(error_of(kBase, {"run.pipe.micro_batch_size=1048577"}),
             Catch::Contains("run.pipe.micro_batch_size: expected at most 1048576"));
  CHECK_THAT(error_of(kBase, {"device.threads_per_rank=1025"}), Catch::Contains("threads_per_rank: expected at most 1024"));
  CHECK_THAT(error_of(kBase, {"train.warmup=50000", "train.repeats=50001"}),
             Catch::Contains("train.repeats: warmup + repeats = 50000 + 50001 is above the limit of 100000 steps"));
  // Steps x 2 x p x m events per run, the reader's bound on a dataset.
  CHECK_THAT(error_of(kBase, {"train.repeats=1000", "run.pipe.num_microbatches=65536"}),
             Catch::Contains("1002 steps x 2 stages x 65536 micro-batches record 262668288 events"));
  // The default ffn_hidden of the largest hidden is in range.
  CHECK(parse_job(kBase, "w.toml", {"model.hidden=1048576"}).model.ffn_hidden == 4194304);
  std::string many = kBase;
  for (int i = 0; i < 1000; ++i) many += "[[run]]\nname = \"r" + std::to_string(i) + "\"\n";
  CHECK_THAT(error_of(many), Catch::Contains("1002 [[run]] tables, above the limit of 1000"));
  // layers_per_stage's length is checked before its elements are read.
  auto array_of = [](int n) {
    std::string a = "layers_per_stage = [1";
    for (int i = 1; i < n; ++i) a += ",1";
    return a + "]";
  };
  CHECK_THAT(error_of(edit("name = \"pipe\"", "name = \"pipe\"\n" + array_of(2000))),
             Catch::Contains("run.pipe.layers_per_stage: has 2000 entries but pipeline_size = 2"));
  // A long array is refused before toml11 parses it (100,000 elements took it 7 s).
  CHECK_THAT(error_of(edit("name = \"pipe\"", "name = \"pipe\"\n" + array_of(300000))),
             Catch::Contains("w.toml:17: an array or inline table with more than 4096 elements"));
  std::string at_limit = "x = [1";  // 4096 elements pass the scanner and reach the key check
  for (int i = 1; i < 4096; ++i) at_limit += ",1";
  CHECK_THAT(error_of(kBase + at_limit + "]\n"), Catch::Contains("run.pipe.x: unknown key"));
}

TEST_CASE("limits: integers and floats outside their type are quoted, not clamped", "[config]") {
  // toml11 clamps these to INT64_MAX / DBL_MAX; the message quotes the text.
  CHECK_THAT(error_of(kBase, {"device.memory_capacity=18446744073709551615"}),
             Catch::Contains("device.memory_capacity: expected a positive size such as \"4GiB\", \"512MB\" or a byte count, got "
                             "18446744073709551615"));
  CHECK_THAT(error_of(kBase, {"model.seed=99_999_999_999_999_999_999"}),
             Catch::Contains("model.seed: expected an integer, got 99_999_999_999_999_999_999, outside the range"));
  CHECK_THAT(error_of(kBase, {"model.hidden=-9223372036854775809"}), Catch::Contains("outside the range of 64-bit"));
  CHECK_THAT(error_of(kBase, {"model.hidden=0x7fffffffffffffff"}), Catch::Contains("expected at most 1048576, got 0x7fffffffffffffff"));
  CHECK_THAT(error_of(kBase, {"device.memory_capacity=2EiB"}), Catch::Contains("expected a positive size"));
  CHECK_THAT(error_of(kBase, {"device.memory_capacity=2000000000000000000"}), Catch::Contains("above the limit of 1 EiB"));
  CHECK_THAT(error_of(kBase, {"device.sim_flops_per_s=1e400"}), Catch::Contains("device.sim_flops_per_s: expected a finite number > 0, got 1e400"));
  CHECK_THAT(error_of(edit("vocab = 128", "vocab = 1_000_000_000")), Catch::Contains("w.toml:9: model.vocab: expected at most 16777216, got 1_000_000_000"));
  // The largest int64 written as such is a value, not an overflow.
  CHECK(parse_job(kBase, "w.toml", {"model.seed=9223372036854775807"}).model.seed == 9223372036854775807ull);
}

TEST_CASE("names and free text: bounded, no control characters reach a message", "[config]") {
  CHECK_THAT(error_of(edit("name = \"t\"", "name = \"" + std::string(101, 'a') + "\"")),
             Catch::Contains("job.name: expected 1 to 100 letters"));
  CHECK_THAT(error_of(edit("name = \"t\"", "name = \"t\"\ndescription = \"red \\u001b[31m\"")),
             Catch::Contains("job.description: control character \\x1b"));
  CHECK_NOTHROW(parse_job(edit("name = \"t\"", "name = \"t\"\ndescription = \"two\\nlines\\tand a tab\""), "w.toml"));
  // A run named with an ESC or a NUL: the message neither carries it raw nor is cut.
  const std::string esc = error_of(edit("name = \"pipe\"", "name = \"p\\u001b[31m\"\nfoo = 1"));
  CHECK_THAT(esc, Catch::Contains("run[1].name: expected 1 to 100 letters") && !Catch::Contains("\x1b"));
  const std::string nul = error_of(edit("name = \"pipe\"", "name = \"p\\u0000q\""));
  CHECK_THAT(nul, Catch::Contains("run[1].name: expected"));
  // --set values and keys are escaped in messages too.
  CHECK_THAT(error_of(kBase, {"model.kind=a\x1b[31m"}),
             Catch::Contains("(--set model.kind=a\\x1b[31m): model.kind: unknown value \"a\\x1b[31m\"") && !Catch::Contains("\x1b"));
  CHECK_THAT(error_of(kBase, {"run.p\x1b.x=1"}), Catch::Contains("no [[run]] named \"p\\x1b\""));
  CHECK_THAT(error_of(kBase + "\"k\\u001b\" = 1\n"), Catch::Contains("run.pipe.k\\x1b: unknown key"));
}

TEST_CASE("Job::locations: where each given key came from", "[config]") {
  const Job job = parse_job(kBase, "w.toml", {"model.hidden=128", "run.pipe.num_microbatches=8"});
  CHECK(job.locations.at("model.layers") == "w.toml:6");
  CHECK(job.locations.at("model.hidden") == "w.toml (--set model.hidden=128)");
  CHECK(job.locations.at("run.pipe.num_microbatches") == "w.toml (--set run.pipe.num_microbatches=8)");
  CHECK(job.locations.at("run.base.micro_batch_size") == "w.toml:13");
  CHECK(job.locations.count("model.ffn_hidden") == 0);  // not given: the default
}

TEST_CASE("workload fingerprint: what a step measures, not how the job is named or repeated", "[config][series]") {
  const auto fp = [](const std::string& toml, const std::vector<std::string>& sets, const char* run = "pipe") {
    const Job job = parse_job(toml, "w.toml", sets);
    return workload_fingerprint(workload_keys(job, *job.find_run(run)));
  };
  const std::string base = fp(kBase, {});
  CHECK(base.size() == 16);
  CHECK(fp(kBase, {}) == base);  // stable
  // Defaults written out, names, descriptions, repeat counts, timeouts and the
  // simulated machine's condition do not change what is measured.
  for (const char* same : {"model.ffn_hidden=256", "model.kind=\"gpt\"", "job.name=\"other\"", "job.description=\"x\"",
                                  "train.warmup=7", "train.repeats=9", "train.step_timeout_s=5", "device.sim_load=2",
                                  "device.sim_jitter=0.1", "device.sim_jitter_seed=4", "run.pipe.layers_per_stage_origin=1",
                                  "run.pipe.baseline=\"base\"", "device.transport=\"mpi\""}) {
    INFO(same);
    CHECK(fp(kBase, {same}) == base);
  }
  for (const char* other : {"run.pipe.micro_batch_size=4", "run.pipe.num_microbatches=8", "model.hidden=128",
                                   "run.pipe.schedule=\"gpipe\"", "train.optimizer=\"sgd\"", "device.backend=\"sim\"",
                                   "device.memory_capacity=\"1GiB\"", "run.pipe.layers_per_stage=[1, 3]", "model.seed=5"}) {
    INFO(other);
    CHECK(fp(kBase, {other}) != base);
  }
  // The name of the run is not part of it either: the run table's other run has another fingerprint only by its keys.
  CHECK(fp(kBase, {}, "base") != base);
  CHECK(fp(kBase, {"run.base.pipeline_size=2"}, "base") == base);

  const Job a = parse_job(kBase, "w.toml"), b = parse_job(kBase, "w.toml", {"run.pipe.micro_batch_size=4", "model.dtype=\"bf16\""});
  const WorkloadKeys ka = workload_keys(a, *a.find_run("pipe")), kb = workload_keys(b, *b.find_run("pipe"));
  CHECK(describe_changes(ka, kb) == "model.dtype fp32 → bf16, micro_batch_size 2 → 4");
  CHECK(describe_changes(ka, ka).empty());
  CHECK(parse_workload_text(workload_text(kb)) == kb);
}

TEST_CASE("device.sim_load and sim_jitter: bounded, the machine's condition", "[config]") {
  CHECK(parse_job(kBase, "w.toml", {"device.sim_load=2.5"}).device.sim_load == 2.5);
  CHECK_THAT(error_of(kBase, {"device.sim_load=0"}), Catch::Contains("device.sim_load: expected a finite number > 0"));
  CHECK_THAT(error_of(kBase, {"device.sim_jitter=1.5"}), Catch::Contains("device.sim_jitter: expected at most 1"));
  CHECK_THAT(error_of(kBase, {"device.sim_jitter_seed=-1"}), Catch::Contains("sim_jitter_seed: expected a non-negative"));
}

TEST_CASE("device.sim_clock: wall or virtual, virtual on the sim backend only, a key of the workload", "[config][series]") {
  CHECK(parse_job(kBase, "w.toml").device.sim_clock == SimClock::wall);
  const Job v = parse_job(kBase, "w.toml", {"device.backend=\"sim\"", "device.sim_clock=\"virtual\""});
  CHECK(v.device.sim_clock == SimClock::virtual_time);
  CHECK_THAT(error_of(kBase, {"device.sim_clock=\"virtual\""}),
             Catch::Contains("device.sim_clock: \"virtual\" models time and needs backend = \"sim\" (the cpu backend"));
  CHECK_THAT(error_of(kBase, {"device.sim_clock=\"fast\""}), Catch::Contains("device.sim_clock"));
  // Virtual and wall measure different things (the executor's overhead or not):
  // different series; wall adds no key, so older series keep their fingerprint.
  const Job w = parse_job(kBase, "w.toml", {"device.backend=\"sim\""});
  const Job w2 = parse_job(kBase, "w.toml", {"device.backend=\"sim\"", "device.sim_clock=\"wall\""});
  CHECK(workload_keys(w, *w.find_run("pipe")).count("device.sim_clock") == 0);
  CHECK(workload_keys(w2, *w2.find_run("pipe")) == workload_keys(w, *w.find_run("pipe")));
  CHECK(workload_keys(v, *v.find_run("pipe")).at("device.sim_clock") == "virtual");
}

TEST_CASE("partition names the split rule in one word", "[config]") {
  auto run_of = [](const std::string& extra) { return parse_job(kBase + extra, "w.toml").runs[1]; };
  CHECK(run_of("partition = \"balanced-cost\"\n").remainder == Remainder::balanced);
  CHECK(run_of("partition = \"balanced-cost\"\n").balance_by == BalanceBy::flops);
  CHECK(run_of("partition = \"balanced-params\"\n").balance_by == BalanceBy::params);
  CHECK(run_of("partition = \"remainder-last\"\n").remainder == Remainder::last);
  CHECK(run_of("partition = \"remainder-first\"\n").remainder == Remainder::first);
  CHECK_THAT(error_of(kBase + "partition = \"balanced-cost\"\nremainder = \"last\"\n"),
             Catch::Contains("run.pipe.partition: give partition or remainder, not both"));
  CHECK_THAT(error_of(kBase + "partition = \"even\"\n"),
             Catch::Contains("w.toml:20: run.pipe.partition: unknown value \"even\""));
}

// Issue 66 item 8: a modelled speed whose arithmetic overflows (1e-300 FLOP/s
// printed "-nan" and "inf s" in plan) is refused with the key and the bounds.
TEST_CASE("modelled speeds and latencies outside what any machine has are refused", "[config]") {
  CHECK_THAT(error_of(kBase, {"device.sim_flops_per_s=1e-300"}),
             Catch::Contains("device.sim_flops_per_s: expected at least 1 FLOP/s, got 1e-300"));
  CHECK_THAT(error_of(kBase, {"device.sim_link_gbps=1e-300"}), Catch::Contains("device.sim_link_gbps: expected at least 1e-09 Gbit/s"));
  CHECK_THAT(error_of(kBase, {"device.sim_inter_node_gbps=1e-30"}), Catch::Contains("device.sim_inter_node_gbps"));
  CHECK_THAT(error_of(kBase, {"device.sim_link_latency_us=1e300"}), Catch::Contains("device.sim_link_latency_us"));
  // Inside the bounds, and a latency of 0, are accepted as before.
  CHECK(parse_job(kBase, "w.toml", {"device.sim_flops_per_s=1e3", "device.sim_link_latency_us=0"}).device.sim_flops_per_s == 1e3);
  CHECK(parse_job(kBase, "w.toml", {"device.sim_flops_per_s=1e30", "device.sim_link_gbps=1e12"}).device.sim_link_gbps == 1e12);
}
