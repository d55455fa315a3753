// The GPUs this process can see, without CUDA headers: every caller compiles
// whether or not the build has CUDA. In a build without it
// (PIPEBENCH_CUDA=OFF or no toolkit) cuda_built() is false and the queries
// throw DeviceUnavailableError saying so.
#pragma once

#include <cstdint>
#include <string>

#include "pipebench/core/error.hpp"

namespace pipebench {

struct GpuInfo {
  int ordinal = -1;             // CUDA ordinal within this process's CUDA_VISIBLE_DEVICES
  std::string name;             // "NVIDIA H200"
  std::string uuid;             // "GPU-8c1f..." (as nvidia-smi -L prints it)
  std::string pci_bus_id;       // "0000:19:00.0"
  std::uint64_t total_bytes = 0;
  int cc_major = 0, cc_minor = 0;
};

// Whether this build has the cuda backend and the NCCL transport.
bool cuda_built();

// The number of visible devices (>= 1), or DeviceUnavailableError with the
// reason (no device, no/old driver, built without CUDA).
int cuda_device_count();
GpuInfo cuda_device_info(int ordinal);
// Makes `ordinal` this process's device (cudaSetDevice).
void cuda_set_device(int ordinal);
// Loads the libraries the backend opens on demand (cuBLAS, with dlopen), or
// DeviceUnavailableError naming the library and why it did not load.
void cuda_load_libraries();

// "" while this process's CUDA context is usable; otherwise the sticky error
// that broke it ("cudaErrorIllegalAddress (an illegal memory access was
// encountered)"): after an illegal address or a failed launch CUDA returns
// the same error from every later call for the life of the process. A
// pending non-sticky error is cleared. Call it only where this process has
// used the device (it synchronises the device, creating a context if none
// exists); "" in a build without CUDA.
std::string cuda_context_error();
// Test hook (tests/gpu/sticky_error.cpp): a kernel writes through a null
// pointer, which leaves this process's context broken for good.
void cuda_break_context_for_test();

// Versions for /provenance ("" without CUDA): driver "13.0", runtime "13.0".
// NCCL's is runtime/transport_nccl.hpp's nccl_version().
std::string cuda_driver_version();
std::string cuda_runtime_version();

}  // namespace pipebench
