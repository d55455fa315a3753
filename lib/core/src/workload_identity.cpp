#include "pipebench/core/workload_identity.hpp"
#include "pipebench/core/device_preset.hpp"

#include <cstdint>
#include <sstream>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace pipebench {

namespace {
std::string number(double v) { return fmt::format("{:.17g}", v); }
std::string number(int v) { return fmt::format("{}", v); }
}  // namespace

std::string fnv1a64(std::string_view text) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return fmt::format("{:016x}", h);
}

WorkloadKeys workload_keys(const Job& job, const RunSpec& run) {
  const ModelSpec& m = job.model;
  const TrainSpec& t = job.train;
  const DeviceSpec& d = job.device;
  WorkloadKeys k;
  k["model.kind"] = to_string(m.kind);
  k["model.hidden"] = number(m.hidden);
  k["model.layers"] = number(m.layers);
  k["model.heads"] = number(m.heads);
  k["model.ffn_hidden"] = number(m.ffn_hidden);
  k["model.seq_len"] = number(m.seq_len);
  k["model.vocab"] = number(m.vocab);
  k["model.dtype"] = to_string(m.dtype);
  k["model.seed"] = fmt::format("{}", m.seed);
  if (m.dropout > 0.0) k["model.dropout"] = number(m.dropout);  // only when set, as below
  if (m.kind == ModelKind::llama) {  // only llama's, so gpt and mlp series keep their fingerprints
    k["model.kv_heads"] = number(m.kv_heads);
    k["model.rope_theta"] = number(m.rope_theta);
    k["model.norm_eps"] = number(m.norm_eps);
    k["model.tie_embeddings"] = m.tie_embeddings ? "true" : "false";
  }
  if (m.attention == Attention::flash) k["model.attention"] = "flash";  // only when set: older series keep theirs
  k["train.optimizer"] = to_string(t.optimizer);
  k["train.learning_rate"] = number(t.learning_rate);
  k["train.grad_clip"] = number(t.grad_clip);
  k["device.backend"] = to_string(d.backend);
  k["device.memory_capacity"] = fmt::format("{}", d.memory_capacity_bytes);
  k["device.threads_per_rank"] = number(d.threads_per_rank);
  if (d.preset) k["device.preset"] = std::string(d.preset->name);  // only when set, as below
  if (!d.gemm_efficiency.empty()) {
    std::string table;
    for (const GemmEfficiencyPoint& p : d.gemm_efficiency)
      table += fmt::format("{}[{}, {}]", table.empty() ? "" : ", ", number(p.k), number(p.efficiency));
    k["device.gemm_efficiency"] = "[" + table + "]";
  }
  if (d.hbm_efficiency > 0.0) k["device.hbm_efficiency"] = number(d.hbm_efficiency);
  if (d.kernel_launch_us >= 0.0) k["device.kernel_launch_us"] = number(d.kernel_launch_us);
  if (d.gemm_accumulate_serial >= 0.0) k["device.gemm_accumulate_serial"] = number(d.gemm_accumulate_serial);
  k["device.sim_flops_per_s"] = number(d.sim_flops_per_s);
  k["device.sim_link_latency_us"] = number(d.sim_link_latency_us);
  k["device.sim_link_gbps"] = number(d.sim_link_gbps);
  // Only when set, so series recorded before these keys existed keep their fingerprint.
  if (d.ranks_per_node > 0) k["device.ranks_per_node"] = number(d.ranks_per_node);
  if (d.sim_inter_node_latency_us >= 0.0) k["device.sim_inter_node_latency_us"] = number(d.sim_inter_node_latency_us);
  if (d.sim_inter_node_gbps >= 0.0) k["device.sim_inter_node_gbps"] = number(d.sim_inter_node_gbps);
  // Only when virtual, so series recorded before the key existed keep their fingerprint.
  if (d.sim_clock != SimClock::wall) k["device.sim_clock"] = to_string(d.sim_clock);
  k["device.transport"] = to_string(d.resolved_transport());
  k["run.pipeline_size"] = number(run.pipeline_size);
  k["run.micro_batch_size"] = number(run.micro_batch_size);
  k["run.num_microbatches"] = number(run.num_microbatches);
  k["run.mode"] = to_string(run.mode);
  if (run.mode == RunMode::train) {
    k["run.schedule"] = to_string(run.schedule);
    // Only when not the default, so series recorded before these keys existed keep their fingerprint.
    if (run.virtual_stages_per_rank != 1) k["run.virtual_stages_per_rank"] = number(run.virtual_stages_per_rank);
    if (run.schedule == ScheduleKind::file) k["run.schedule_csv"] = "fnv1a64:" + fnv1a64(run.schedule_csv);
    if (run.recompute != Recompute::none) k["run.recompute"] = to_string(run.recompute);
    if (run.optimizer_sharding != OptimizerSharding::none) k["run.optimizer_sharding"] = to_string(run.optimizer_sharding);
    if (run.optimizer_sharding == OptimizerSharding::fsdp)
      k["run.fsdp_reshard_after_forward"] = reshard_after_forward(run) ? "true" : "false";
    if (run.grad_sync != GradSync::after_flush) k["run.grad_sync"] = to_string(run.grad_sync);
    // Always with the bucketed overlap: its files' series start apart from the
    // files whose "overlap" meant after_chunk (before grad_bucket_bytes existed).
    if (run.grad_sync == GradSync::overlap) k["run.grad_bucket_bytes"] = fmt::format("{}", run.grad_bucket_bytes);
  }
  // Only when not the default, as above.
  if (run.data_parallel != 1) k["run.data_parallel"] = number(run.data_parallel);
  if (run.tensor_parallel != 1) {
    k["run.tensor_parallel"] = number(run.tensor_parallel);
    if (run.sequence_parallel) k["run.sequence_parallel"] = "true";
  }
  if (run.context_parallel != 1) {
    k["run.context_parallel"] = number(run.context_parallel);
    k["run.cp_comm"] = to_string(run.cp_comm);
  }
  if (run.data_parallel != 1 || run.tensor_parallel != 1) k["run.rank_order"] = to_string(run.rank_order);
  if (!run.layers_per_stage.empty()) {
    k["run.layers_per_stage"] = fmt::format("[{}]", fmt::join(run.layers_per_stage, ", "));
  } else {
    k["run.remainder"] = to_string(run.remainder);
    if (run.remainder == Remainder::balanced) k["run.balance_by"] = to_string(run.balance_by);
  }
  return k;
}

std::string workload_text(const WorkloadKeys& keys) {
  std::string s;
  for (const auto& [key, value] : keys) s += fmt::format("{} = {}\n", key, value);
  return s;
}

WorkloadKeys parse_workload_text(const std::string& text) {
  WorkloadKeys keys;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find(" = ");
    if (eq != std::string::npos) keys[line.substr(0, eq)] = line.substr(eq + 3);
  }
  return keys;
}

std::string workload_fingerprint(const WorkloadKeys& keys) { return fnv1a64(workload_text(keys)); }

std::string describe_changes(const WorkloadKeys& before, const WorkloadKeys& after) {
  std::string out;
  auto add = [&](const std::string& key, const std::string& a, const std::string& b) {
    const std::string shown = key.starts_with("run.") ? key.substr(4) : key;
    out += fmt::format("{}{} {} → {}", out.empty() ? "" : ", ", shown, a, b);
  };
  for (const auto& [key, value] : after) {
    const auto it = before.find(key);
    if (it == before.end()) add(key, "(none)", value);
    else if (it->second != value) add(key, it->second, value);
  }
  for (const auto& [key, value] : before)
    if (!after.count(key)) add(key, value, "(none)");
  return out;
}

}  // namespace pipebench
