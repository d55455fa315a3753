// Metrics of SPEC §6, computed on rank 0 from the gathered RankRecords, and
// the seed-000 decision for pipelined runs against their baselines. Pure
// functions: no MPI, no I/O.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "pipebench/plan/plan.hpp"
#include "pipebench/results/records.hpp"

namespace pipebench {

// Thresholds of the decision (docs/runner.md).
inline constexpr double kTrendMax = 0.05;           // largest rise of the step time over the counted steps (Theil-Sen), relative to the median
inline constexpr double kBubbleGapMax = 0.05;       // sim: measured bubble above the simulated one, in points
inline constexpr double kLossTolFp32 = 1e-5;        // relative loss deviation, cpu/fp32
inline constexpr double kLossTolLowPrecision = 2e-2;  // bf16 / fp16
// Seed 000 verifies on 30-50 short steps: a decision on fewer says so (its
// verdicts still come from the intervals, which are wide on few steps).
inline constexpr int kSeedShortSteps = 30;
// Gradient clipping on more than this share of the counted steps is flagged
// (seed 000: "梯度裁剪频繁触发"); it does not change the decision.
inline constexpr double kClipRateMax = 0.5;
// The report's rolling means (seed 000: "最近若干步平均单步耗时"): the
// trailing mean over this many counted steps.
inline constexpr int kRollingWindow = 5;

// Seed 000's "stable step time" on a run's counted step times, in order:
// the Theil-Sen slope as the rise over the run relative to the median, with
// its 95% interval. pass: the interval stays at or below kTrendMax; fail: it
// lies above; open: fewer than 5 steps, or the interval straddles the limit.
// One rule for the decision (stability_check) and the runner's stability
// extension (train.max_repeats: a run still open after `repeats` goes on).
enum class Stability { pass, fail, open };
struct StabilityTest {
  Stability verdict = Stability::open;
  int steps = 0;
  double rise = 0.0, low = 0.0, high = 0.0;  // relative to the median; NaN with fewer than 5 steps
  // Counted steps that would make an open interval narrow enough:
  // 12 (1.96 cv / kTrendMax)^2, cv the robust spread around the fitted line.
  int steps_wanted = 0;
};
StabilityTest stability_test(const std::vector<double>& counted_step_times);

// Trailing means of `values` over `window` entries (fewer at the start).
std::vector<double> rolling_mean(const std::vector<double>& values, int window);

// Median, min, max, p90 (nearest rank), mean, coefficient of variation and
// least-squares slope per index. Empty input gives NaNs.
Stats compute_stats(const std::vector<double>& values);

// Median of column `col` of a [steps][ranks] table over the counted
// (non-warm-up) steps; NaN when there are none.
double counted_median(const std::vector<std::vector<double>>& rows, const std::vector<std::uint8_t>& is_warmup,
                      std::size_t col);

// A data-parallel run's gradient synchronisation as one line reports it:
// the largest per-rank median over counted steps of grad_sync_s and of
// grad_sync_exposed_s, and the bus bandwidth (nccl-tests' busbw, bytes/s) of
// the rank with that largest time. All NaN without replicas.
// The exposed part split by what the rank waited for (issue 68), from the
// per-collective records (grad_buckets/: their exposed parts sum to
// grad_sync_exposed_s): the largest per-rank median over counted steps of
// the gradient reductions' part (all-reduce, reduce-scatter) and of ZeRO-1's
// parameter all-gathers' part; NaN in files without those records.
struct GradSyncSummary {
  double sync_s, exposed_s, bus_bandwidth;
  double exposed_reduce_s, exposed_gather_s;
};
GradSyncSummary grad_sync_summary(const RunResult& r);
// Tensor parallelism: the slowest rank's median time per step in its
// group's collectives over the counted steps; NaN with t = 1.
double tensor_comm_median_s(const RunResult& r);

// nccl-tests' bus bandwidth of rank `rank`'s synchronisation in step
// `step`: grad_sync_bytes × 2(d−1)/d / grad_sync_s (ZeRO-1's reduce-scatter
// and all-gather move what one all-reduce moves; its grad_sync_s holds the
// sharded optimizer step between them too). 0 when nothing was timed.
double grad_sync_bus_bandwidth(const RunResult& r, std::size_t step, std::size_t rank);

// What a run's metrics take from its events, reduced as the events arrive,
// so that rank 0 need not hold a run's events (the runner streams them to the
// results file step by step): per (virtual stage, F/B/W) the median duration
// of each step, and for inference each micro-batch's entry into the first
// rank and exit from the last. Memory grows by 3 x virtual stages numbers per
// step (plus 2 x micro-batches for inference), not with the events.
class EventDigest {
 public:
  EventDigest(const Schedule& s, bool inference);
  // `events` must hold every event of each (step, rank) it holds any of: a
  // rank's step as the executor streams it, or a whole run.
  void add(const EventRecord* events, std::size_t n);
  // Per virtual stage, the median over the steps >= `warmup` (over all steps
  // when there are none) of each step's median F, B and W durations, as
  // simulator costs with free transfers: the input of bubble_simulated.
  SimCosts costs(int warmup) const;
  // Inference: [steps][micro-batches] latency from entering rank 0 to leaving
  // the last rank, over the first `steps` steps (NaN where not seen).
  std::vector<std::vector<double>> microbatch_latency(std::size_t steps) const;

 private:
  struct StepMedian {
    int step;
    double seconds;
  };
  int virtual_stages_, ranks_, microbatches_;
  bool inference_;
  const Schedule* schedule_;
  std::array<std::vector<std::vector<StepMedian>>, 3> medians_;  // [kind][virtual stage]
  std::vector<std::vector<double>> enter_, leave_;              // inference: [step][micro-batch]
};

// EventDigest's costs of a whole run's events held in memory: the same
// figures as the run's bubble_simulated (the report and the trace digest
// the events as they stream them instead; tests compare the two).
SimCosts measured_costs(const Schedule& s, const std::vector<EventRecord>& events, int warmup);

// Builds the RunResult of one executed (possibly failed) run. `ranks` holds
// one record per run rank, in rank order; their events are the run's.
// The node of each run rank: on the sim backend the modelled machine's
// (parallel::run_grid: device.ranks_per_node ranks per node), by which its
// links were chosen; on the cpu and cuda backends the real one, the ranks'
// distinct `hosts` numbered in rank order.
std::vector<int> rank_nodes(const Job& job, const RunPlan& plan, const std::vector<std::string>& hosts);

RunResult assemble_run(const Job& job, const RunPlan& plan, const std::vector<RankRecord>& ranks);
// The same with the run's events digested apart from the records (whose own
// events are then ignored): `events` is what the result keeps (moved in;
// empty when they are stored elsewhere, ResultsWriter::append_events).
RunResult assemble_run(const Job& job, const RunPlan& plan, const std::vector<RankRecord>& ranks,
                       const EventDigest& digest, std::vector<EventRecord> events);

// A run that did not execute: not enough ranks.
// The placeholder of a run in progress in a results checkpoint: failed,
// kind interrupted. A completed run replaces it.
RunResult interrupted_run(const Job& job, const RunPlan& plan);
// Where a failed run failed, for people: "oom on rank 1"; "interrupted"
// when no rank is to blame (the launch ended).
std::string failure_origin(const RunResult& r);
// The job's status over its runs: ok (every run ok), failed (none ok), partial.
std::string job_status(const std::vector<RunResult>& runs);
RunResult skipped_run(const Job& job, const RunPlan& plan, const std::string& reason);
// A run whose environment could not start (FailureKind::environment): never
// run, nothing measured, decision not_applicable with the reason.
RunResult environment_failed_run(const Job& job, const RunPlan& plan, const std::string& message);

// The speedup of ok run `r` over its ok baseline `base`: Hodges-Lehmann on the
// counted step times with its 95% interval; on time per sample (step time /
// global batch) when their global batches differ (speedup_per_sample).
void set_speedup(RunResult& r, const RunResult& base);

// "global batch: 16 samples per step vs the baseline's 8 ..." when the global
// batches of `r` and `base` differ, else "".
std::string global_batch_note(const RunResult& r, const RunResult& base);

// Fills loss_max_rel_dev, speedup, decision and decision_reasons of every run
// that has a baseline among `runs`.
void decide(std::vector<RunResult>& runs);

// "1.42x (1.31-1.55)": the speedup over the baseline and its 95% interval
// ("1.42x per sample (...)" when the global batches differ); "-" without a
// baseline.
std::string format_speedup(const RunResult& r);

// The reasons of a decision that are not a pass: what to look at first.
std::vector<std::string> decision_concerns(const RunResult& r);
// One line for a table: the first concern, else the first reason, else "".
std::string decision_headline(const RunResult& r);

// The decision of a pipelined run in one line, with its reason: "decision:
// two_stage_pipeline feasible — memory, stability and loss pass; 1.53x
// (1.52-1.55) the baseline's speed"; otherwise the first condition that did
// not pass. "" for runs without a decision (baselines, skipped runs).
std::string decision_line(const RunResult& r);

// Rank i of a run as verdicts name it: "stage S" without replicas or tensor
// ranks, else "rank I (stage S, replica D, tensor rank T)" with the
// coordinates it has (a p 1 x t 8 run's rank 7 is not a stage 7).
std::string rank_label(const RunResult& r, std::size_t i);

// Rank i's peak memory over its capacity.
double capacity_fraction(const RunResult& r, std::size_t i);

// The rank nearest to its capacity, the last of equals: the rank the memory
// verdict and the report's memory advice name. -1 without ranks (or with
// no finite fraction).
int fullest_rank(const RunResult& r);

// The largest peak memory / capacity over the run's ranks; NaN without ranks.
double peak_capacity_fraction(const RunResult& r);

// Where the receive wait `e` recorded began: wait_s before its start, but not
// before the rank's previous action ended (at prev_end_s). For a recorded
// (finite) wait_s.
double wait_start_s(const EventRecord& e, double prev_end_s);

// The job's answer among its training runs on more than one rank (stages,
// replicas or tensor ranks) that are not not_feasible: the fastest, and
// among the runs whose speedup intervals overlap the fastest's (a tie within
// the measurement), the one with the lowest peak memory. "" when no run
// qualifies. E.g. "best: one_f_one_b — 2.55x (2.55-2.55), peak 147.02 MiB,
// inconclusive; tied on time with gpipe, eager_one_f_one_b, chosen for the
// lowest peak memory". When even that run's speedup interval lies below 1,
// the line ends "; slower than its baseline B: no pipelined run here beats it".
std::string best_run_summary(const std::vector<RunResult>& runs);

}  // namespace pipebench
