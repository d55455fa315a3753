// Checks a results file written by `pipebench run` against the plan of the
// same workload, with exact quantities only (never times):
//   verify_results FILE JOB.toml WORLD [RUN=STATUS[:KIND]]... [RUNS=N] [EXACT_LOSS]
//                  [LOSS0=RUN:OTHER]... [SAME_LOSS=RUN:OTHER]... [LOSS_FALLS=RUN:RATIO] [LOSS_REL=X]
//                  [SET=KEY=VALUE]...
// SET: the job as `pipebench run --set KEY=VALUE` ran it (the plan checked
// against is that job's: another backend's memory, another vocabulary).
// For every run: its status (default: ok, or skipped when it needs more than
// WORLD ranks) and failure kind; for ok runs, every rank's events are exactly
// its schedule's actions, step after step; peak activation bytes are the
// schedule's peak live micro-batches x the model's bytes per micro-batch;
// params/grads/optimizer/comm bytes are the model's formulas; the layer
// ranges built are the plan's. With a loss-computing backend, losses are
// finite; EXACT_LOSS: every ok run with a baseline has the baseline's losses
// bit for bit (loss_max_rel_dev == 0); LOSS0=A:B: run A's first-step loss
// equals run B's exactly (inference vs training forward); SAME_LOSS=A:B:
// every step's loss of A is B's bit for bit (a run repeated); LOSS_FALLS=R:X:
// the mean of R's last 5 losses is at most X times its first.
// Exits 1 listing every mismatch.
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "pipebench/core/config.hpp"
#include "pipebench/parallel/rank_grid.hpp"
#include "pipebench/plan/plan.hpp"
#include "pipebench/results/results.hpp"
#include "pipebench/schedule/send_slots.hpp"

using namespace pipebench;

namespace {

std::vector<std::string> problems;

template <typename A, typename B>
void expect_eq(const A& got, const B& want, const std::string& what) {
  if constexpr (std::is_floating_point_v<A> && std::is_floating_point_v<B>)
    if (std::isnan(got) && std::isnan(want)) return;  // "no closed form" on both sides
  if (!(got == want)) problems.push_back(fmt::format("{}: got {}, expected {}", what, got, want));
}

// Data parallelism: every rank is one (stage, replica) of the grid, once,
// in the run's rank order; each reduced its stage's gradient bytes every
// step, and its exposed synchronisation is a part of the whole.
void check_replicas(const Job& job, const RunPlan& plan, const RunResult& r, int steps) {
  const std::string run = r.spec.name;
  const int p = plan.run.pipeline_size, t = plan.run.tensor_parallel, cp = plan.run.context_parallel;
  const int d = plan.run.grad_group();  // the ranks a stage's gradients are reduced over: d x c
  const parallel::RankGrid grid({p, plan.run.data_parallel, t, cp}, plan.run.rank_order, plan.run.ranks());
  expect_eq(r.pipeline_rank.size(), static_cast<std::size_t>(plan.run.ranks()), run + ": pipeline_rank entries");
  for (std::size_t i = 0; i < r.pipeline_rank.size() && i < r.data_rank.size() && i < r.tensor_rank.size(); ++i) {
    const parallel::Coord c = grid.coord(static_cast<int>(i));
    expect_eq(r.pipeline_rank[i], c.pipeline, fmt::format("{}: rank {} stage", run, i));
    expect_eq(r.data_rank[i], c.data, fmt::format("{}: rank {} replica", run, i));
    expect_eq(r.tensor_rank[i], c.tensor, fmt::format("{}: rank {} tensor rank", run, i));
    expect_eq(r.context_rank.at(i), c.context, fmt::format("{}: rank {} context rank", run, i));
  }
  // Tensor parallelism: every rank spent time in its group's collectives each step.
  expect_eq(r.tensor_comm_s.size(), t > 1 ? static_cast<std::size_t>(steps) : std::size_t{0}, run + ": tensor_comm_s rows");
  for (std::size_t k = 0; k < r.tensor_comm_s.size(); ++k)
    for (std::size_t i = 0; i < r.tensor_comm_s[k].size(); ++i)
      if (!(r.tensor_comm_s[k][i] > 0.0))
        problems.push_back(fmt::format("{}: step {} rank {}: tensor_comm_s {} not positive", run, k, i, r.tensor_comm_s[k][i]));
  if (d == 1 || plan.run.mode != RunMode::train) {
    expect_eq(r.grad_sync_s.size(), std::size_t{0}, run + ": grad_sync_s without replicas");
    return;
  }
  const StateBytes per = state_bytes_per_param(job.train.optimizer, plan.storage_dtype);
  expect_eq(r.grad_sync_bytes.size(), static_cast<std::size_t>(p * d * t), run + ": grad_sync_bytes entries");
  for (std::size_t i = 0; i < r.grad_sync_bytes.size(); ++i)
    expect_eq(r.grad_sync_bytes[i],
              static_cast<std::uint64_t>(plan.stages.at(static_cast<std::size_t>(r.pipeline_rank.at(i))).cost.params) *
                  static_cast<std::uint64_t>(per.grads),
              fmt::format("{}: rank {} gradient bytes reduced", run, i));
  expect_eq(r.grad_sync_s.size(), static_cast<std::size_t>(steps), run + ": grad_sync_s rows");
  for (std::size_t k = 0; k < r.grad_sync_s.size() && k < r.grad_sync_exposed_s.size(); ++k)
    for (std::size_t i = 0; i < r.grad_sync_s[k].size(); ++i)
      if (!(r.grad_sync_exposed_s[k][i] >= 0.0 && r.grad_sync_exposed_s[k][i] <= r.grad_sync_s[k][i] + 1e-9))
        problems.push_back(fmt::format("{}: step {} rank {}: exposed sync {} not within [0, sync {}]", run, k, i,
                                       r.grad_sync_exposed_s[k][i], r.grad_sync_s[k][i]));
}

void check_ok_run(const Job& job, const RunPlan& plan, const RunResult& r) {
  const std::string run = r.spec.name;
  const int p = plan.run.pipeline_size;
  // The stability extension goes on to max_repeats or not at all (train.max_repeats).
  const int extended = job.train.max_repeats - job.train.repeats;
  if (r.repeats_extended != 0) expect_eq(r.repeats_extended, extended, run + ": repeats_extended (all of max_repeats or none)");
  expect_eq(r.max_repeats, job.train.max_repeats, run + ": max_repeats");
  const int steps = job.train.warmup + job.train.repeats + r.repeats_extended;
  const bool train = plan.run.mode == RunMode::train;
  expect_eq(r.step_time_s.size(), static_cast<std::size_t>(steps), run + ": steps recorded");
  expect_eq(r.is_warmup.size(), static_cast<std::size_t>(steps), run + ": is_warmup length");
  for (int k = 0; k < steps && k < static_cast<int>(r.is_warmup.size()); ++k)
    expect_eq(static_cast<int>(r.is_warmup[static_cast<std::size_t>(k)]), k < job.train.warmup ? 1 : 0,
              fmt::format("{}: is_warmup[{}]", run, k));
  expect_eq(r.schedule_name, plan.schedule.name, run + ": schedule");
  const int ranks = plan.run.ranks();  // p stages x d replicas
  expect_eq(r.busy_s.size(), static_cast<std::size_t>(steps), run + ": busy_s rows");
  if (!r.busy_s.empty()) expect_eq(r.busy_s[0].size(), static_cast<std::size_t>(ranks), run + ": busy_s columns");
  check_replicas(job, plan, r, steps);

  // The transfer is the part of the blocked time after the tensor was ready.
  expect_eq(r.comm_transfer_s.size(), static_cast<std::size_t>(steps), run + ": comm_transfer_s rows");
  for (std::size_t k = 0; k < r.comm_transfer_s.size() && k < r.comm_wait_s.size(); ++k)
    for (std::size_t i = 0; i < r.comm_transfer_s[k].size(); ++i)
      if (!(r.comm_transfer_s[k][i] >= 0.0 && r.comm_transfer_s[k][i] <= r.comm_wait_s[k][i]))
        problems.push_back(fmt::format("{}: step {} rank {}: comm_transfer_s {} not within [0, comm_wait_s {}]", run, k, i,
                                       r.comm_transfer_s[k][i], r.comm_wait_s[k][i]));
  double transfer_sum = 0.0;
  for (const auto& row : r.comm_transfer_s)
    for (double x : row) transfer_sum += x;
  if (p > 1 && !(transfer_sum > 0.0)) problems.push_back(run + ": a pipeline with no transfer time at all");

  // Events: per rank and step, exactly the schedule's actions in order (an
  // event is one computation: the overlap flag is the schedule's). The B of an
  // overlapped forward-backward waited for nothing: its input came before the F.
  std::map<std::pair<int, int>, std::vector<const EventRecord*>> seen;
  for (const auto& e : r.events) seen[{e.rank, e.step}].push_back(&e);
  for (int rank = 0; rank < p; ++rank)
    for (int k = 0; k < steps; ++k) {
      const auto& events = seen[{rank, k}];
      const auto& list = plan.schedule.actions[static_cast<std::size_t>(rank)];
      std::vector<Action> got, want = list;
      for (const EventRecord* e : events) got.push_back({e->kind, e->microbatch, e->chunk});
      for (Action& a : want) a.overlaps_next = false;
      if (got != want) {
        problems.push_back(fmt::format("{}: rank {} step {} executed [{}], schedule says [{}]", run, rank, k,
                                       to_text(got), to_text(want)));
        continue;
      }
      for (std::size_t i = 0; i + 1 < list.size(); ++i) {
        const EventRecord &f = *events[i], &b = *events[i + 1];
        if (list[i].overlaps_next && !(b.wait_s == 0.0 && b.start_s >= f.end_s))
          problems.push_back(fmt::format("{}: rank {} step {}: {} overlaps {}, which started at {} s (the F ended at "
                                         "{} s) and waited {} s",
                                         run, rank, k, to_string(list[i]), to_string(list[i + 1]), b.start_s, f.end_s,
                                         b.wait_s));
      }
    }
  expect_eq(r.events.size(), static_cast<std::size_t>(steps) * plan.schedule.total_actions(), run + ": event count");

  // Memory: exactly the model's sizes.
  const ModelDesc model(job.model, plan.storage_dtype, tensor_split(plan.run));
  const StateBytes per = state_bytes_per_param(job.train.optimizer, plan.storage_dtype);
  const auto boundary = static_cast<std::uint64_t>(model.boundary_bytes(plan.run.micro_batch_size));
  const std::vector<RankSendSlots> send_pools = send_slot_pools(plan.schedule);
  for (int rank = 0; rank < ranks; ++rank) {
    const auto R = static_cast<std::size_t>(rank);
    const auto S = static_cast<std::size_t>(r.pipeline_rank.at(R));  // its stage
    const StagePlan& sp = plan.stages[S];
    const auto params = static_cast<std::uint64_t>(sp.cost.params);
    const std::string who =
        fmt::format("{}: rank {} (stage {}, replica {}, tensor rank {})", run, rank, S, r.data_rank.at(R), r.tensor_rank.at(R));
    auto cat = [&](MemCategory c) { return r.peak_mem_by_category[static_cast<std::size_t>(c)].at(R); };
    // zero2 and fsdp (docs/parallel.md, "Memory"): the unsharded gradients
    // accumulate in the parameters' dtype beside the rank's fp32 shard of the
    // reduced ones; fsdp's parameters are the fp32 shard (the master copy
    // too) beside the gathered ones (all, or resharding the largest layer twice).
    const OptimizerSharding mode = shards_optimizer(plan.run) ? plan.run.optimizer_sharding : OptimizerSharding::none;
    const auto d = static_cast<std::uint64_t>(plan.run.grad_group());  // sharded over the replicas' context ranks
    const std::uint64_t shard = (params + d - 1) / d * 4;
    const auto p_bytes = static_cast<std::uint64_t>(per.params);
    const bool fsdp = mode == OptimizerSharding::fsdp;
    std::uint64_t gathered = params;
    if (fsdp && reshard_after_forward(plan.run)) {
      std::uint64_t largest = 0;
      for (const StageRange& c : sp.chunks)
        largest = std::max(largest, static_cast<std::uint64_t>(
                                        model.largest_piece_params(c.num_layers, c.has_embedding, c.has_head)));
      gathered = std::min(params, 2 * largest);
    }
    expect_eq(cat(MemCategory::params), fsdp ? shard + gathered * p_bytes : params * p_bytes, who + " peak params bytes");
    const bool grad_shard = mode == OptimizerSharding::zero2 || fsdp;
    // (Resharding FSDP reduce-scatters each layer's gradients as they come: the gathered layers' worth.)
    expect_eq(cat(MemCategory::grads),
              !train ? 0u : grad_shard ? (fsdp ? gathered : params) * p_bytes + shard
                                       : params * static_cast<std::uint64_t>(per.grads),
              who + " peak grads bytes");
    // The plan's: the whole state, or ZeRO-1's shard of ceil(n / d) (model.hpp).
    const auto state_params = static_cast<std::uint64_t>(optimizer_shard_params(plan.run, sp.cost.params));
    // fsdp: less the fp32 master copy a 16-bit dtype's optimizer keeps, which is the parameter shard.
    const std::uint64_t optimizer_per = static_cast<std::uint64_t>(per.optimizer) - (fsdp && p_bytes != 4 ? 4u : 0u);
    expect_eq(static_cast<std::uint64_t>(sp.optimizer_bytes), train ? state_params * optimizer_per : 0u,
              who + " planned optimizer bytes");
    const int live = plan.unit.peak_live_activations[S];
    const auto act = static_cast<std::uint64_t>(sp.activation_bytes_per_microbatch);
    expect_eq(cat(MemCategory::activations), train ? static_cast<std::uint64_t>(sp.activations_peak_bytes) : act,
              who + " peak activation bytes");
    expect_eq(cat(MemCategory::comm), static_cast<std::uint64_t>(sp.comm_bytes), who + " peak comm bytes");
    expect_eq(cat(MemCategory::workspace), static_cast<std::uint64_t>(sp.workspace_bytes), who + " peak workspace bytes");
    // Per chunk: a receive buffer from the previous virtual stage (+ in
    // training a gradient receive buffer from the next), and the send pools
    // of schedule/send_slots.hpp: as many buffers as sends in flight at once.
    std::uint64_t buffers = 0;
    const int V = plan.schedule.num_virtual_stages();
    const RankSendSlots& pools = send_pools.at(S);
    for (int c = 0; c < plan.schedule.chunks_per_rank; ++c) {
      const int v = plan.schedule.virtual_stage(static_cast<int>(S), c);
      const auto C = static_cast<std::size_t>(c);
      buffers += (v > 0 ? 1u : 0u) + (v + 1 < V && train ? 1u : 0u);
      buffers += static_cast<std::uint64_t>(pools.f_pool.at(C) + pools.b_pool.at(C));
    }
    expect_eq(static_cast<std::uint64_t>(sp.comm_bytes), buffers * boundary, who + " planned comm bytes");
    expect_eq(r.peak_live_activations.at(R), train ? live : 1, who + " peak live activations");
    expect_eq(r.stage_params.at(R), sp.cost.params, who + " stage_params");
    expect_eq(r.stage_layers.at(R)[0], sp.chunks.front().first_layer, who + " first layer built");
    expect_eq(r.stage_layers.at(R)[1], sp.chunks.back().last_layer(), who + " last layer built");
    expect_eq(r.memory_capacity_bytes.at(R), job.device.memory_capacity_bytes, who + " capacity");
  }
  if (plan.run.mode == RunMode::inference)
    expect_eq(r.microbatch_latency_s.size(), static_cast<std::size_t>(steps), run + ": microbatch_latency_s rows");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: verify_results FILE JOB.toml WORLD [RUN=STATUS[:KIND]]... [RUNS=N]\n");
    return 2;
  }
  const JobResult jr = read_results(argv[1]);
  std::vector<std::string> overrides;
  for (int i = 4; i < argc; ++i)
    if (std::string(argv[i]).rfind("SET=", 0) == 0) overrides.emplace_back(argv[i] + 4);
  const Job job = load_job(argv[2], overrides);
  const int world = std::stoi(argv[3]);
  std::map<std::string, std::string> expected;
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    const auto eq = a.find('=');
    if (eq == std::string::npos) expected[a] = "";
    else if (a.rfind("LOSS", 0) != 0 && a.rfind("SET=", 0) != 0) expected[a.substr(0, eq)] = a.substr(eq + 1);
  }
  std::size_t runs_expected = job.runs.size();  // all, unless RUNS=N (a --run selection)
  if (expected.count("RUNS")) runs_expected = std::stoul(expected["RUNS"]);
  expect_eq(jr.runs.size(), runs_expected, "number of runs");
  for (const auto& r : jr.runs) {
    const RunSpec* spec = job.find_run(r.spec.name);
    if (!spec) {
      problems.push_back("unexpected run " + r.spec.name);
      continue;
    }
    const RunPlan plan = plan_run(job, *spec);
    std::string want = spec->ranks() > world ? "skipped" : "ok";
    if (expected.count(r.spec.name)) want = expected[r.spec.name];
    std::string got(to_string(r.status));
    if (r.failure_kind != FailureKind::none) got += ":" + std::string(to_string(r.failure_kind));
    expect_eq(got, want, r.spec.name + ": status");
    expect_eq(r.bubble_analytic, plan.bubble_analytic, r.spec.name + ": bubble_analytic");
    if (r.status == RunStatus::ok) check_ok_run(job, plan, r);
    if (r.failure_kind == FailureKind::oom && r.failure_message.find("out of memory") == std::string::npos)
      problems.push_back(r.spec.name + ": oom failure message lacks 'out of memory': " + r.failure_message);
  }
  auto run_named = [&](const std::string& name) -> const RunResult* {
    for (const auto& r : jr.runs)
      if (r.spec.name == name) return &r;
    problems.push_back("no run named " + name + " in the file");
    return nullptr;
  };
  auto split = [](const std::string& v) { return std::make_pair(v.substr(0, v.find(':')), v.substr(v.find(':') + 1)); };
  if (job.device.backend == BackendKind::cpu)
    for (const auto& r : jr.runs)
      for (std::size_t k = 0; r.status == RunStatus::ok && k < r.loss.size(); ++k)
        if (!std::isfinite(r.loss[k])) problems.push_back(fmt::format("{}: loss[{}] is {}", r.spec.name, k, r.loss[k]));
  if (expected.count("EXACT_LOSS"))
    for (const auto& r : jr.runs) {
      if (r.status != RunStatus::ok || r.baseline.empty()) continue;
      const RunResult* base = run_named(r.baseline);
      if (!base) continue;
      expect_eq(r.loss_max_rel_dev, 0.0, r.spec.name + ": loss_max_rel_dev");
      for (std::size_t k = 0; k < std::min(r.loss.size(), base->loss.size()); ++k)
        if (r.loss[k] != base->loss[k])
          problems.push_back(fmt::format("{}: loss[{}] = {:.17g}, baseline {:.17g}", r.spec.name, k, r.loss[k], base->loss[k]));
    }
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("SAME_LOSS=", 0) == 0) {  // run A's losses are run B's, every step, bit for bit
      const auto [x, y] = split(a.substr(10));
      const RunResult *rx = run_named(x), *ry = run_named(y);
      if (rx && ry) {
        expect_eq(rx->loss.size(), ry->loss.size(), x + ": steps vs " + y);
        for (std::size_t k = 0; k < std::min(rx->loss.size(), ry->loss.size()); ++k)
          if (rx->loss[k] != ry->loss[k])
            problems.push_back(fmt::format("{}: loss[{}] = {:.17g}, {} has {:.17g}", x, k, rx->loss[k], y, ry->loss[k]));
      }
    } else if (a.rfind("LOSS0=", 0) == 0) {
      const auto [x, y] = split(a.substr(6));
      const RunResult *rx = run_named(x), *ry = run_named(y);
      if (rx && ry && !rx->loss.empty() && !ry->loss.empty())
        expect_eq(rx->loss[0], ry->loss[0], x + ": first-step loss vs " + y);
    } else if (a.rfind("LOSS_REL=", 0) == 0) {  // every ok run with a baseline: loss_max_rel_dev <= X
      const double tol = std::stod(a.substr(9));
      for (const auto& r : jr.runs)
        if (r.status == RunStatus::ok && !r.spec.baseline.empty() && !(r.loss_max_rel_dev <= tol))
          problems.push_back(fmt::format("{}: loss_max_rel_dev {:.3g} > {}", r.spec.name, r.loss_max_rel_dev, tol));
    } else if (a.rfind("LOSS_FALLS=", 0) == 0) {
      const auto [x, ratio] = split(a.substr(11));
      const RunResult* r = run_named(x);
      if (!r || r->loss.size() < 6) {
        problems.push_back(x + ": too few steps for LOSS_FALLS");
        continue;
      }
      double tail = 0.0;
      for (std::size_t k = r->loss.size() - 5; k < r->loss.size(); ++k) tail += r->loss[k] / 5.0;
      std::printf("%s: first loss %.4f, mean of the last 5 %.4f\n", x.c_str(), r->loss[0], tail);
      if (!(tail <= std::stod(ratio) * r->loss[0]))
        problems.push_back(fmt::format("{}: mean of the last 5 losses {:.4f} > {} x first {:.4f}", x, tail, ratio, r->loss[0]));
    }
  }
  for (const auto& p : problems) std::fprintf(stderr, "MISMATCH %s\n", p.c_str());
  std::printf("%s: %zu runs checked, %zu mismatches\n", argv[1], jr.runs.size(), problems.size());
  return problems.empty() ? 0 : 1;
}
