// The one way CUDA code turns a CUDA runtime error into an Error:
// "<who>: <what>: <description> (<cudaError name>)". For sources built only
// with the CUDA toolkit (backends/src/cuda, runtime's NCCL transport): it
// includes the CUDA runtime headers. No fmt here: kernels.cu (nvcc, C++17)
// includes it too.
#pragma once

#include <string>

#include <cuda_runtime_api.h>

#include "pipebench/core/error.hpp"

namespace pipebench {

inline void cuda_check(cudaError_t rc, const char* who, const char* what) {
  if (rc == cudaSuccess) return;
  throw Error(std::string(who) + ": " + what + ": " + cudaGetErrorString(rc) + " (" + cudaGetErrorName(rc) + ")");
}

}  // namespace pipebench
