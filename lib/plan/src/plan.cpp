#include "pipebench/plan/plan.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "pipebench/core/checked.hpp"
#include "pipebench/core/error.hpp"
#include "pipebench/core/units.hpp"
#include "pipebench/schedule/validate.hpp"

namespace pipebench {

DType storage_dtype(const Job& job) {
  return job.device.backend == BackendKind::cpu ? DType::fp32 : job.model.dtype;
}

SimCosts model_costs(const Job& job, const ModelDesc& model, const Partition& partition, int micro_batch_size) {
  SimCosts c;
  const double speed = job.device.sim_flops_per_s;
  for (const auto& st : partition.stages) {
    const Cost cost = model.stage(micro_batch_size, st.num_layers, st.has_embedding, st.has_head);
    c.forward.push_back(cost.forward_flops / speed);
    c.backward.push_back(cost.backward_flops / speed);
    c.weight.push_back(0.0);
  }
  const double bits = 8.0 * static_cast<double>(model.boundary_bytes(micro_batch_size));
  c.transfer = job.device.sim_link_latency_us * 1e-6 + bits / (job.device.sim_link_gbps * 1e9);
  return c;
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

RunPlan plan_run_unchecked(const Job& job, const RunSpec& run) {
  RunPlan plan;
  plan.run = run;
  plan.storage_dtype = storage_dtype(job);
  const ModelDesc model(job.model, plan.storage_dtype);
  const bool train = run.mode == RunMode::train;
  const int p = run.pipeline_size, m = run.num_microbatches, b = run.micro_batch_size;

  plan.partition = make_partition(model, run);
  plan.schedule = make_schedule(run.schedule, run.mode, p, m);
  validate_schedule(plan.schedule);
  plan.bubble_analytic = static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
  plan.unit = simulate(plan.schedule, SimCosts::unit(plan.schedule));
  plan.costs = model_costs(job, model, plan.partition, b);
  plan.simulated = simulate(plan.schedule, plan.costs);

  const StateBytes per_param = state_bytes_per_param(job.train.optimizer, plan.storage_dtype);
  const auto capacity = static_cast<double>(job.device.memory_capacity_bytes);
  for (std::size_t s = 0; s < plan.partition.stages.size(); ++s) {
    StagePlan sp;
    sp.stage = static_cast<int>(s);
    sp.range = plan.partition.stages[s];
    sp.cost = model.stage(b, sp.range.num_layers, sp.range.has_embedding, sp.range.has_head);
    const CheckedInt params = sp.cost.params;
    sp.params_bytes = (params * per_param.params).value();
    sp.grads_bytes = train ? (params * per_param.grads).value() : 0;
    sp.optimizer_bytes = train ? (params * per_param.optimizer).value() : 0;
    sp.activation_bytes_per_microbatch = sp.cost.activation_bytes;
    sp.peak_live_activations = plan.unit.peak_live_activations[s];
    sp.activations_peak_bytes =
        (CheckedInt(sp.activation_bytes_per_microbatch) * (train ? sp.peak_live_activations : 1)).value();
    sp.comm_bytes = model.comm_bytes(b, m, s > 0, s + 1 < plan.partition.stages.size(), train);
    sp.workspace_bytes = model.workspace_bytes(job.device.backend, b, train);
    sp.total_bytes = (CheckedInt(sp.params_bytes) + sp.grads_bytes + sp.optimizer_bytes + sp.activations_peak_bytes +
                      sp.comm_bytes + sp.workspace_bytes)
                         .value();
    sp.capacity_fraction = static_cast<double>(sp.total_bytes) / capacity;
    if (sp.capacity_fraction > kMemoryWarnFraction)
      plan.warnings.push_back(fmt::format(
          "run {} stage {}: estimated {} is {:.0f}% of memory_capacity {} (above {:.0f}%){}", run.name, s,
          format_bytes(static_cast<double>(sp.total_bytes)), 100.0 * sp.capacity_fraction,
          format_bytes(capacity), 100.0 * kMemoryWarnFraction,
          sp.capacity_fraction > 1.0 ? ": it will not fit" : ""));
    plan.stages.push_back(sp);
  }
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
