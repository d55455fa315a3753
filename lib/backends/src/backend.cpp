#include "pipebench/backends/backend.hpp"

#include <fmt/format.h>

#include "pipebench/backends/backend_cpu.hpp"
#include "pipebench/backends/backend_cuda.hpp"
#include "pipebench/backends/backend_sim.hpp"
#include "pipebench/core/error.hpp"

namespace pipebench {

StageSpec stage_spec(const RunPlan& plan, int rank, bool transport_uses_device_memory) {
  const auto r = static_cast<std::size_t>(rank);
  StageSpec spec;
  spec.rank = rank;
  spec.num_stages = plan.run.pipeline_size;
  spec.range = plan.partition.stages.at(r);
  spec.micro_batch_size = plan.run.micro_batch_size;
  spec.num_microbatches = plan.run.num_microbatches;
  spec.mode = plan.run.mode;
  spec.dtype = plan.storage_dtype;
  spec.transport_uses_device_memory = transport_uses_device_memory;
  for (const auto& a : plan.schedule.actions.at(r)) spec.split_backward |= a.kind == ActionKind::W;
  return spec;
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
