#include "pipebench/results/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "pipebench/core/units.hpp"
#include "pipebench/core/workload_identity.hpp"

namespace pipebench {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double median_of(std::vector<double> v) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace

Stats compute_stats(const std::vector<double>& values) {
  Stats s;
  if (values.empty()) {
    s.median = s.min = s.max = s.p90 = s.mean = s.cv = s.slope = kNaN;
    return s;
  }
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  s.median = median_of(values);
  s.min = sorted.front();
  s.max = sorted.back();
  s.p90 = sorted[static_cast<std::size_t>(std::ceil(0.9 * static_cast<double>(n))) - 1];
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(n);
  double var = 0.0;
  for (double v : values) var += (v - s.mean) * (v - s.mean);
  var = n > 1 ? var / static_cast<double>(n - 1) : 0.0;
  s.cv = s.mean != 0.0 ? std::sqrt(var) / s.mean : 0.0;
  double sxx = 0.0, sxy = 0.0;
  const double xbar = 0.5 * static_cast<double>(n - 1);
  for (std::size_t i = 0; i < n; ++i) {
    const double dx = static_cast<double>(i) - xbar;
    sxx += dx * dx;
    sxy += dx * (values[i] - s.mean);
  }
  s.slope = sxx > 0.0 ? sxy / sxx : 0.0;
  return s;
}

namespace {

RunResult base_result(const Job& job, const RunPlan& plan) {
  RunResult r;
  r.spec = plan.run;
  r.backend = job.device.backend;
  r.dtype = plan.storage_dtype;
  r.schedule_name = plan.schedule.name;
  for (const auto& s : plan.partition.stages) r.layers_per_stage.push_back(s.num_layers);
  r.warmup = job.train.warmup;
  r.repeats = job.train.repeats;
  const WorkloadKeys keys = workload_keys(job, plan.run);
  r.workload = workload_text(keys);
  r.workload_fingerprint = workload_fingerprint(keys);
  r.bubble_analytic = plan.bubble_analytic;
  r.bubble_simulated = kNaN;
  r.baseline = plan.run.baseline;
  r.loss_max_rel_dev = kNaN;
  r.slowest_stage_median_s = r.bubble_measured_median = r.imbalance_median = kNaN;
  r.throughput_samples_per_s = kNaN;
  r.step_time = compute_stats({});
  return r;
}

}  // namespace

double counted_median(const std::vector<std::vector<double>>& rows, const std::vector<std::uint8_t>& is_warmup,
                      std::size_t col) {
  std::vector<double> v;
  for (std::size_t k = 0; k < rows.size() && k < is_warmup.size(); ++k)
    if (!is_warmup[k]) v.push_back(rows[k][col]);
  return median_of(v);
}

SimCosts measured_costs(const Schedule& s, const std::vector<EventRecord>& events, int warmup) {
  const auto V = static_cast<std::size_t>(s.num_virtual_stages());
  bool any_counted = false;
  for (const auto& e : events) any_counted |= e.step >= warmup;
  std::vector<std::vector<double>> f(V), b(V), w(V);
  for (const auto& e : events) {
    if (any_counted && e.step < warmup) continue;
    const auto v = static_cast<std::size_t>(s.virtual_stage(e.rank, e.chunk));
    if (v >= V) continue;
    (e.kind == ActionKind::F ? f : e.kind == ActionKind::B ? b : w)[v].push_back(e.end_s - e.start_s);
  }
  SimCosts costs;
  for (std::size_t v = 0; v < V; ++v) {
    costs.forward.push_back(f[v].empty() ? 0.0 : median_of(f[v]));
    costs.backward.push_back(b[v].empty() ? 0.0 : median_of(b[v]));
    costs.weight.push_back(w[v].empty() ? 0.0 : median_of(w[v]));
  }
  return costs;
}

RunResult interrupted_run(const Job& job, const RunPlan& plan) {
  RunResult r = base_result(job, plan);
  r.status = RunStatus::failed;
  r.failure_kind = FailureKind::interrupted;
  r.failing_rank = -1;
  r.failure_message = "the launch ended during this run (a signal, a lost rank, or a kill); its figures are lost";
  return r;
}

std::string failure_origin(const RunResult& r) {
  if (r.failing_rank < 0) return std::string(to_string(r.failure_kind));
  return fmt::format("{} on rank {}", to_string(r.failure_kind), r.failing_rank);
}

std::string job_status(const std::vector<RunResult>& runs) {
  const auto ok = static_cast<std::size_t>(
      std::count_if(runs.begin(), runs.end(), [](const RunResult& r) { return r.status == RunStatus::ok; }));
  return ok == runs.size() ? "ok" : ok == 0 ? "failed" : "partial";
}

RunResult skipped_run(const Job& job, const RunPlan& plan, const std::string& reason) {
  RunResult r = base_result(job, plan);
  r.status = RunStatus::skipped;
  r.skip_reason = reason;
  r.failure_message = reason;
  r.decision_reasons.push_back("skipped: " + reason);
  return r;
}

namespace {

// The run's failure: the first rank that failed by itself names the kind;
// ranks that were only told by a peer come second.
void add_failure(RunResult& r, const std::vector<RankRecord>& ranks) {
  const RankRecord* failed = nullptr;
  for (const auto& rk : ranks)
    if (rk.failure != FailureKind::none && (!failed || (rk.failure_is_origin && !failed->failure_is_origin)))
      failed = &rk;
  if (!failed) return;
  r.status = RunStatus::failed;
  r.failure_kind = failed->failure;
  r.failure_message = failed->failure_message;
  r.failing_rank = failed->rank;
}

// Per-rank figures: memory, stage, host, and every event.
void add_rank_figures(RunResult& r, const std::vector<RankRecord>& ranks) {
  for (const auto& rk : ranks) {
    r.peak_mem_bytes.push_back(rk.peak_mem_bytes);
    r.memory_capacity_bytes.push_back(rk.memory_capacity_bytes);
    for (int c = 0; c < kNumMemCategories; ++c)
      r.peak_mem_by_category[static_cast<std::size_t>(c)].push_back(rk.peak_mem_by_category[static_cast<std::size_t>(c)]);
    r.stage_params.push_back(rk.stage_params);
    r.peak_live_activations.push_back(rk.peak_live_activations);
    r.stage_layers.push_back(rk.stage_layers);
    r.hostnames.push_back(rk.hostname);
    r.pids.push_back(rk.pid);
    r.events.insert(r.events.end(), rk.events.begin(), rk.events.end());
  }
  r.peak_mem_max_bytes = r.peak_mem_bytes.empty() ? 0 : *std::max_element(r.peak_mem_bytes.begin(), r.peak_mem_bytes.end());
}

// Per-step figures over the steps every rank completed, and their medians
// over the counted (non-warm-up) steps. Returns the number of steps.
std::size_t add_step_figures(RunResult& r, const Job& job, const RunPlan& plan, const std::vector<RankRecord>& ranks) {
  const std::size_t P = ranks.size();
  std::size_t steps = std::numeric_limits<std::size_t>::max();
  for (const auto& rk : ranks) steps = std::min(steps, rk.steps.size());
  if (ranks.empty()) steps = 0;
  const std::size_t last = P - 1;
  std::vector<double> counted_time, counted_slowest, counted_bubble, counted_imbalance;
  for (std::size_t k = 0; k < steps; ++k) {
    double t = 0.0, busy_sum = 0.0, busy_max = 0.0;
    std::vector<double> busy(P), wait(P), transfer(P), idle(P), fwd(P), bwd(P), opt(P);
    for (std::size_t i = 0; i < P; ++i) {
      const StepRecord& s = ranks[i].steps[k];
      t = std::max(t, s.end_s);
      busy[i] = s.busy_s;
      wait[i] = s.comm_wait_s;
      transfer[i] = s.comm_transfer_s;
      fwd[i] = s.forward_s;
      bwd[i] = s.backward_s;
      opt[i] = s.optimizer_s;
      busy_sum += s.busy_s;
      busy_max = std::max(busy_max, s.busy_s);
    }
    for (std::size_t i = 0; i < P; ++i) idle[i] = t - busy[i];
    const bool warm = static_cast<int>(k) < job.train.warmup;
    r.step_time_s.push_back(t);
    r.is_warmup.push_back(warm ? 1 : 0);
    r.loss.push_back(ranks[last].steps[k].loss);
    r.grad_norm.push_back(ranks[0].steps[k].grad_norm);
    r.clipped.push_back(ranks[0].steps[k].clipped ? 1 : 0);
    r.slowest_stage_s.push_back(busy_max);
    const double imb = busy_sum > 0.0 ? busy_max / (busy_sum / static_cast<double>(P)) : kNaN;
    r.imbalance.push_back(imb);
    const double bubble = t > 0.0 ? 1.0 - busy_sum / (static_cast<double>(P) * t) : kNaN;
    r.bubble_measured.push_back(bubble);
    r.busy_s.push_back(busy);
    r.comm_wait_s.push_back(wait);
    r.comm_transfer_s.push_back(transfer);
    r.idle_s.push_back(idle);
    r.forward_s.push_back(fwd);
    r.backward_s.push_back(bwd);
    r.optimizer_s.push_back(opt);
    if (!warm) {
      counted_time.push_back(t);
      counted_slowest.push_back(busy_max);
      counted_bubble.push_back(bubble);
      counted_imbalance.push_back(imb);
    }
  }
  r.step_time = compute_stats(counted_time);
  r.slowest_stage_median_s = median_of(counted_slowest);
  r.bubble_measured_median = median_of(counted_bubble);
  r.imbalance_median = median_of(counted_imbalance);
  if (!counted_time.empty())
    r.throughput_samples_per_s = static_cast<double>(plan.run.global_batch()) / r.step_time.median;
  return steps;
}

// Inference: per micro-batch latency from entering stage 0 to leaving the
// last stage (`last_rank`), over the first `steps` steps.
void add_microbatch_latency(RunResult& r, const RunPlan& plan, std::size_t steps, int last_rank) {
  const auto m = static_cast<std::size_t>(plan.run.num_microbatches);
  r.microbatch_latency_s.assign(steps, std::vector<double>(m, kNaN));
  std::vector<std::vector<double>> enter(steps, std::vector<double>(m, kNaN)), leave = enter;
  for (const auto& e : r.events) {
    if (e.kind != ActionKind::F || static_cast<std::size_t>(e.step) >= steps) continue;
    if (e.rank == 0) enter[static_cast<std::size_t>(e.step)][static_cast<std::size_t>(e.microbatch)] = e.start_s;
    if (e.rank == last_rank) leave[static_cast<std::size_t>(e.step)][static_cast<std::size_t>(e.microbatch)] = e.end_s;
  }
  for (std::size_t k = 0; k < steps; ++k)
    for (std::size_t j = 0; j < m; ++j) r.microbatch_latency_s[k][j] = leave[k][j] - enter[k][j];
}

}  // namespace

RunResult assemble_run(const Job& job, const RunPlan& plan, const std::vector<RankRecord>& ranks) {
  RunResult r = base_result(job, plan);
  add_failure(r, ranks);
  add_rank_figures(r, ranks);
  const std::size_t steps = add_step_figures(r, job, plan, ranks);
  if (plan.run.mode == RunMode::inference && steps > 0)
    add_microbatch_latency(r, plan, steps, static_cast<int>(ranks.size()) - 1);

  // bubble_simulated: the schedule simulated with this run's per-action medians.
  const bool any_counted = std::count(r.is_warmup.begin(), r.is_warmup.end(), 0) > 0;
  if (any_counted) {
    const SimResult sim = simulate(plan.schedule, measured_costs(plan.schedule, r.events, job.train.warmup));
    if (sim.completed && sim.makespan > 0.0) r.bubble_simulated = sim.bubble;
  }
  return r;
}

void decide(std::vector<RunResult>& runs) {
  for (auto& r : runs) {
    if (r.status == RunStatus::skipped) continue;
    const RunResult* base = nullptr;
    for (const auto& other : runs)
      if (!r.baseline.empty() && other.spec.name == r.baseline) base = &other;

    // Loss deviation over counted steps present in both.
    if (base && base->status == RunStatus::ok) {
      double dev = kNaN;
      const std::size_t n = std::min(r.loss.size(), base->loss.size());
      for (std::size_t k = 0; k < n; ++k) {
        if (r.is_warmup[k] || !std::isfinite(r.loss[k]) || !std::isfinite(base->loss[k])) continue;
        const double d = std::fabs(r.loss[k] - base->loss[k]) / std::fabs(base->loss[k]);
        dev = std::isnan(dev) ? d : std::max(dev, d);
      }
      r.loss_max_rel_dev = dev;
    }

    std::vector<std::string>& why = r.decision_reasons;
    why.clear();
    if (r.spec.pipeline_size == 1 || !base) {
      r.decision = "not_applicable";
      why.push_back(base ? "single-stage run" : "no baseline to compare against");
      continue;
    }
    bool ok = true, undecidable = false;
    if (r.status == RunStatus::failed) {
      ok = false;
      why.push_back(fmt::format("run failed ({}): {}", failure_origin(r),
                                r.failure_message));
      if (r.failure_kind == FailureKind::oom)
        why.push_back("next: lower micro_batch_size or add stages; do not rely on swapping memory out (seed 000)");
    }
    // (1) every rank's peak below 90% of capacity.
    for (std::size_t i = 0; i < r.peak_mem_bytes.size(); ++i) {
      const double frac = static_cast<double>(r.peak_mem_bytes[i]) / static_cast<double>(r.memory_capacity_bytes[i]);
      if (frac >= kMemoryWarnFraction) {
        ok = false;
        why.push_back(fmt::format("stage {} peak memory {} is {:.0f}% of capacity (limit {:.0f}%): lower "
                                  "micro_batch_size or move layers off stage {} (seed 000)",
                                  i, format_bytes(static_cast<double>(r.peak_mem_bytes[i])), 100 * frac,
                                  100 * kMemoryWarnFraction, i));
      }
    }
    // (2) stable step time: low CV, no upward trend.
    if (r.status == RunStatus::ok) {
      if (!(r.step_time.cv <= kStableCvMax)) {
        ok = false;
        why.push_back(fmt::format("step time unstable: CV {:.3f} > {:.2f}; check stage balance (slowest stage {}) "
                                  "before adding steps (seed 000)",
                                  r.step_time.cv, kStableCvMax, format_seconds(r.slowest_stage_median_s)));
      }
      const double rise = r.step_time.slope * static_cast<double>(std::max(0, r.repeats - 1)) / r.step_time.median;
      if (rise > kTrendMax) {
        ok = false;
        why.push_back(fmt::format("step time rises {:.1f}% over the counted steps (limit {:.0f}%)", 100 * rise,
                                  100 * kTrendMax));
      }
    }
    // (3) loss follows the baseline.
    const double tol = r.dtype == DType::fp32 ? kLossTolFp32 : kLossTolLowPrecision;
    if (std::isnan(r.loss_max_rel_dev)) {
      if (r.status == RunStatus::ok) {
        undecidable = true;
        why.push_back(fmt::format("loss not compared: the {} backend computes no loss", to_string(r.backend)));
      }
    } else if (r.loss_max_rel_dev > tol) {
      ok = false;
      why.push_back(fmt::format("loss deviates from baseline by {:.3g} (limit {:.0e}): check each stage's layer "
                                "range and the data seed (seed 000)",
                                r.loss_max_rel_dev, tol));
    }
    r.decision = !ok ? "not_feasible" : undecidable ? "not_applicable" : "feasible";
    if (r.decision == "feasible") why.push_back("memory below 90% on every stage, step time stable, loss follows the baseline");
  }
}

}  // namespace pipebench
