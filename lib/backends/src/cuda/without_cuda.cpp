// A build without CUDA (PIPEBENCH_CUDA=OFF, or no nvcc/toolkit/NCCL at
// configure time): the cuda entry points exist and say so.
#include "pipebench/backends/backend_cuda.hpp"
#include "pipebench/backends/cuda_device.hpp"

namespace pipebench {

namespace {
[[noreturn]] void not_built() {
  throw DeviceUnavailableError(
      "this pipebench was built without CUDA (PIPEBENCH_CUDA=OFF, or nvcc/cuBLAS/NCCL were not found at configure "
      "time): rebuild with the CUDA toolkit, or use --backend cpu or sim");
}
}  // namespace

bool cuda_built() { return false; }
int cuda_device_count() { not_built(); }
GpuInfo cuda_device_info(int) { not_built(); }
void cuda_set_device(int) { not_built(); }
void cuda_load_libraries() { not_built(); }
std::string cuda_context_error() { return ""; }
void cuda_break_context_for_test() { not_built(); }
std::string cuda_driver_version() { return ""; }
std::string cuda_runtime_version() { return ""; }
std::unique_ptr<Backend> make_cuda_backend(const Job&, int) { not_built(); }
FlashTiming time_flash_attention(DType, int, int, int, int, int, int) { not_built(); }

}  // namespace pipebench
