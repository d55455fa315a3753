// cuda_malloc_or_oom (device_memory.hpp).
#include "device_memory.hpp"

#include "pipebench/core/error.hpp"
#include "pipebench/core/units.hpp"

namespace pipebench::gpu {

void* cuda_malloc_or_oom(MemoryTracker& tracker, MemCategory cat, std::uint64_t bytes, std::string_view what) {
  void* ptr = nullptr;
  const cudaError_t rc = cudaMalloc(&ptr, bytes);
  if (rc == cudaSuccess) return ptr;
  tracker.release(cat, bytes);
  (void)cudaGetLastError();
  std::size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  throw OutOfMemoryError(fmt::format(
      "out of memory: cudaMalloc of {} ({} bytes) for {} [{}] failed: {} ({}); the device has {} free of {}; the "
      "tracker had {} in use",
      format_bytes(static_cast<double>(bytes)), bytes, what, to_string(cat), cudaGetErrorString(rc), cudaGetErrorName(rc),
      format_bytes(static_cast<double>(free_b)), format_bytes(static_cast<double>(total_b)),
      format_bytes(static_cast<double>(tracker.current_total()))));
}

}  // namespace pipebench::gpu
