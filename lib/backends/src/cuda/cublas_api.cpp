#include "cublas_api.hpp"

#include "pipebench/backends/cuda_device.hpp"

#include <dlfcn.h>

#include <string>

#include <fmt/format.h>

#include "pipebench/core/error.hpp"

namespace pipebench::gpu {

namespace {

CublasApi load() {
  const std::string name = fmt::format("libcublas.so.{}", CUBLAS_VER_MAJOR);
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    throw DeviceUnavailableError(fmt::format("cuda backend: cannot load {} ({}): is the CUDA toolkit's lib64 folder on "
                                             "the library path (LD_LIBRARY_PATH, ldconfig)?",
                                             name, dlerror()));
  CublasApi api;
  auto sym = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
    if (!fn) throw DeviceUnavailableError(fmt::format("cuda backend: {} has no {} ({})", name, symbol, dlerror()));
  };
  sym(api.create, "cublasCreate_v2");
  sym(api.destroy, "cublasDestroy_v2");
  sym(api.set_stream, "cublasSetStream_v2");
  sym(api.set_math_mode, "cublasSetMathMode");
  sym(api.gemm_ex, "cublasGemmEx");
  sym(api.gemm_strided_batched_ex, "cublasGemmStridedBatchedEx");
  sym(api.status_name, "cublasGetStatusName");
  sym(api.status_string, "cublasGetStatusString");
  return api;  // the library stays loaded for the life of the process
}

}  // namespace

const CublasApi& cublas() {
  static const CublasApi api = load();
  return api;
}

}  // namespace pipebench::gpu

namespace pipebench {

void cuda_load_libraries() { gpu::cublas(); }

}  // namespace pipebench
