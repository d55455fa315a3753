// The planner: memory estimates equal the model formulas times the schedule's
// peaks, capacity warnings, bubbles, and the JSON document's contract.
#include <algorithm>
#include <string>

#include <catch2/catch.hpp>

#include "pipebench/core/checked.hpp"
#include "pipebench/core/config.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/model/model.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/plan/plan_format.hpp"

using namespace pipebench;

namespace {
const std::string kJob = R"(schema = 1
[job]
name = "p"
[model]
attention = "materialized"  # the cpu workspace's s x s scratch below
hidden = 64
layers = 8
heads = 4
seq_len = 32
vocab = 512
[device]
memory_capacity = "64MiB"
[[run]]
name = "base"
micro_batch_size = 2
num_microbatches = 6
[[run]]
name = "pipe"
pipeline_size = 4
micro_batch_size = 2
num_microbatches = 6
schedule = "1f1b"
[[run]]
name = "fill"
pipeline_size = 4
micro_batch_size = 2
num_microbatches = 6
schedule = "gpipe"
[[run]]
name = "serve"
mode = "inference"
pipeline_size = 2
micro_batch_size = 2
num_microbatches = 6
)";
}  // namespace

TEST_CASE("memory estimate: params, grads, AdamW state, activations at the schedule's peak", "[plan]") {
  const Job job = parse_job(kJob, "p.toml");
  const JobPlan plan = plan_job(job);
  REQUIRE(plan.runs.size() == 4);
  const ModelDesc model(job.model, DType::fp32);
  const RunPlan& pipe = plan.runs[1];
  REQUIRE(pipe.stages.size() == 4);
  for (int s = 0; s < 4; ++s) {
    const StagePlan& sp = pipe.stages[static_cast<std::size_t>(s)];
    const Cost c = model.stage(2, 2, s == 0, s == 3);
    CHECK(sp.params_bytes == 4 * c.params);
    CHECK(sp.grads_bytes == 4 * c.params);
    CHECK(sp.optimizer_bytes == 8 * c.params);
    CHECK(sp.activation_bytes_per_microbatch == c.activation_bytes);
    CHECK(sp.peak_live_activations == std::min(4 - s, 6));
    CHECK(sp.activations_peak_bytes == sp.peak_live_activations * c.activation_bytes);
    // comm, boundary = 2*32*64*4 bytes: a receive buffer per neighbour, and
    // 1F1B's send buffers (send_slots.hpp): p - s activations, p - s + 1
    // gradients — not m each
    const int tensors = (s > 0 ? 1 + (4 - s + 1) : 0) + (s < 3 ? 1 + (4 - s) : 0);
    CHECK(sp.comm_bytes == tensors * 16384);
    // cpu backend (the default): its backward workspace, tokens*(f + 7h) + s^2 floats
    CHECK(sp.workspace_bytes == 4 * (2 * 32 * (256 + 7 * 64) + 32 * 32));
    CHECK(sp.total_bytes == 16 * c.params + sp.activations_peak_bytes + sp.comm_bytes + sp.workspace_bytes);
  }
  // GPipe keeps all m micro-batches on every stage.
  for (const auto& sp : plan.runs[2].stages) CHECK(sp.peak_live_activations == 6);
  // Inference: no gradients or optimizer state, one micro-batch in flight.
  for (const auto& sp : plan.runs[3].stages) {
    CHECK(sp.grads_bytes == 0);
    CHECK(sp.optimizer_bytes == 0);
    CHECK(sp.peak_live_activations == 0);
    CHECK(sp.activations_peak_bytes == sp.activation_bytes_per_microbatch);
  }
  CHECK(pipe.bubble_analytic == Approx(3.0 / 9.0));
  CHECK(pipe.unit.bubble == Approx(3.0 / 9.0));
  CHECK(pipe.unit.makespan == 18.0);
  CHECK(plan.runs[3].unit.makespan == 7.0);
}

TEST_CASE("full recomputation: every piece's input kept, one piece's activations held", "[plan]") {
  // Megatron-LM's per-layer checkpoints (docs/model.md). 8 layers on 4
  // stages of 1F1B, 6 micro-batches: rank s holds up to 4 - s micro-batches
  // as their kept inputs, and one piece runs on top of them.
  const Job job = parse_job(kJob, "p.toml", {"run.pipe.recompute=\"full\""});
  const ModelDesc model(job.model, DType::fp32);
  const std::int64_t boundary = 2 * 32 * 64 * 4, tokens = 2 * 32;
  const std::int64_t block = model.block(2).activation_bytes;
  CHECK(model.recompute_kept_bytes(2, 2, false, false) == 2 * boundary);
  CHECK(model.recompute_kept_bytes(2, 2, true, false) == 4 * tokens + 2 * boundary);
  CHECK(model.recompute_kept_bytes(2, 2, false, true) == 3 * boundary);
  CHECK(model.recompute_piece_bytes(2, 2, false, false) == block);
  CHECK(model.recompute_piece_bytes(2, 2, false, true) == std::max(block, model.head(2).activation_bytes));
  CHECK(model.recompute_piece_bytes(2, 0, true, false) == model.embedding(2).activation_bytes);
  const RunPlan pipe = plan_job(job, {"pipe"}).runs.at(0);
  REQUIRE(pipe.stages.size() == 4);
  for (int s = 0; s < 4; ++s) {
    const StagePlan& sp = pipe.stages[static_cast<std::size_t>(s)];
    const std::int64_t kept = model.recompute_kept_bytes(2, 2, s == 0, s == 3);
    const std::int64_t piece = model.recompute_piece_bytes(2, 2, s == 0, s == 3);
    CHECK(sp.activations_peak_bytes == (4 - s) * kept + piece);
    CHECK(piece < model.stage(2, 2, s == 0, s == 3).activation_bytes);  // never the chunk's whole
  }
}

TEST_CASE("memory estimate on the cuda backend: bf16 state bytes and its workspace", "[plan]") {
  const Job job = parse_job(kJob, "p.toml", {"device.backend=\"cuda\"", "model.dtype=\"bf16\""});
  const JobPlan plan = plan_job(job, {"pipe", "serve"});
  const ModelDesc model(job.model, DType::bf16);
  REQUIRE(plan.runs[0].storage_dtype == DType::bf16);
  for (int s = 0; s < 4; ++s) {
    const StagePlan& sp = plan.runs[0].stages[static_cast<std::size_t>(s)];
    const Cost c = model.stage(2, 2, s == 0, s == 3);
    CHECK(sp.params_bytes == 2 * c.params);
    CHECK(sp.grads_bytes == 4 * c.params);       // accumulated in fp32
    CHECK(sp.optimizer_bytes == 12 * c.params);  // fp32 master + AdamW m, v
    const int tensors = (s > 0 ? 1 + (4 - s + 1) : 0) + (s < 3 ? 1 + (4 - s) : 0);  // as above
    CHECK(sp.comm_bytes == tensors * 8192);                                          // boundary 2*32*64*2 bytes
    // norm partials (2 KiB) + fp32 token losses + the embedding's int32 token
    // order 4*(3*tokens + 4) + bf16 temporaries tokens*(f + 7h) + heads*s^2
    CHECK(sp.workspace_bytes == 2048 + 4 * 64 + 4 * (3 * 64 + 4) + 2 * (64 * (256 + 7 * 64) + 4 * 32 * 32));
  }
  for (const StagePlan& sp : plan.runs[1].stages) CHECK(sp.workspace_bytes == 2048 + 4 * 64);  // inference
  // The sim backend models no workspace.
  const Job sim = parse_job(kJob, "p.toml", {"device.backend=\"sim\""});
  CHECK(plan_job(sim, {"pipe"}).runs[0].stages[0].workspace_bytes == 0);
}

TEST_CASE("capacity: above 90% a stage is flagged", "[plan]") {
  const Job tight = parse_job(kJob, "p.toml", {"device.memory_capacity=2MiB"});
  const JobPlan plan = plan_job(tight, {"pipe"});
  REQUIRE(plan.runs.size() == 1);
  CHECK_FALSE(plan.runs[0].warnings.empty());
  CHECK_THAT(plan.runs[0].warnings[0], Catch::Contains("run pipe stage 0") && Catch::Contains("it will not fit"));
  CHECK(plan.runs[0].stages[0].capacity_fraction > 1.0);
  CHECK(plan_job(parse_job(kJob, "p.toml"), {"pipe"}).runs[0].warnings.empty());
}

TEST_CASE("cost-weighted simulation uses FLOPs at sim_flops_per_s and the link model", "[plan]") {
  const Job job = parse_job(kJob, "p.toml", {"device.sim_flops_per_s=1e9", "device.sim_link_latency_us=10",
                                             "device.sim_link_gbps=8"});
  const RunPlan rp = plan_run(job, job.runs[1]);
  const ModelDesc model(job.model, DType::fp32);
  CHECK(rp.costs.forward[1] == Approx(model.stage(2, 2, false, false).forward_flops / 1e9));
  CHECK(rp.costs.backward[3] == Approx(model.stage(2, 2, false, true).backward_flops / 1e9));
  // 10 us + 2*32*64*4 bytes * 8 bits / 8e9 bit/s
  CHECK(rp.costs.transfer == Approx(10e-6 + 16384.0 * 8 / 8e9));
  CHECK(rp.simulated.completed);
  CHECK(rp.simulated.makespan > 0.0);
}

// tune plans a fitting layout with the schedule it already built for the
// memory probe: the plan must be the one plan_run builds itself.
TEST_CASE("plan_run with the schedule and liveness given is the plan it builds", "[plan]") {
  const Job job = parse_job(kJob, "t.toml");
  for (const char* name : {"pipe", "fill", "serve"}) {
    const RunSpec& run = *job.find_run(name);
    const Schedule schedule = run_schedule(run);
    const ScheduleLiveness liveness(schedule);
    const RunPlan own = plan_run(job, run), given = plan_run(job, run, schedule, liveness);
    INFO(name);
    CHECK(given.iteration_s == own.iteration_s);
    CHECK(given.simulated.makespan == own.simulated.makespan);
    CHECK(given.schedule.actions == own.schedule.actions);
    REQUIRE(given.stages.size() == own.stages.size());
    for (std::size_t s = 0; s < own.stages.size(); ++s) {
      CHECK(given.stages[s].total_bytes == own.stages[s].total_bytes);
      CHECK(given.stages[s].comm_bytes == own.stages[s].comm_bytes);
    }
  }
}

TEST_CASE("plan_job rejects unknown run names", "[plan]") {
  const Job job = parse_job(kJob, "p.toml");
  CHECK_THROWS_AS(plan_job(job, {"nope"}), ConfigError);
  CHECK_THROWS_WITH(plan_job(job, {"nope"}), Catch::Contains("runs: base, pipe, fill, serve"));
}

TEST_CASE("JSON plan carries the documented keys", "[plan][json]") {
  const Job job = parse_job(kJob, "p.toml");
  const std::string json = format_plan_json(plan_job(job, {"pipe"}));
  for (const char* key : {"\"name\": \"pipe\"", "\"pipeline_size\": 4", "\"num_microbatches\": 6",
                          "\"schedule\": \"1f1b\"", "\"layers_per_stage\"", "\"stage_params\"", "\"bubble_analytic\"",
                          "\"unit\"", "\"time_steps\": 18", "\"simulated\"", "\"makespan_s\"", "\"memory\"",
                          "\"params_bytes\"", "\"grads_bytes\"", "\"optimizer_bytes\"",
                          "\"activation_bytes_per_microbatch\"", "\"activations_peak_bytes\"", "\"total_bytes\"",
                          "\"peak_live_activations\": [\n"})
    CHECK_THAT(json, Catch::Contains(key));
}

TEST_CASE("JSON plan streamed to a file is the text built in memory, byte for byte", "[plan][json]") {
  const Job job = parse_job(kJob, "p.toml");
  // Large enough for the streaming writer to flush (about 1 MiB at a time) many times.
  const Job big = parse_job(kJob, "p.toml", {"run.pipe.num_microbatches=20000", "model.layers=64",
                                              "run.pipe.pipeline_size=16"});
  for (const Job* j : {&job, &big}) {
    const JobPlan plan = plan_job(*j);
    const std::string expected = format_plan_json(plan);
    std::FILE* f = std::tmpfile();
    REQUIRE(f);
    write_plan_json(plan, f);
    std::string got(static_cast<std::size_t>(std::ftell(f)), '\0');
    std::rewind(f);
    REQUIRE(std::fread(got.data(), 1, got.size(), f) == got.size());
    std::fclose(f);
    CHECK(got.size() == expected.size());
    CHECK(got == expected);
  }
}

TEST_CASE("text plan: partition table, memory table, grid or summary", "[plan][text]") {
  const Job job = parse_job(kJob, "p.toml");
  const std::string text = format_plan_text(plan_job(job, {"pipe"}));
  CHECK_THAT(text, Catch::Contains("layers (0-based)"));
  CHECK_THAT(text, Catch::Contains("  0     0-1"));
  CHECK_THAT(text, Catch::Contains("embedding"));
  CHECK_THAT(text, Catch::Contains("final norm + LM head + loss"));
  CHECK_THAT(text, Catch::Contains("bubble: analytic (p-1)/(m+p-1) = 0.3333"));
  CHECK_THAT(text, Catch::Contains("step x rank"));
  const Job big = parse_job(kJob, "p.toml", {"run.pipe.num_microbatches=64"});
  const std::string summary = format_plan_text(plan_job(big, {"pipe"}));
  CHECK_THAT(summary, Catch::Contains("too large for a grid"));
  CHECK_THAT(summary, Catch::Contains("idle steps"));
}

TEST_CASE("model arithmetic is checked: an overflow names the keys and where they were set", "[plan][limits]") {
  // Each key within its limit; their product is not countable in 64 bits.
  const Job job = parse_job(kJob, "w.toml",
                            {"model.hidden=1048576", "model.heads=1048576", "model.seq_len=1048576", "run.pipe.micro_batch_size=1048576"});
  try {
    plan_run(job, *job.find_run("pipe"));
    FAIL("planned");
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("run.pipe: the model's parameter or byte counts exceed 64-bit integers"));
    CHECK_THAT(what, Catch::Contains("model.hidden = 1048576 (w.toml (--set model.hidden=1048576))"));
    CHECK_THAT(what, Catch::Contains("run.pipe.micro_batch_size = 1048576 (w.toml (--set run.pipe.micro_batch_size=1048576))"));
    CHECK_THAT(what, Catch::Contains("model.ffn_hidden = 4194304 (default)"));
  }
}

TEST_CASE("CheckedInt: + and * throw on signed overflow, never wrap", "[plan][limits]") {
  const CheckedInt big = std::int64_t{1} << 62;
  CHECK((big + (big + -1)).value() == INT64_MAX);
  CHECK_THROWS_AS(big + big, ArithmeticOverflow);
  CHECK_THROWS_AS(big * 2, ArithmeticOverflow);
  CHECK_THROWS_AS(CheckedInt(INT64_MIN) + (-1), ArithmeticOverflow);
  CHECK((CheckedInt(3037000499) * 3037000499).value() == 9223372030926249001);  // floor(sqrt(2^63-1))^2
  CHECK_THROWS_AS(CheckedInt(3037000500) * 3037000500, ArithmeticOverflow);
}
