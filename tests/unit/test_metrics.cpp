// Metrics of SPEC §6 from synthetic rank records, and the seed-000 decision.
#include <cmath>

#include <catch2/catch.hpp>

#include "pipebench/core/config.hpp"
#include "pipebench/results/metrics.hpp"

using namespace pipebench;

TEST_CASE("compute_stats: median, p90, CV, least-squares slope", "[metrics]") {
  const Stats s = compute_stats({1.0, 2.0, 3.0, 4.0, 10.0});
  CHECK(s.median == 3.0);
  CHECK(s.min == 1.0);
  CHECK(s.max == 10.0);
  CHECK(s.p90 == 10.0);
  CHECK(s.mean == 4.0);
  CHECK(s.cv == Approx(std::sqrt(50.0 / 4.0) / 4.0));  // sample standard deviation
  CHECK(s.slope == Approx(2.0));                         // sxy = 20, sxx = 10
  CHECK(compute_stats({5.0, 5.0, 5.0}).cv == 0.0);
  CHECK(compute_stats({5.0, 5.0, 5.0}).slope == 0.0);
  CHECK(compute_stats({1.0, 2.0}).median == 1.5);
  CHECK(std::isnan(compute_stats({}).median));
}

namespace {
const char* kJob = R"(schema = 1
[job]
name = "m"
[model]
hidden = 32
layers = 4
heads = 4
seq_len = 8
vocab = 64
[train]
warmup = 1
repeats = 3
[device]
backend = "sim"
memory_capacity = 1000000
[[run]]
name = "base"
num_microbatches = 2
[[run]]
name = "pipe"
pipeline_size = 2
num_microbatches = 2
)";

// Two ranks; step k: rank 0 busy 2, rank 1 busy 3, step time 4 (+k/10 on rank 1's end).
std::vector<RankRecord> records(int steps) {
  std::vector<RankRecord> out(2);
  for (int r = 0; r < 2; ++r) {
    out[static_cast<std::size_t>(r)].rank = r;
    out[static_cast<std::size_t>(r)].memory_capacity_bytes = 1000000;
    out[static_cast<std::size_t>(r)].peak_mem_bytes = r == 0 ? 950000 : 100000;
    for (int k = 0; k < steps; ++k) {
      StepRecord s;
      s.busy_s = r == 0 ? 2.0 : 3.0;
      s.end_s = r == 0 ? 3.5 : 4.0;
      s.loss = r == 1 ? 1.0 + k : NAN;
      out[static_cast<std::size_t>(r)].steps.push_back(s);
    }
  }
  return out;
}
}  // namespace

TEST_CASE("assemble_run: step time is the max over ranks; bubble, slowest stage, imbalance", "[metrics]") {
  const Job job = parse_job(kJob, "m.toml");
  const RunPlan plan = plan_run(job, job.runs[1]);
  const RunResult r = assemble_run(job, plan, records(4));
  REQUIRE(r.step_time_s.size() == 4);
  CHECK(r.step_time_s[0] == 4.0);
  CHECK(r.is_warmup == std::vector<std::uint8_t>{1, 0, 0, 0});
  CHECK(r.slowest_stage_s[2] == 3.0);
  CHECK(r.bubble_measured[1] == Approx(1.0 - 5.0 / 8.0));
  CHECK(r.imbalance[1] == Approx(3.0 / 2.5));
  CHECK(r.idle_s[1][0] == 2.0);
  CHECK(r.loss[3] == 4.0);  // from the last stage
  CHECK(r.step_time.median == 4.0);
  CHECK(r.peak_mem_max_bytes == 950000);
  CHECK(r.throughput_samples_per_s == Approx(2.0 / 4.0));
  CHECK(r.status == RunStatus::ok);
}

TEST_CASE("assemble_run: the origin of a failure names kind and rank", "[metrics]") {
  const Job job = parse_job(kJob, "m.toml");
  const RunPlan plan = plan_run(job, job.runs[1]);
  auto recs = records(2);
  recs[0].failure = FailureKind::error;  // aborted by its peer
  recs[0].failure_message = "rank 1 failed while rank 0 waited";
  recs[1].failure = FailureKind::oom;
  recs[1].failure_is_origin = true;
  recs[1].failure_message = "rank 1: out of memory: ...";
  const RunResult r = assemble_run(job, plan, recs);
  CHECK(r.status == RunStatus::failed);
  CHECK(r.failure_kind == FailureKind::oom);
  CHECK(r.failing_rank == 1);
}

TEST_CASE("decide: memory above 90% of capacity is not feasible; loss compared to the baseline", "[metrics]") {
  const Job job = parse_job(kJob, "m.toml");
  std::vector<RunResult> runs{assemble_run(job, plan_run(job, job.runs[0]), {records(4)[1]}),
                              assemble_run(job, plan_run(job, job.runs[1]), records(4))};
  runs[0].peak_mem_bytes = {100000};
  decide(runs);
  CHECK(runs[0].decision == "not_applicable");
  CHECK(runs[1].loss_max_rel_dev == 0.0);
  CHECK(runs[1].decision == "not_feasible");
  REQUIRE_FALSE(runs[1].decision_reasons.empty());
  CHECK_THAT(runs[1].decision_reasons[0], Catch::Contains("stage 0 peak memory") && Catch::Contains("95%"));

  runs[1].peak_mem_bytes = {500000, 100000};
  runs[1].loss[2] = 3.0 * (1.0 + 1e-3);
  decide(runs);
  CHECK(runs[1].loss_max_rel_dev == Approx(1e-3));
  CHECK(runs[1].decision == "not_feasible");
  CHECK_THAT(runs[1].decision_reasons[0], Catch::Contains("loss deviates from baseline"));

  runs[1].loss[2] = 3.0;
  decide(runs);
  CHECK(runs[1].decision == "feasible");
}

TEST_CASE("decide: without a loss (sim backend) a pipelined run is not_applicable, with the reason", "[metrics]") {
  const Job job = parse_job(kJob, "m.toml");
  auto recs = records(4);
  for (auto& s : recs[1].steps) s.loss = NAN;
  std::vector<RunResult> runs{assemble_run(job, plan_run(job, job.runs[0]), {recs[1]}),
                              assemble_run(job, plan_run(job, job.runs[1]), recs)};
  runs[1].peak_mem_bytes = {500000, 100000};
  decide(runs);
  CHECK(std::isnan(runs[1].loss_max_rel_dev));
  CHECK(runs[1].decision == "not_applicable");
  CHECK_THAT(runs[1].decision_reasons.back(), Catch::Contains("the sim backend computes no loss"));
}
