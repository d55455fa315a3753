#include "pipebench/results/metrics.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <tuple>

#include <fmt/format.h>

#include "pipebench/core/units.hpp"
#include "pipebench/parallel/collectives.hpp"
#include "pipebench/parallel/rank_grid.hpp"
#include "pipebench/results/robust_stats.hpp"
#include "pipebench/core/workload_identity.hpp"

namespace pipebench {

namespace {

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
  for (int v = 0; v < plan.schedule.num_virtual_stages(); ++v) r.stage_rank.push_back(plan.schedule.rank_of(v));
  r.warmup = job.train.warmup;
  r.repeats = job.train.repeats;
  r.max_repeats = job.train.max_repeats;
  const WorkloadKeys keys = workload_keys(job, plan.run);
  r.workload = workload_text(keys);
  r.workload_fingerprint = workload_fingerprint(keys);
  r.bubble_analytic = plan.bubble_analytic;
  r.bubble_simulated = kNaN;
  r.baseline = plan.run.baseline;
  r.loss_max_rel_dev = kNaN;
  r.slowest_stage_median_s = r.bubble_measured_median = r.imbalance_median = kNaN;
  r.throughput_samples_per_s = kNaN;
  r.speedup = r.speedup_low = r.speedup_high = kNaN;  // decide() sets them for runs with a baseline
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

double tensor_comm_median_s(const RunResult& r) {
  if (r.tensor_comm_s.empty()) return kNaN;
  double most = 0.0;
  for (std::size_t i = 0; i < r.tensor_comm_s.front().size(); ++i)
    most = std::max(most, counted_median(r.tensor_comm_s, r.is_warmup, i));
  return most;
}

namespace {

// Per rank, the largest median over counted steps of the exposed parts of its
// reductions ([0]) and of its parameter all-gathers ([1]); NaN without records.
std::array<double, 2> exposed_by_kind(const RunResult& r) {
  if (r.grad_buckets.empty()) return {kNaN, kNaN};
  const std::size_t ranks = r.peak_mem_bytes.size(), steps = r.is_warmup.size();
  // [kind][step][rank]: the step's sum.
  std::array<std::vector<std::vector<double>>, 2> sums;
  for (auto& s : sums) s.assign(steps, std::vector<double>(ranks, 0.0));
  for (const BucketRecord& b : r.grad_buckets) {
    const auto step = static_cast<std::size_t>(b.step), rank = static_cast<std::size_t>(b.rank);
    if (step >= steps || rank >= ranks) continue;
    sums[b.kind == static_cast<int>(parallel::Collective::all_gather) ? 1 : 0][step][rank] += b.exposed_s;
  }
  std::array<double, 2> most{0.0, 0.0};
  for (std::size_t k = 0; k < 2; ++k)
    for (std::size_t i = 0; i < ranks; ++i) most[k] = std::max(most[k], counted_median(sums[k], r.is_warmup, i));
  return most;
}

}  // namespace

GradSyncSummary grad_sync_summary(const RunResult& r) {
  GradSyncSummary g{kNaN, kNaN, kNaN, kNaN, kNaN};
  if (r.grad_sync_s.empty()) return g;
  const auto by_kind = exposed_by_kind(r);
  g.exposed_reduce_s = by_kind[0];
  g.exposed_gather_s = by_kind[1];
  for (std::size_t i = 0; i < r.peak_mem_bytes.size(); ++i) {
    const double e = counted_median(r.grad_sync_exposed_s, r.is_warmup, i);
    if (!(g.exposed_s >= e)) g.exposed_s = e;
    const double s = counted_median(r.grad_sync_s, r.is_warmup, i);
    if (g.sync_s >= s) continue;
    g.sync_s = s;
    g.bus_bandwidth = i < r.grad_sync_bytes.size() ? parallel::bus_bandwidth(parallel::Collective::all_reduce,
                                                                             r.grad_sync_bytes[i], r.spec.grad_group(), s)
                                                   : kNaN;
  }
  return g;
}

double grad_sync_bus_bandwidth(const RunResult& r, std::size_t step, std::size_t rank) {
  if (step >= r.grad_sync_s.size() || rank >= r.grad_sync_s[step].size() || rank >= r.grad_sync_bytes.size()) return 0.0;
  return parallel::bus_bandwidth(parallel::Collective::all_reduce, r.grad_sync_bytes[rank], r.spec.grad_group(),
                                 r.grad_sync_s[step][rank]);
}

EventDigest::EventDigest(const Schedule& s, bool inference)
    : virtual_stages_(s.num_virtual_stages()), ranks_(s.num_ranks), microbatches_(s.num_microbatches),
      inference_(inference), schedule_(&s) {
  for (auto& per_stage : medians_) per_stage.resize(static_cast<std::size_t>(virtual_stages_));
}

void EventDigest::add(const EventRecord* events, std::size_t n) {
  // Each (step, virtual stage, kind) group's durations, its median appended.
  struct Keyed {
    int step, stage, kind;
    double seconds;
  };
  std::vector<Keyed> keyed;
  keyed.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const EventRecord& e = events[i];
    const int v = schedule_->virtual_stage(e.rank, e.chunk);
    if (v >= 0 && v < virtual_stages_) keyed.push_back({e.step, v, static_cast<int>(e.kind), e.end_s - e.start_s});
    if (!inference_ || e.kind != ActionKind::F || e.step < 0 || e.microbatch < 0 || e.microbatch >= microbatches_) continue;
    const auto k = static_cast<std::size_t>(e.step), j = static_cast<std::size_t>(e.microbatch);
    if (k >= enter_.size()) {
      enter_.resize(k + 1, std::vector<double>(static_cast<std::size_t>(microbatches_), kNaN));
      leave_.resize(k + 1, std::vector<double>(static_cast<std::size_t>(microbatches_), kNaN));
    }
    if (e.rank == 0) enter_[k][j] = e.start_s;
    if (e.rank == ranks_ - 1) leave_[k][j] = e.end_s;
  }
  std::sort(keyed.begin(), keyed.end(), [](const Keyed& x, const Keyed& y) {
    return std::tie(x.kind, x.stage, x.step, x.seconds) < std::tie(y.kind, y.stage, y.step, y.seconds);
  });
  std::vector<double> group;
  for (std::size_t i = 0; i < keyed.size();) {
    std::size_t end = i;
    group.clear();
    for (; end < keyed.size() && keyed[end].kind == keyed[i].kind && keyed[end].stage == keyed[i].stage &&
           keyed[end].step == keyed[i].step;
         ++end)
      group.push_back(keyed[end].seconds);
    const Keyed& g = keyed[i];
    medians_[static_cast<std::size_t>(g.kind)][static_cast<std::size_t>(g.stage)].push_back({g.step, median_of(group)});
    i = end;
  }
}

SimCosts EventDigest::costs(int warmup) const {
  bool any_counted = false;
  for (const auto& per_stage : medians_)
    for (const auto& steps : per_stage)
      for (const StepMedian& m : steps) any_counted |= m.step >= warmup;
  auto median_over_steps = [&](const std::vector<StepMedian>& steps) {
    std::vector<double> v;
    for (const StepMedian& m : steps)
      if (!any_counted || m.step >= warmup) v.push_back(m.seconds);
    return v.empty() ? 0.0 : median_of(std::move(v));
  };
  SimCosts costs;
  for (std::size_t v = 0; v < static_cast<std::size_t>(virtual_stages_); ++v) {
    costs.forward.push_back(median_over_steps(medians_[0][v]));
    costs.backward.push_back(median_over_steps(medians_[1][v]));
    costs.weight.push_back(median_over_steps(medians_[2][v]));
  }
  return costs;
}

std::vector<std::vector<double>> EventDigest::microbatch_latency(std::size_t steps) const {
  std::vector<std::vector<double>> latency(steps, std::vector<double>(static_cast<std::size_t>(microbatches_), kNaN));
  for (std::size_t k = 0; k < steps && k < enter_.size(); ++k)
    for (std::size_t j = 0; j < latency[k].size(); ++j) latency[k][j] = leave_[k][j] - enter_[k][j];
  return latency;
}

SimCosts measured_costs(const Schedule& s, const std::vector<EventRecord>& events, int warmup) {
  EventDigest digest(s, false);
  digest.add(events.data(), events.size());
  return digest.costs(warmup);
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

RunResult environment_failed_run(const Job& job, const RunPlan& plan, const std::string& message) {
  RunResult r = base_result(job, plan);
  r.status = RunStatus::failed;
  r.failure_kind = FailureKind::environment;
  r.failure_message = message;
  r.decision_reasons.push_back("environment: " + message + ": the run could not start; nothing was measured");
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

// Per-rank figures: memory, stage and host.
void add_rank_figures(RunResult& r, const std::vector<RankRecord>& ranks) {
  for (const auto& rk : ranks)
    if (!rk.steps.empty() && rk.steps.front().grad_sync_bytes > 0.0)
      r.grad_sync_bytes.push_back(static_cast<std::uint64_t>(rk.steps.front().grad_sync_bytes));
  if (r.grad_sync_bytes.size() != ranks.size()) r.grad_sync_bytes.clear();
  for (const auto& rk : ranks) {
    r.peak_mem_bytes.push_back(rk.peak_mem_bytes);
    r.memory_capacity_bytes.push_back(rk.memory_capacity_bytes);
    for (int c = 0; c < kNumMemCategories; ++c)
      r.peak_mem_by_category[static_cast<std::size_t>(c)].push_back(rk.peak_mem_by_category[static_cast<std::size_t>(c)]);
    r.stage_params.push_back(rk.stage_params);
    r.peak_live_activations.push_back(rk.peak_live_activations);
    r.device_used_before_bytes.push_back(rk.device_used_before_bytes);
    r.device_used_peak_bytes.push_back(rk.device_used_peak_bytes);
    r.stage_layers.push_back(rk.stage_layers);
    r.pipeline_rank.push_back(rk.pipeline_rank);
    r.data_rank.push_back(rk.data_rank);
    r.tensor_rank.push_back(rk.tensor_rank);
    r.context_rank.push_back(rk.context_rank);
    r.hostnames.push_back(rk.hostname);
    r.pids.push_back(rk.pid);
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
  // The rank holding the last virtual stage computes the loss (rank 0 in a V),
  // replica 0's (the replicas' mean); the gradient norm is every rank's.
  const int V = plan.schedule.num_virtual_stages();
  const std::size_t last = ranks.empty() ? 0 : r.rank_index(plan.schedule.rank_of(V - 1));
  const bool replicas = plan.run.grad_group() > 1 && plan.run.mode == RunMode::train;  // gradients reduced
  const bool tensor = plan.run.tensor_parallel > 1;
  std::vector<double> counted_time, counted_slowest, counted_bubble, counted_imbalance;
  for (std::size_t k = 0; k < steps; ++k) {
    double t = 0.0, busy_sum = 0.0, busy_max = 0.0;
    std::vector<double> busy(P), wait(P), transfer(P), idle(P), fwd(P), bwd(P), opt(P), sync_start(P), sync(P), exposed(P),
        tp(P);
    for (std::size_t i = 0; i < P; ++i) {
      const StepRecord& s = ranks[i].steps[k];
      t = std::max(t, s.end_s);
      busy[i] = s.busy_s;
      wait[i] = s.comm_wait_s;
      transfer[i] = s.comm_transfer_s;
      fwd[i] = s.forward_s;
      bwd[i] = s.backward_s;
      opt[i] = s.optimizer_s;
      sync_start[i] = s.grad_sync_start_s;
      sync[i] = s.grad_sync_s;
      exposed[i] = s.grad_sync_exposed_s;
      tp[i] = s.tensor_comm_s;
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
    if (replicas) {
      r.grad_sync_start_s.push_back(sync_start);
      r.grad_sync_s.push_back(sync);
      r.grad_sync_exposed_s.push_back(exposed);
    }
    if (tensor) r.tensor_comm_s.push_back(tp);
    if (!warm) {
      counted_time.push_back(t);
      counted_slowest.push_back(busy_max);
      counted_bubble.push_back(bubble);
      counted_imbalance.push_back(imb);
    }
  }
  // Every rank's collectives of its completed steps, rank by rank (grad_buckets).
  if (replicas && steps > 0)
    for (const RankRecord& rank : ranks) r.grad_buckets.insert(r.grad_buckets.end(), rank.buckets.begin(), rank.buckets.end());
  r.step_time = compute_stats(counted_time);
  r.slowest_stage_median_s = median_of(counted_slowest);
  r.bubble_measured_median = median_of(counted_bubble);
  r.imbalance_median = median_of(counted_imbalance);
  if (!counted_time.empty())
    r.throughput_samples_per_s = static_cast<double>(plan.run.global_batch()) / r.step_time.median;
  return steps;
}

}  // namespace

namespace {

// The median over counted steps of `per_step[k][i]`; NaN when none.
double counted_median(const RunResult& r, const std::vector<std::vector<double>>& per_step, std::size_t i) {
  std::vector<double> v;
  for (std::size_t k = 0; k < per_step.size() && k < r.is_warmup.size(); ++k)
    if (!r.is_warmup[k] && i < per_step[k].size()) v.push_back(per_step[k][i]);
  return v.empty() ? kNaN : median_of(v);
}

// The simulated schedule's bubble as the measured one counts it: with
// replicas a step also holds each rank's exposed gradient synchronisation
// past its last action (ZeRO-1: and the parameter all-gather), so the work
// ends at the latest of every rank's last action's end (its stage's,
// simulated) plus its median counted exposed time; then every rank's median optimizer step, busy, after the step's
// work (the global gradient norm waits for every rank).
// Sharded parameters gathered inside the forwards (`plan`'s gates and
// per-action waits, which the simulation takes): their waits are inside the
// simulated actions' times already, so they leave the exposed time added here.
double simulated_step_bubble(const RunResult& r, const RunPlan& plan, const SimResult& sim) {
  const std::size_t n = r.pipeline_rank.empty() ? sim.busy.size() : r.pipeline_rank.size();
  double step = sim.makespan, busy = 0.0, optimizer = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto stage = r.pipeline_rank.empty() ? i : static_cast<std::size_t>(r.pipeline_rank[i]);
    if (stage >= sim.busy.size()) return sim.bubble;
    const double waited = stage < plan.stages.size() ? plan.stages[stage].grad_sync.gather_wait_s : 0.0;
    const double exposed = std::max(0.0, counted_median(r, r.grad_sync_exposed_s, i) - waited);
    if (std::isfinite(exposed)) step = std::max(step, sim.last_end[stage] + exposed);
    const double opt = counted_median(r, r.optimizer_s, i);
    if (std::isfinite(opt)) {
      optimizer = std::max(optimizer, opt);
      busy += opt;
    }
    busy += sim.busy[stage];
  }
  return 1.0 - busy / (static_cast<double>(n) * (step + optimizer));
}

}  // namespace

RunResult assemble_run(const Job& job, const RunPlan& plan, const std::vector<RankRecord>& ranks) {
  EventDigest digest(plan.schedule, plan.run.mode == RunMode::inference);
  std::vector<EventRecord> events;
  for (const auto& rk : ranks) {
    digest.add(rk.events.data(), rk.events.size());
    events.insert(events.end(), rk.events.begin(), rk.events.end());
  }
  return assemble_run(job, plan, ranks, digest, std::move(events));
}

std::vector<int> rank_nodes(const Job& job, const RunPlan& plan, const std::vector<std::string>& hosts) {
  std::vector<int> node;
  if (job.device.backend == BackendKind::sim) {
    const parallel::RankGrid grid = parallel::run_grid(plan.run, job.device);
    for (std::size_t i = 0; i < hosts.size(); ++i) node.push_back(grid.node(static_cast<int>(i)));
    return node;
  }
  std::vector<std::string> seen;
  for (const std::string& h : hosts) {
    const auto at = std::find(seen.begin(), seen.end(), h);
    node.push_back(static_cast<int>(at - seen.begin()));
    if (at == seen.end()) seen.push_back(h);
  }
  return node;
}

RunResult assemble_run(const Job& job, const RunPlan& plan, const std::vector<RankRecord>& ranks,
                       const EventDigest& digest, std::vector<EventRecord> events) {
  RunResult r = base_result(job, plan);
  add_failure(r, ranks);
  add_rank_figures(r, ranks);
  if (plan.run.grad_group() > 1 || plan.run.tensor_parallel > 1) r.node = rank_nodes(job, plan, r.hostnames);
  r.events = std::move(events);
  const std::size_t steps = add_step_figures(r, job, plan, ranks);
  const auto counted_steps = static_cast<int>(std::count(r.is_warmup.begin(), r.is_warmup.end(), 0));
  r.repeats_extended = std::max(0, counted_steps - r.repeats);
  if (plan.run.mode == RunMode::inference && steps > 0) r.microbatch_latency_s = digest.microbatch_latency(steps);

  // bubble_simulated: the schedule simulated with this run's per-action
  // medians and optimizer steps (simulated_step_bubble); on the sim backend
  // with its modelled link too (sim_load × the transfer on the run's pipeline
  // link, what the transport's LinkModel takes per message), so that what is
  // left between the two is what the executor and the transport add themselves.
  const bool any_counted = std::count(r.is_warmup.begin(), r.is_warmup.end(), 0) > 0;
  if (any_counted) {
    SimCosts costs = digest.costs(job.train.warmup);
    if (job.device.backend == BackendKind::sim) costs.transfer = job.device.sim_load * plan.costs.transfer;
    // The modelled waits for parameter gathers inside the actions (the events leave them out).
    costs.first_forward_gates = plan.costs.first_forward_gates;
    costs.forward_wait = plan.costs.forward_wait;
    costs.backward_wait = plan.costs.backward_wait;
    const SimResult sim = simulate_checked(plan.schedule, costs, false);  // a plan's schedule is validated
    if (sim.completed && sim.makespan > 0.0) r.bubble_simulated = simulated_step_bubble(r, plan, sim);
  }
  return r;
}

std::size_t RunResult::rank_index(int stage) const {
  for (std::size_t i = 0; i < pipeline_rank.size() && i < data_rank.size(); ++i)
    if (pipeline_rank[i] == stage && data_rank[i] == 0 && (i >= tensor_rank.size() || tensor_rank[i] == 0)) return i;
  return static_cast<std::size_t>(stage);
}

std::string rank_label(const RunResult& r, std::size_t i) {
  const auto at = [i](const std::vector<int>& v) { return i < v.size() ? v[i] : 0; };
  if (r.spec.grad_group() <= 1 && r.spec.tensor_parallel <= 1) return fmt::format("stage {}", i);
  std::string s = fmt::format("rank {} (stage {}", i, at(r.pipeline_rank));
  if (r.spec.data_parallel > 1) s += fmt::format(", replica {}", at(r.data_rank));
  if (r.spec.context_parallel > 1) s += fmt::format(", context rank {}", at(r.context_rank));
  if (r.spec.tensor_parallel > 1) s += fmt::format(", tensor rank {}", at(r.tensor_rank));
  return s + ")";
}

int RunResult::layers_on_rank(int rank) const {
  int n = 0;
  for (std::size_t v = 0; v < layers_per_stage.size() && v < stage_rank.size(); ++v)
    if (stage_rank[v] == rank) n += layers_per_stage[v];
  return n;
}

double capacity_fraction(const RunResult& r, std::size_t i) {
  return static_cast<double>(r.peak_mem_bytes[i]) / static_cast<double>(r.memory_capacity_bytes[i]);
}

int fullest_rank(const RunResult& r) {
  int top = -1;
  double top_frac = 0.0;
  for (std::size_t i = 0; i < r.peak_mem_bytes.size() && i < r.memory_capacity_bytes.size(); ++i)
    if (const double frac = capacity_fraction(r, i); frac >= top_frac) {  // never a NaN (0 / 0 in a damaged file)
      top_frac = frac;
      top = static_cast<int>(i);
    }
  return top;
}

double peak_capacity_fraction(const RunResult& r) {
  double worst = kNaN;
  for (std::size_t i = 0; i < r.peak_mem_bytes.size() && i < r.memory_capacity_bytes.size(); ++i) {
    const double frac = capacity_fraction(r, i);
    worst = std::isnan(worst) ? frac : std::max(worst, frac);
  }
  return worst;
}

double wait_start_s(const EventRecord& e, double prev_end_s) { return std::max(prev_end_s, e.start_s - e.wait_s); }

std::string best_run_summary(const std::vector<RunResult>& runs) {
  std::vector<const RunResult*> candidates;
  for (const auto& r : runs)
    // Every layout on more than one rank (stages, replicas or tensor ranks):
    // a tuned p 1 x d 4 x t 2 run competes with the pipelines it was chosen over.
    if (r.status == RunStatus::ok && r.spec.mode == RunMode::train && r.spec.ranks() > 1 &&
        r.decision != "not_feasible" && std::isfinite(r.step_time.median))
      candidates.push_back(&r);
  if (candidates.empty()) return "";
  // Fastest per sample: runs of different global batches do different work per step.
  auto per_sample = [](const RunResult* r) { return r->step_time.median / std::max(1, r->spec.global_batch()); };
  const RunResult* fastest = *std::min_element(candidates.begin(), candidates.end(), [&](const RunResult* a, const RunResult* b) {
    return per_sample(a) < per_sample(b);
  });
  // Tied: the speedup intervals overlap (same baseline, both per step or
  // both per sample), else times per sample within 1%.
  auto tied = [&](const RunResult* r) {
    if (r == fastest) return true;
    if (std::isfinite(r->speedup_high) && std::isfinite(fastest->speedup_low) && r->baseline == fastest->baseline &&
        r->speedup_per_sample == fastest->speedup_per_sample && r->spec.global_batch() == fastest->spec.global_batch())
      return r->speedup_high >= fastest->speedup_low;
    return per_sample(r) <= 1.01 * per_sample(fastest);
  };
  std::vector<const RunResult*> ties;
  for (const auto* r : candidates)
    if (tied(r)) ties.push_back(r);
  const RunResult* best = *std::min_element(ties.begin(), ties.end(), [](const RunResult* a, const RunResult* b) {
    return a->peak_mem_max_bytes < b->peak_mem_max_bytes;
  });
  const std::string speedup = std::isfinite(best->speedup) ? "speedup " + format_speedup(*best) : "no baseline";
  std::string s = fmt::format("best: {} — {} per step ({} samples), {}, peak {}, {}", best->spec.name,
                              format_seconds(best->step_time.median), best->spec.global_batch(), speedup,
                              format_bytes(static_cast<double>(best->peak_mem_max_bytes)), best->decision);
  std::string others;
  for (const auto* r : ties)
    if (r != best) others += fmt::format("{}{}", others.empty() ? "" : ", ", r->spec.name);
  if (!others.empty()) s += fmt::format("; tied on time with {} (overlapping intervals), chosen for the lowest peak memory", others);
  // The best pipeline may still lose to its baseline: say so, not only "0.41x".
  if (std::isfinite(best->speedup_high) && best->speedup_high < 1.0 && !best->baseline.empty())
    s += fmt::format("; slower than its baseline {}: no pipelined run here beats it", best->baseline);
  return s;
}

}  // namespace pipebench
