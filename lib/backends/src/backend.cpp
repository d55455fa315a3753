#include "pipebench/backends/backend.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "pipebench/backends/backend_cpu.hpp"
#include "pipebench/backends/backend_cuda.hpp"
#include "pipebench/backends/backend_sim.hpp"
#include "pipebench/core/error.hpp"

namespace pipebench {

StageSpec stage_spec(const RunPlan& plan, int rank, int replica, bool transport_uses_device_memory, int tensor_rank,
                     int context_rank) {
  StageSpec spec;
  spec.rank = rank;
  spec.num_stages = plan.run.pipeline_size;
  const Schedule& sched = plan.schedule;
  spec.num_virtual_stages = sched.num_virtual_stages();
  for (int c = 0; c < sched.chunks_per_rank; ++c) {
    const int v = sched.virtual_stage(rank, c);
    spec.chunk_stage.push_back(v);
    spec.chunks.push_back(plan.partition.stages.at(static_cast<std::size_t>(v)));
  }
  spec.micro_batch_size = plan.run.micro_batch_size;
  spec.num_microbatches = plan.run.num_microbatches;
  spec.replica = replica;
  spec.replicas = plan.run.data_parallel;
  spec.context_rank = context_rank;
  spec.context = plan.run.context_parallel;
  spec.shard_optimizer = shards_optimizer(plan.run);
  spec.sharding = spec.shard_optimizer ? plan.run.optimizer_sharding : OptimizerSharding::none;
  spec.reshard_after_forward = reshard_after_forward(plan.run);
  spec.tensor = tensor_split(plan.run);
  spec.tensor_rank = tensor_rank;
  spec.mode = plan.run.mode;
  spec.dtype = plan.storage_dtype;
  spec.transport_uses_device_memory = transport_uses_device_memory;
  spec.split_backward = sched.split_backward();
  spec.recompute = plan.run.mode == RunMode::train && plan.run.recompute == Recompute::full;
  spec.send_slots = send_slots(sched, rank);
  return spec;
}

void Backend::hand_over(ActionKind kind, int microbatch, int from_chunk, int to_chunk) {
  const Buffer into = recv_buffer(kind, microbatch, to_chunk), from = send_buffer(kind, microbatch, from_chunk);
  if (into.data && from.data) std::memcpy(into.data, from.data, std::min(into.bytes, from.bytes));
}

FlatRegion Backend::gradients(int /*chunk*/) {
  throw ConfigError(fmt::format("the {} backend does not synchronise gradients across data-parallel replicas", name()));
}

void Backend::set_forward_hook(int /*chunk*/, std::function<void(int)> before) {
  if (before) throw ConfigError(fmt::format("the {} backend does not gather sharded parameters inside its forward", name()));
}

void Backend::set_forward_gates(int /*chunk*/, std::vector<Gate> gates) {
  if (!gates.empty()) throw ConfigError(fmt::format("the {} backend does not model parameter gathers", name()));
}

const std::vector<double>& Backend::gate_waits() const {
  static const std::vector<double> none;
  return none;
}

FlatRegion Backend::parameters(int /*chunk*/) {
  throw ConfigError(fmt::format("the {} backend does not shard its optimizer across data-parallel replicas", name()));
}

std::unique_ptr<Backend> make_backend(const Job& job, int rank) {
  switch (job.device.backend) {
    case BackendKind::sim: return std::make_unique<SimBackend>(job, rank);
    case BackendKind::cpu: return std::make_unique<CpuBackend>(job, rank);
    case BackendKind::cuda: return make_cuda_backend(job, rank);
  }
  throw ConfigError("unknown backend");
}

}  // namespace pipebench
