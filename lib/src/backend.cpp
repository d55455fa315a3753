#include "pipebench/backend.hpp"

#include <fmt/format.h>

#include "pipebench/backend_cpu.hpp"
#include "pipebench/backend_cuda.hpp"
#include "pipebench/backend_sim.hpp"
#include "pipebench/error.hpp"

namespace pipebench {

std::unique_ptr<Backend> make_backend(const Job& job, int rank) {
  switch (job.device.backend) {
    case BackendKind::sim: return std::make_unique<SimBackend>(job, rank);
    case BackendKind::cpu: return std::make_unique<CpuBackend>(job, rank);
    case BackendKind::cuda: return make_cuda_backend(job, rank);
  }
  throw ConfigError("unknown backend");
}

}  // namespace pipebench
