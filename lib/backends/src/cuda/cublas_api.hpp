// cuBLAS, opened with dlopen when the cuda backend is first built, not
// linked. A program linked with libcublas runs its (and libcublasLt's)
// static initialisers at every start: measured here, 0.45 s and ~150 MB of
// resident memory for `pipebench --version`, paid by every `plan`, `report`,
// `trace` and probe trial whether or not it ever touches a GPU.
#pragma once

#include <cublas_v2.h>

namespace pipebench::gpu {

// The cuBLAS entry points the backend calls (their _v2 symbols where
// cublas_v2.h maps a name to one).
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  // The C signatures (C++ sees overloads of these two).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                            const void*, const void*, cudaDataType, int, long long, const void*,
                                            cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                            long long, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// libcublas.so.<the major version built against>, loaded on the first call
// (thread-safe); DeviceUnavailableError naming the library and dlerror()'s
// reason when it cannot be loaded or lacks a symbol.
const CublasApi& cublas();

}  // namespace pipebench::gpu
