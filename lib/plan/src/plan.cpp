#include "pipebench/plan/plan.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "pipebench/core/checked.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/plan/plan_format.hpp"
#include "pipebench/schedule/schedule_csv.hpp"
#include "pipebench/schedule/validate.hpp"

namespace pipebench {

DType storage_dtype(const Job& job) {
  return job.device.backend == BackendKind::cpu ? DType::fp32 : job.model.dtype;
}

namespace {
// F, B and W from their compute seconds (B's with the recomputation it runs
// first) and `cost`'s tensor-parallel collectives on `link`; without `split`
// B is the whole backward and W nothing. Both rules' one assembly.
ActionSeconds with_collectives(ActionSeconds a, double forward, double input, double weight, const Cost& cost, int t,
                               const parallel::Link& link, bool split) {
  auto comm = [&](const TensorComm& c) { return parallel::tensor_comm_s(c.calls, c.wire_bytes, t, link); };
  a.forward_comm = comm(cost.tp_forward);
  a.forward = forward + a.forward_comm;
  const double input_comm = comm(cost.tp_input_grad), weight_comm = comm(cost.tp_weight_grad);
  input += input_comm;
  weight += weight_comm;
  a.backward = split ? input : input + weight;
  a.backward_comm = split ? input_comm : input_comm + weight_comm;
  a.weight = split ? weight : 0.0;
  a.weight_comm = split ? weight_comm : 0.0;
  return a;
}
}  // namespace

ActionSeconds action_seconds(const Job& job, const Cost& cost, int t, const parallel::Link& link, bool split) {
  const double speed = job.device.sim_flops_per_s;
  return with_collectives({}, cost.forward_flops / speed,
                          0.5 * cost.backward_flops / speed + cost.recompute_flops / speed,
                          0.5 * cost.backward_flops / speed, cost, t, link, split);
}

namespace {
// The context group's exposed K/V exchange added to F and B: each of the
// range's blocks waits for its own, behind its attention core (the time
// model's, or its FLOPs at sim_flops_per_s).
ActionSeconds with_context(ActionSeconds a, const Job& job, const ModelDesc& model, int b, const StageRange& range,
                           const parallel::ContextGroup& context) {
  if (context.degree <= 1 || range.num_layers == 0) return a;
  double forward = model.attention_core_flops(b) / job.device.sim_flops_per_s, backward = 2.0 * forward;
  if (job.device.preset) {
    const PieceTime block = TimeModel(device_model(job.device), model.dtype()).block(model, b);
    forward = block.forward.attention_s;
    backward = block.input_grad.attention_s;
  }
  const parallel::ContextExchange x =
      parallel::context_exchange(context, static_cast<std::uint64_t>(model.context_kv_bytes(b)), forward, backward);
  a.forward_context = range.num_layers * x.forward_s;
  a.backward_context = range.num_layers * x.backward_s;
  a.forward += a.forward_context;
  a.backward += a.backward_context;
  return a;
}
}  // namespace

ActionSeconds action_seconds(const Job& job, const ModelDesc& model, int b, const StageRange& range,
                             const parallel::Link& link, bool split, const parallel::ContextGroup& context) {
  const Cost cost = model.stage(b, range.num_layers, range.has_embedding, range.has_head);
  const int t = model.split().degree;
  if (!job.device.preset) return with_context(action_seconds(job, cost, t, link, split), job, model, b, range, context);
  ActionSeconds a;
  a.terms = TimeModel(device_model(job.device), model.dtype()).stage(model, b, range.num_layers, range.has_embedding,
                                                               range.has_head);
  return with_context(with_collectives(a, a.terms.forward.total(),
                                       a.terms.input_grad.total() + a.terms.recompute.total(),
                                       a.terms.weight_grad.total(), cost, t, link, split),
                      job, model, b, range, context);
}

double optimizer_seconds(const Job& job, DType dtype, std::int64_t params) {
  if (job.device.preset) return TimeModel(device_model(job.device), dtype).optimizer_s(job.train.optimizer, params);
  const double flops_per_param = job.train.optimizer == OptimizerKind::adamw ? 12.0 : 2.0;
  return flops_per_param * static_cast<double>(params) / job.device.sim_flops_per_s;
}

double step_flops(const RunPlan& rp, bool hardware) {
  double per_microbatch = 0.0;
  const bool train = rp.run.mode == RunMode::train;
  const bool twice = hardware && train && rp.run.recompute == Recompute::full;
  for (const StagePlan& sp : rp.stages)
    per_microbatch += sp.cost.forward_flops * (twice ? 2.0 : 1.0) + (train ? sp.cost.backward_flops : 0.0) +
                      (hardware ? sp.cost.recompute_flops : 0.0);
  return per_microbatch * rp.run.num_microbatches * rp.run.data_parallel * rp.run.tensor_parallel *
         rp.run.context_parallel;
}

SimCosts model_costs(const Job& job, const RunSpec& run, const ModelDesc& model, const Partition& partition,
                     bool split_backward, Placement placement) {
  SimCosts c;
  for (std::size_t v = 0; v < partition.stages.size(); ++v) {
    const StageRange& st = partition.stages[v];
    const int stage = placed_rank(placement, run.pipeline_size, static_cast<int>(v));
    const parallel::Link link = parallel::stage_tensor_link(job.device, run, stage);
    const ActionSeconds a = action_seconds(job, model, run.micro_batch_size, st, link, split_backward,
                                           parallel::stage_context_group(job.device, run, stage));
    c.forward.push_back(a.forward);
    c.backward.push_back(a.backward);
    c.weight.push_back(a.weight);
  }
  c.transfer = parallel::transfer_s(parallel::pipeline_link(job.device, run),
                                    static_cast<std::uint64_t>(model.boundary_bytes(run.micro_batch_size)));
  return c;
}

ClosedForm bubble_closed_form(std::string_view name, int ranks, int microbatches, int chunks) {
  const double p = ranks, m = microbatches, v = chunks;
  if (name == "gpipe" || name == "1f1b" || name == "eager-1f1b" || name == "forward-only")
    return {"(p-1)/(m+p-1)", (p - 1) / (m + p - 1)};
  if (name == "interleaved-1f1b") return {"(p-1)/(v m+p-1)", (p - 1) / (v * m + p - 1)};
  if (name == "looped-bfs" && m >= p) return {"(p-1)/(v m+p-1)", (p - 1) / (v * m + p - 1)};
  if (name == "interleaved-zb" && m >= p) return {"(p-1)/(3v m+p-1)", (p - 1) / (3 * v * m + p - 1)};
  if (name == "zb-h1") return {"(p-1)/(3m+p-1)", (p - 1) / (3 * m + p - 1)};
  if (name == "zb-v" && m >= 2 * p) return {"(p-1)/(6m+p-1)", (p - 1) / (6 * m + p - 1)};
  if (name == "dualpipev" && m >= 2 * p) return {"(p-1)/(6m+p-1)", (p - 1) / (6 * m + p - 1)};
  return {"", std::numeric_limits<double>::quiet_NaN()};
}

ClosedForm bubble_closed_form(const Schedule& s) {
  return bubble_closed_form(s.name, s.num_ranks, s.num_microbatches, s.chunks_per_rank);
}

double analytic_bubble(const Schedule& s) { return bubble_closed_form(s).value; }

std::vector<PartitionAlternative> partition_alternatives(const ModelDesc& model, const RunSpec& run) {
  struct Rule {
    const char* name;
    Remainder remainder;
    BalanceBy by;
  };
  std::vector<PartitionAlternative> out;
  for (const Rule& rule : {Rule{"remainder-first", Remainder::first, BalanceBy::flops},
                           Rule{"remainder-last", Remainder::last, BalanceBy::flops},
                           Rule{"balanced-cost", Remainder::balanced, BalanceBy::flops},
                           Rule{"balanced-params", Remainder::balanced, BalanceBy::params}}) {
    RunSpec r = run;
    r.layers_per_stage.clear();
    r.remainder = rule.remainder;
    r.balance_by = rule.by;
    PartitionAlternative a;
    a.rule = rule.name;
    a.chosen = run.layers_per_stage.empty() && run.remainder == rule.remainder &&
               (rule.remainder != Remainder::balanced || run.balance_by == rule.by);
    for (const StageRange& st : make_partition(model, r).stages) {
      const Cost c = model.stage(run.micro_batch_size, st.num_layers, st.has_embedding, st.has_head);
      a.layers_per_stage.push_back(st.num_layers);
      a.slowest_flops = std::max(a.slowest_flops, c.forward_flops + c.backward_flops);
      a.largest_params = std::max(a.largest_params, c.params);
    }
    out.push_back(std::move(a));
  }
  return out;
}

Schedule run_schedule(const RunSpec& run) {
  if (run.schedule != ScheduleKind::file || run.mode == RunMode::inference) return make_schedule(run);
  Schedule s = schedule_from_csv(run.schedule_csv, run.pipeline_size, run.num_microbatches, run.schedule_file);
  if (s.chunks_per_rank != run.virtual_stages_per_rank)
    throw ScheduleError(fmt::format("{}: the schedule holds {} stage(s) per rank; set run.{}.virtual_stages_per_rank = {}",
                                    run.schedule_file, s.chunks_per_rank, run.name, s.chunks_per_rank));
  return s;
}

namespace {

// "model.hidden = 1048576 (jobs/x.toml:5)": a key, its value and where it was
// set (or "default").
std::string key_and_source(const Job& job, const std::string& key, std::int64_t value) {
  const auto it = job.locations.find(key);
  return fmt::format("{} = {} ({})", key, value, it == job.locations.end() ? "default" : it->second);
}

// The sizes of `run` do not fit 64-bit counts: a ConfigError naming every key
// the model's sizes are products of, with the value and where it came from.
ConfigError too_large(const Job& job, const RunSpec& run) {
  const ModelSpec& m = job.model;
  const std::string r = "run." + run.name + ".";
  std::string keys;
  for (const auto& [key, value] :
       {std::pair<std::string, std::int64_t>{"model.hidden", m.hidden}, {"model.ffn_hidden", m.ffn_hidden},
        {"model.heads", m.heads}, {"model.seq_len", m.seq_len}, {"model.vocab", m.vocab},
        {"model.layers", m.layers}, {r + "micro_batch_size", run.micro_batch_size},
        {r + "num_microbatches", run.num_microbatches}})
    keys += fmt::format("{}{}", keys.empty() ? "" : ", ", key_and_source(job, key, value));
  return ConfigError(fmt::format(
      "{}:{}: run.{}: the model's parameter or byte counts exceed 64-bit integers; they are products of {}. Reduce "
      "these (docs/model.md has the formulas)",
      job.source_path, run.source_line, run.name, keys));
}

// `peak_live`, `split` and `send_pools`: peak_live_activations(sched),
// sched.split_backward() and send_slot_pools(sched), where the caller has them
// (each a pass over every action).
StageMemory plan_memory_unchecked(const Job& job, const RunSpec& run, const Schedule& sched, const Partition& partition,
                                  const std::vector<int>& peak_live, bool split,
                                  const std::vector<RankSendSlots>& send_pools) {
  StageMemory out;
  const DType dtype = storage_dtype(job);
  const ModelDesc model(job.model, dtype, tensor_split(run));
  const bool train = run.mode == RunMode::train;
  const int p = run.pipeline_size, b = run.micro_batch_size;

  std::vector<Cost>& chunk_cost = out.stage_costs;
  std::vector<std::int64_t> chunk_activation_bytes, chunk_stash_bytes;
  for (const StageRange& range : partition.stages) {
    chunk_cost.push_back(model.stage(b, range.num_layers, range.has_embedding, range.has_head));
    chunk_activation_bytes.push_back(chunk_cost.back().activation_bytes);
    chunk_stash_bytes.push_back(chunk_cost.back().split_stash_bytes);
  }
  std::vector<std::int64_t> peak_bytes;
  if (run.recompute == Recompute::full) {
    if (split)
      throw ConfigError(fmt::format("{}:{}: run.{}.recompute: \"full\" with a split-backward schedule (W actions) is not "
                                    "supported",
                                    job.source_path, run.source_line, run.name));
    std::vector<std::int64_t> kept, piece;
    for (const StageRange& r : partition.stages) {
      kept.push_back(model.recompute_kept_bytes(b, r.num_layers, r.has_embedding, r.has_head));
      piece.push_back(model.recompute_piece_bytes(b, r.num_layers, r.has_embedding, r.has_head));
    }
    peak_bytes = peak_recompute_activation_bytes(sched, kept, piece);
  } else {
    peak_bytes = peak_live_activation_bytes(sched, chunk_activation_bytes,
                                            split ? chunk_stash_bytes : std::vector<std::int64_t>{});
  }
  const StateBytes per_param = state_bytes_per_param(job.train.optimizer, dtype);
  const auto capacity = static_cast<double>(job.device.memory_capacity_bytes);
  const int V = sched.num_virtual_stages();
  for (int r = 0; r < p; ++r) {
    const auto s = static_cast<std::size_t>(r);
    StagePlan sp;
    sp.stage = r;
    CheckedInt comm = 0;
    for (int c = 0; c < sched.chunks_per_rank; ++c) {
      const int v = sched.virtual_stage(r, c);
      sp.chunks.push_back(partition.stages[static_cast<std::size_t>(v)]);
      sp.cost += chunk_cost[static_cast<std::size_t>(v)];
      // Every chunk boundary has its buffers, also between two chunks of one
      // rank (the V's turn): the executor copies between them.
      const RankSendSlots& slots = send_pools[s];
      comm = comm + model.comm_bytes(b, slots.b_pool[static_cast<std::size_t>(c)], slots.f_pool[static_cast<std::size_t>(c)],
                                     v > 0, v + 1 < V, train);
    }
    std::int64_t largest = 0;
    for (const StageRange& c : sp.chunks)
      largest = std::max(largest, model.largest_piece_params(c.num_layers, c.has_embedding, c.has_head));
    const TrainingState state = training_state_bytes(run, sp.cost.params, per_param, largest);
    sp.params_bytes = state.params;
    sp.grads_bytes = state.grads;
    sp.optimizer_bytes = state.optimizer;
    sp.activation_bytes_per_microbatch = sp.cost.activation_bytes;
    sp.peak_live_activations = peak_live[s];
    sp.activations_peak_bytes = train ? peak_bytes[s] : sp.activation_bytes_per_microbatch;
    sp.comm_bytes = comm.value();
    sp.workspace_bytes = model.workspace_bytes(job.device.backend, b, train);
    sp.total_bytes = (CheckedInt(sp.params_bytes) + sp.grads_bytes + sp.optimizer_bytes + sp.activations_peak_bytes +
                      sp.comm_bytes + sp.workspace_bytes)
                         .value();
    sp.capacity_fraction = static_cast<double>(sp.total_bytes) / capacity;
    sp.optimizer_s = train ? optimizer_seconds(job, dtype, optimizer_shard_params(run, sp.cost.params)) : 0.0;
    if (sp.capacity_fraction > kMemoryWarnFraction)
      out.warnings.push_back(fmt::format(
          "run {} stage {}: estimated {} is {:.0f}% of memory_capacity {} (above {:.0f}%){}", run.name, r,
          format_bytes(static_cast<double>(sp.total_bytes)), 100.0 * sp.capacity_fraction,
          format_bytes(capacity), 100.0 * kMemoryWarnFraction,
          sp.capacity_fraction > 1.0 ? ": it will not fit" : ""));
    out.stages.push_back(sp);
  }
  return out;
}


// `schedule`, `liveness`: the run's schedule and its liveness where the
// caller has them (both or neither).
RunPlan plan_run_unchecked(const Job& job, const RunSpec& run, const Schedule* schedule = nullptr,
                           const ScheduleLiveness* liveness = nullptr) {
  RunPlan plan;
  plan.run = run;
  plan.storage_dtype = storage_dtype(job);
  const ModelDesc model(job.model, plan.storage_dtype, tensor_split(run));
  plan.schedule = schedule ? *schedule : run_schedule(run);
  plan.partition = make_partition(model, run);
  if (run.model_stages() > 1) plan.partition_alternatives = partition_alternatives(model, run);
  plan.bubble_analytic = analytic_bubble(plan.schedule);
  const bool split = plan.schedule.split_backward();
  plan.costs = model_costs(job, run, model, plan.partition, split, plan.schedule.placement);
  if (run.recompute == Recompute::full)  // B runs the forward again first
    for (std::size_t v = 0; v < plan.costs.backward.size(); ++v) plan.costs.backward[v] += plan.costs.forward[v];
  // Validated, and simulated with unit costs (the validator's deadlock check)
  // and with the model's in the same walk; the unit timeline only where `plan`
  // can draw it as a grid (at most kGridMaxSteps actions per rank on
  // kGridMaxRanks ranks); the costed one never.
  const bool grid = plan.schedule.total_actions() <= static_cast<std::size_t>(kGridMaxRanks * kGridMaxSteps);
  auto [unit, simulated] = validate_and_simulate(plan.schedule, plan.costs, grid);
  plan.unit = std::move(unit);
  plan.simulated = std::move(simulated);
  StageMemory memory = plan_memory_unchecked(job, run, plan.schedule, plan.partition, plan.unit.peak_live_activations, split,
                                              liveness ? liveness->send_pools : send_slot_pools(plan.schedule));
  plan.stage_costs = std::move(memory.stage_costs);
  plan.stages = std::move(memory.stages);
  plan.warnings = std::move(memory.warnings);
  plan_grad_sync(job, plan);
  // The global gradient norm (clipping) waits for every rank: the optimizer
  // steps start together at step_s.
  double after = 0.0;
  if (run.mode == RunMode::train)
    for (const StagePlan& sp : plan.stages) after = std::max(after, sp.optimizer_s + sp.grad_sync.gather_s);
  plan.iteration_s = plan.step_s + after;
  return plan;
}

}  // namespace

RunPlan plan_run(const Job& job, const RunSpec& run) {
  try {
    return plan_run_unchecked(job, run);
  } catch (const ArithmeticOverflow&) {
    throw too_large(job, run);
  }
}

RunPlan plan_run(const Job& job, const RunSpec& run, const Schedule& schedule, const ScheduleLiveness& liveness) {
  try {
    return plan_run_unchecked(job, run, &schedule, &liveness);
  } catch (const ArithmeticOverflow&) {
    throw too_large(job, run);
  }
}

ScheduleLiveness::ScheduleLiveness(const Schedule& schedule)
    : peak_live(peak_live_activations(schedule)),
      split(schedule.split_backward()),
      send_pools(send_slot_pools(schedule)) {}

StageMemory plan_memory(const Job& job, const RunSpec& run, const Schedule& schedule, const Partition& partition,
                        const ScheduleLiveness& liveness) {
  try {
    return plan_memory_unchecked(job, run, schedule, partition, liveness.peak_live, liveness.split,
                                 liveness.send_pools);
  } catch (const ArithmeticOverflow&) {
    throw too_large(job, run);
  }
}

StageMemory plan_memory(const Job& job, const RunSpec& run, const Schedule& schedule, const Partition& partition) {
  return plan_memory(job, run, schedule, partition, ScheduleLiveness(schedule));
}

JobPlan plan_job(const Job& job, const std::vector<std::string>& run_names) {
  JobPlan jp;
  jp.job = &job;
  for (const auto& name : run_names)
    if (!job.find_run(name)) {
      std::string known;
      for (const auto& r : job.runs) known += (known.empty() ? "" : ", ") + r.name;
      throw ConfigError(fmt::format("{}: no run named \"{}\" (runs: {})", job.source_path, printable(name), known));
    }
  for (const auto& run : job.runs)
    if (run_names.empty() || std::find(run_names.begin(), run_names.end(), run.name) != run_names.end())
      jp.runs.push_back(plan_run(job, run));
  return jp;
}

}  // namespace pipebench
