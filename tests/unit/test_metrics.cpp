// Metrics of SPEC §6 from synthetic rank records, and the seed-000 decision.
#include <cmath>
#include <limits>

#include <catch2/catch.hpp>

#include "pipebench/core/config.hpp"
#include "pipebench/results/metrics.hpp"
#include "pipebench/results/robust_stats.hpp"

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

TEST_CASE("EventDigest: per stage and kind the median over counted steps of each step's median duration",
          "[metrics]") {
  const Job job = parse_job(kJob, "m.toml");
  const RunPlan plan = plan_run(job, job.runs[1]);  // 2 ranks, 2 micro-batches, warm-up 1
  // Rank 0's F durations: step 0 (warm-up) {9, 9}; step 1 {1, 3}; step 2 {2, 2}; step 3 {10, 0}.
  // Each step's median: 9, 2, 2, 5; counted: 2, 2, 5 -> 2 (the median of all durations would be 2.5).
  const double f0[4][2] = {{9, 9}, {1, 3}, {2, 2}, {10, 0}};
  std::vector<EventRecord> events;
  for (int k = 0; k < 4; ++k)
    for (int r = 0; r < 2; ++r)
      for (int j = 0; j < 2; ++j) {
        events.push_back({k, r, ActionKind::F, j, 0, 0.0, r == 0 ? f0[k][j] : 4.0});
        events.push_back({k, r, ActionKind::B, j, 0, 1.0, 1.0 + 2.0 * (r + 1)});
      }
  const SimCosts whole = measured_costs(plan.schedule, events, job.train.warmup);
  CHECK(whole.forward == std::vector<double>{2.0, 4.0});
  CHECK(whole.backward == std::vector<double>{2.0, 4.0});
  CHECK(whole.weight == std::vector<double>{0.0, 0.0});
  // Streamed as the executor does it (a rank's step at a time, in any order): the same costs.
  EventDigest digest(plan.schedule, false);
  for (int r = 1; r >= 0; --r)
    for (int k = 0; k < 4; ++k) {
      std::vector<EventRecord> piece;
      for (const auto& e : events)
        if (e.rank == r && e.step == k) piece.push_back(e);
      digest.add(piece.data(), piece.size());
    }
  CHECK(digest.costs(job.train.warmup).forward == whole.forward);
  CHECK(digest.costs(job.train.warmup).backward == whole.backward);
  // No counted step: every step counts.
  CHECK(measured_costs(plan.schedule, events, 10).forward == std::vector<double>{3.5, 4.0});
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

TEST_CASE("decide: memory above 90% of capacity is not feasible; loss compared to the baseline", "[metrics][decide]") {
  const Job job = parse_job(kJob, "m.toml");
  std::vector<RunResult> runs{assemble_run(job, plan_run(job, job.runs[0]), {records(8)[1]}),
                              assemble_run(job, plan_run(job, job.runs[1]), records(8))};
  runs[0].peak_mem_bytes = {100000};
  for (auto& r : runs) r.backend = BackendKind::cpu;  // records() carry a loss, as the cpu backend's do
  decide(runs);
  CHECK(runs[0].decision == "not_applicable");
  CHECK(runs[1].loss_max_rel_dev == 0.0);
  CHECK(runs[1].decision == "not_feasible");
  REQUIRE(runs[1].decision_reasons.size() == 4);
  CHECK_THAT(runs[1].decision_reasons[0], Catch::StartsWith("memory: fail") && Catch::Contains("95%"));
  CHECK_THAT(runs[1].decision_reasons[1], Catch::StartsWith("stability: pass"));
  CHECK_THAT(runs[1].decision_reasons[2], Catch::StartsWith("loss: pass"));
  // 7 counted steps: fewer than seed 000's 30, said (the verdicts stand on their intervals).
  CHECK_THAT(runs[1].decision_reasons[3], Catch::StartsWith("steps: 7 counted step(s), fewer than seed 000's 30-50"));

  CHECK_THAT(runs[1].decision_reasons[0], Catch::Contains("stage 0 peaks at"));
  // With tensor ranks the peak is named by the rank's coordinates (a p 1 x t 8
  // run's rank 7 once read "stage 7").
  RunResult tensor = runs[1];
  tensor.spec.pipeline_size = 1;
  tensor.spec.tensor_parallel = 2;
  tensor.pipeline_rank = {0, 0};
  tensor.tensor_rank = {0, 1};
  tensor.peak_mem_bytes = {100000, runs[1].peak_mem_bytes[0]};  // tensor rank 1 the highest
  std::vector<RunResult> just{runs[0], tensor};
  decide(just);
  CHECK_THAT(just[1].decision_reasons[0], Catch::Contains("rank 1 (stage 0, tensor rank 1) peaks at"));

  runs[1].peak_mem_bytes = {500000, 100000};
  runs[1].loss[2] = 3.0 * (1.0 + 1e-3);
  decide(runs);
  CHECK(runs[1].loss_max_rel_dev == Approx(1e-3));
  CHECK(runs[1].decision == "not_feasible");
  CHECK_THAT(runs[1].decision_reasons[2], Catch::StartsWith("loss: fail — deviates from the baseline"));

  runs[1].loss[2] = 3.0;
  decide(runs);
  CHECK(runs[1].decision == "feasible");
  // Same step times as the baseline: speedup 1, the interval degenerate.
  CHECK(runs[1].speedup == Approx(1.0));
  CHECK(runs[1].speedup_low == Approx(1.0));
  CHECK(runs[1].speedup_high == Approx(1.0));
}

TEST_CASE("decide: a sim run is decided on memory, stability and bubble, its loss 'not measured on sim'",
          "[metrics][decide]") {
  const Job job = parse_job(kJob, "m.toml");
  auto recs = records(8);
  for (auto& s : recs[1].steps) s.loss = NAN;
  std::vector<RunResult> runs{assemble_run(job, plan_run(job, job.runs[0]), {recs[1]}),
                              assemble_run(job, plan_run(job, job.runs[1]), recs)};
  runs[1].peak_mem_bytes = {500000, 100000};
  runs[1].backend = BackendKind::sim;
  runs[1].bubble_simulated = runs[1].bubble_measured_median - 0.01;
  decide(runs);
  CHECK(std::isnan(runs[1].loss_max_rel_dev));
  CHECK(runs[1].decision == "feasible");
  CHECK_THAT(runs[1].decision_reasons[2], Catch::StartsWith("bubble: pass"));
  CHECK(runs[1].decision_reasons[3] == "loss: not measured on sim (the sim backend computes no loss)");
  // The executor adding 6 points of idle time to the schedule's own bubble fails the run.
  runs[1].bubble_simulated = runs[1].bubble_measured_median - 0.06;
  decide(runs);
  CHECK(runs[1].decision == "not_feasible");
  CHECK_THAT(runs[1].decision_reasons[2], Catch::StartsWith("bubble: fail") && Catch::Contains("limit +5 pts"));
}

TEST_CASE("decide: stability by the Theil-Sen trend, inconclusive with the repeats to rerun", "[metrics][decide]") {
  const Job job = parse_job(kJob, "m.toml");
  std::vector<RunResult> runs{assemble_run(job, plan_run(job, job.runs[0]), {records(8)[1]}),
                              assemble_run(job, plan_run(job, job.runs[1]), records(8))};
  runs[1].peak_mem_bytes = {500000, 100000};
  RunResult& r = runs[1];
  // 7 counted steps rising 3% each: +18% over the run, the interval above +5%.
  for (std::size_t k = 1; k < r.step_time_s.size(); ++k) r.step_time_s[k] = 4.0 * (1.0 + 0.03 * static_cast<double>(k));
  r.step_time.median = 4.0 * 1.12;
  decide(runs);
  CHECK(r.decision == "not_feasible");
  CHECK_THAT(r.decision_reasons[1], Catch::StartsWith("stability: fail — step time changes +16.1%"));
  // Noisy steps without a trend: too wide to tell; a rerun with more steps is named.
  const std::vector<double> noisy{4.0, 4.4, 3.7, 4.5, 3.6, 4.3, 3.8};
  for (std::size_t k = 1; k < r.step_time_s.size(); ++k) r.step_time_s[k] = noisy[k - 1];
  r.step_time.median = 4.0;
  decide(runs);
  CHECK(r.decision == "inconclusive");
  CHECK_THAT(r.decision_reasons[1], Catch::StartsWith("stability: inconclusive") &&
                                        Catch::Contains("rerun with --set train.repeats="));
  // Too few counted steps.
  std::vector<RunResult> short_runs{assemble_run(job, plan_run(job, job.runs[0]), {records(4)[1]}),
                                    assemble_run(job, plan_run(job, job.runs[1]), records(4))};
  short_runs[1].peak_mem_bytes = {500000, 100000};
  decide(short_runs);
  CHECK(short_runs[1].decision == "inconclusive");
  CHECK(short_runs[1].decision_reasons[1] ==
        "stability: inconclusive — 3 counted step(s), a trend needs 5; rerun with --set train.repeats=10");
}

TEST_CASE("Theil-Sen slope and the Hodges-Lehmann speedup, with their intervals", "[metrics][robust]") {
  // A line is its own slope, the interval degenerate; one outlier does not move it.
  const Interval line = theil_sen_slope({1, 2, 3, 4, 5, 6, 7});
  CHECK(line.estimate == 1.0);
  CHECK(line.low == 1.0);
  CHECK(line.high == 1.0);
  CHECK(theil_sen_slope({1, 2, 3, 40, 5, 6, 7}).estimate == 1.0);
  // Five points: Sen's interval is wider than the sample can bound on one side.
  const Interval five = theil_sen_slope({1.0, 1.1, 0.9, 1.05, 0.95});
  CHECK(five.low <= five.estimate);
  CHECK(five.estimate <= five.high);
  CHECK(std::isnan(theil_sen_slope({1.0}).estimate));
  // Speedup 2: baseline steps twice as long; the interval contains it.
  const Interval s = speedup_interval({2.0, 2.1, 1.9, 2.05, 1.95, 2.0}, {1.0, 1.05, 0.95, 1.02, 0.98, 1.0});
  CHECK(s.estimate == Approx(2.0).epsilon(0.01));
  CHECK(s.low < s.estimate);
  CHECK(s.high > s.estimate);
  CHECK(s.low > 1.8);
  CHECK(s.high < 2.2);
  CHECK(std::isnan(speedup_interval({}, {1.0}).estimate));
}

TEST_CASE("best run: the fastest feasible pipeline, ties broken by the lowest peak memory", "[metrics][decide]") {
  auto run = [](const char* name, double median, double lo, double hi, std::uint64_t mem, const char* decision) {
    RunResult r;
    r.spec.name = name;
    r.spec.pipeline_size = 4;
    r.step_time.median = median;
    r.speedup = 3.0 / median;
    r.speedup_low = lo;
    r.speedup_high = hi;
    r.peak_mem_max_bytes = mem;
    r.decision = decision;
    r.baseline = "base";
    return r;
  };
  std::vector<RunResult> runs{run("gpipe", 1.00, 2.9, 3.1, 300, "feasible"), run("one_f_one_b", 1.01, 2.85, 3.05, 150, "feasible"),
                              run("slow", 1.5, 1.9, 2.1, 100, "feasible"), run("fast_oom", 0.5, 5.9, 6.1, 10, "not_feasible")};
  const std::string best = best_run_summary(runs);
  CHECK_THAT(best, Catch::StartsWith("best: one_f_one_b") && Catch::Contains("tied on time with gpipe") &&
                       !Catch::Contains("slow") && !Catch::Contains("fast_oom"));
  runs[1].speedup_high = 2.88;  // no longer overlapping: the fastest wins alone
  CHECK_THAT(best_run_summary(runs), Catch::StartsWith("best: gpipe") && !Catch::Contains("tied"));
  CHECK(best_run_summary({runs[3]}).empty());
  // An interval open on one side (few counted steps) is said in words, never "inf".
  RunResult open = run("p", 1.0, 1.7, std::numeric_limits<double>::infinity(), 100, "feasible");
  open.speedup = 1.71;
  CHECK(format_speedup(open) == "1.71x (1.70 or more)");
  open.speedup_low = 0.0;  // exp(-inf): no lower bound
  CHECK(format_speedup(open) == "1.71x (no interval: too few steps)");
  // Without a baseline there is no speedup to show, and the line says so.
  RunResult alone = run("pipe", 1.0, 0, 0, 100, "feasible");
  alone.speedup = alone.speedup_low = alone.speedup_high = std::numeric_limits<double>::quiet_NaN();
  CHECK_THAT(best_run_summary({alone}), Catch::Contains("1.000 s per step (") && Catch::Contains(" samples), no baseline, peak"));
  CHECK_THAT(best_run_summary(runs), !Catch::Contains("slower than"));
  // A p 2 x t 2 run at 0.41x (0.36-0.43) was printed "best" with nothing more to say.
  RunResult slower = run("pp2_tp2", 2.28, 0.36, 0.43, 100, "inconclusive");
  CHECK_THAT(best_run_summary({slower}), Catch::EndsWith("; slower than its baseline base: no pipelined run here beats it"));
  slower.speedup_high = 1.02;  // the interval reaches 1: not shown slower
  CHECK_THAT(best_run_summary({slower}), !Catch::Contains("slower than"));
  // A tuned p 1 x d 4 x t 2 run measured fastest was passed over for a pipelined runner-up.
  RunResult flat = run("tuned_pp1_dp4_tp2", 0.9, 3.2, 3.4, 100, "inconclusive");
  flat.spec.pipeline_size = 1;
  flat.spec.data_parallel = 4;
  flat.spec.tensor_parallel = 2;
  CHECK_THAT(best_run_summary({flat, runs[0]}), Catch::StartsWith("best: tuned_pp1_dp4_tp2"));
  RunResult single = flat;  // one rank: a baseline, never the answer
  single.spec.data_parallel = single.spec.tensor_parallel = 1;
  CHECK_THAT(best_run_summary({single, runs[0]}), Catch::StartsWith("best: gpipe"));
}

TEST_CASE("decide: an interrupted run measured nothing and is never not_feasible", "[metrics][decide]") {
  std::vector<RunResult> runs(2);
  runs[0].spec.name = "base";
  runs[0].spec.pipeline_size = 1;
  runs[0].status = RunStatus::ok;
  runs[1].spec.name = "p2";
  runs[1].spec.pipeline_size = 2;
  runs[1].baseline = "base";
  runs[1].status = RunStatus::failed;
  runs[1].failure_kind = FailureKind::interrupted;
  runs[1].failure_message = "the launch ended during this run";
  decide(runs);
  CHECK(runs[1].decision == "inconclusive");
  REQUIRE(runs[1].decision_reasons.size() == 1);
  CHECK_THAT(runs[1].decision_reasons[0], Catch::StartsWith("not measured: the launch ended during this run"));
  runs[1].failure_kind = FailureKind::oom;  // a measured failure still is
  decide(runs);
  CHECK(runs[1].decision == "not_feasible");
}

TEST_CASE("decide: a run with another global batch than its baseline is compared per sample, and says so",
          "[metrics][decide]") {
  // Issue 33: twice the baseline's micro-batches at 1.19x its step time read
  // "speedup 0.84x" while its throughput is +68%, and "best" picked the run
  // with the lower throughput.
  auto run = [](const char* name, int p, int m, double step) {
    RunResult r;
    r.spec.name = name;
    r.spec.pipeline_size = p;
    r.spec.micro_batch_size = 2;
    r.spec.num_microbatches = m;
    r.status = RunStatus::ok;
    r.baseline = p == 1 ? "" : "base";
    for (int k = 0; k < 30; ++k) {
      r.step_time_s.push_back(step * (1.0 + 0.001 * ((k * 7) % 11)));
      r.is_warmup.push_back(0);
    }
    r.step_time = compute_stats(r.step_time_s);
    return r;
  };
  std::vector<RunResult> runs{run("base", 1, 4, 1.0), run("same_batch", 2, 4, 0.7), run("double_batch", 2, 8, 1.19)};
  decide(runs);
  const RunResult& same = runs[1];
  const RunResult& dbl = runs[2];
  CHECK_FALSE(same.speedup_per_sample);
  CHECK(same.speedup == Approx(1.0 / 0.7).epsilon(0.01));
  CHECK(dbl.speedup_per_sample);
  CHECK(dbl.speedup == Approx(2.0 / 1.19).epsilon(0.01));  // per sample: 1.68x, not 0.84x per step
  CHECK(dbl.speedup_low > 1.6);
  CHECK_THAT(format_speedup(dbl), Catch::Contains("x per sample ("));
  const bool noted = std::any_of(dbl.decision_reasons.begin(), dbl.decision_reasons.end(), [](const std::string& why) {
    return why.find("global batch: 16 samples per step (2 x 8) vs the baseline's 8 (2 x 4)") != std::string::npos;
  });
  CHECK(noted);
  CHECK(global_batch_note(same, runs[0]).empty());
  // Best: the highest throughput (time per sample), not the shortest step.
  for (auto& r : runs) r.decision = "feasible";
  CHECK_THAT(best_run_summary(runs), Catch::StartsWith("best: double_batch"));
}

TEST_CASE("decide: 30 counted steps are seed 000's evidence; clipping on most steps is flagged, not failed",
          "[metrics][decide]") {
  const Job job = parse_job(kJob, "m.toml");
  std::vector<RunResult> runs{assemble_run(job, plan_run(job, job.runs[0]), {records(31)[1]}),
                              assemble_run(job, plan_run(job, job.runs[1]), records(31))};
  for (auto& r : runs) r.backend = BackendKind::cpu;
  runs[1].peak_mem_bytes = {500000, 100000};
  decide(runs);
  CHECK(runs[1].decision == "feasible");
  for (const auto& why : runs[1].decision_reasons) CHECK_THAT(why, !Catch::StartsWith("steps:") && !Catch::StartsWith("clipping:"));
  // Clipped on 16 of 30 counted steps (above half): flagged, the decision unchanged.
  int marked = 0;
  for (std::size_t i = 0; i < runs[1].clipped.size(); ++i)
    if (!runs[1].is_warmup[i] && marked < 16) runs[1].clipped[i] = 1, ++marked;
  decide(runs);
  CHECK(runs[1].decision == "feasible");
  CHECK_THAT(runs[1].decision_reasons.back(), Catch::StartsWith("clipping: flag — the gradient norm was clipped on 16 of 30"));
  // 15 of 30 (exactly half): not flagged.
  for (std::size_t i = 0; i < runs[1].clipped.size(); ++i)
    if (runs[1].clipped[i] && marked > 15) runs[1].clipped[i] = 0, --marked;
  decide(runs);
  CHECK_THAT(runs[1].decision_reasons.back(), !Catch::StartsWith("clipping:"));
}

TEST_CASE("rolling_mean: trailing means, fewer values at the start", "[metrics]") {
  CHECK(rolling_mean({}, 5).empty());
  CHECK(rolling_mean({2, 4, 6, 8, 10, 12}, 3) == std::vector<double>{2, 3, 4, 6, 8, 10});
  CHECK(rolling_mean({1, 2}, 5) == std::vector<double>{1, 1.5});
}

// The node each rank ran on (issue 36): on sim the modelled machine's
// (device.ranks_per_node, the links' choice), whatever hosts the launch had;
// on cpu the real hosts, numbered in rank order.
TEST_CASE("rank_nodes: the modelled node on sim, the real host elsewhere", "[metrics]") {
  Job job = parse_job(kJob, "m.toml");
  RunSpec run = job.runs[1];
  run.data_parallel = 3;  // 6 ranks
  const std::vector<std::string> hosts{"b", "b", "a", "a", "b", "c"};
  job.device.ranks_per_node = 4;
  CHECK(rank_nodes(job, plan_run(job, run), hosts) == std::vector<int>{0, 0, 0, 0, 1, 1});
  job.device.ranks_per_node = 0;  // unset: the run on one node
  CHECK(rank_nodes(job, plan_run(job, run), hosts) == std::vector<int>{0, 0, 0, 0, 0, 0});
  job.device.backend = BackendKind::cpu;
  CHECK(rank_nodes(job, plan_run(job, run), hosts) == std::vector<int>{0, 0, 1, 1, 0, 2});
}
