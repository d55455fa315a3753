// time_flash_attention (backend_cuda.hpp): the flash kernels alone, on
// device buffers of their own, for tools/gpu-check.sh.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "kernels.hpp"
#include "pipebench/backends/backend_cuda.hpp"
#include "pipebench/backends/cuda_check.hpp"

namespace pipebench {

namespace {
constexpr const char* kWho = "flash attention timing";

// A device buffer freed on scope exit.
struct Device {
  void* p = nullptr;
  explicit Device(std::size_t bytes) { cuda_check(cudaMalloc(&p, bytes), kWho, "cudaMalloc"); }
  ~Device() { cudaFree(p); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

FlashTiming time_flash_attention(DType dt, int B, int s, int heads, int kv_heads, int d, int reps) {
  const std::int64_t T = std::int64_t{B} * s, C = std::int64_t{heads} * d, ld = C + 2 * std::int64_t{kv_heads} * d;
  const auto e = static_cast<std::size_t>(dtype_bytes(dt));
  // Uniform random inputs in [-1, 1), converted on the host to the storage dtype.
  std::vector<float> host(static_cast<std::size_t>(T * ld));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : host) x = u(rng);
  std::vector<std::uint16_t> half(host.size());
  for (std::size_t i = 0; i < host.size(); ++i) {
    if (dt == DType::fp16) {
      const __half v = __float2half_rn(host[i]);
      std::memcpy(&half[i], &v, sizeof(v));
    } else {
      const __nv_bfloat16 v = __float2bfloat16(host[i]);
      std::memcpy(&half[i], &v, sizeof(v));
    }
  }
  Device qkv(static_cast<std::size_t>(T * ld) * e), dqkv(static_cast<std::size_t>(T * ld) * e);
  Device out(static_cast<std::size_t>(T * C) * e), dout(static_cast<std::size_t>(T * C) * e);
  Device lse(static_cast<std::size_t>(B) * heads * s * sizeof(float));
  const void* src = dt == DType::fp32 ? static_cast<const void*>(host.data()) : static_cast<const void*>(half.data());
  cuda_check(cudaMemcpy(qkv.p, src, static_cast<std::size_t>(T * ld) * e, cudaMemcpyHostToDevice), kWho, "upload");
  cuda_check(cudaMemcpy(dout.p, src, static_cast<std::size_t>(T * C) * e, cudaMemcpyHostToDevice), kWho, "upload");
  cudaEvent_t start, end;
  cuda_check(cudaEventCreate(&start), kWho, "cudaEventCreate");
  cuda_check(cudaEventCreate(&end), kWho, "cudaEventCreate");
  std::vector<double> fwd, bwd;
  for (int i = 0; i < reps + 2; ++i) {
    float ms = 0.0f;
    cudaEventRecord(start, nullptr);
    gpu::flash_attention_forward(dt, qkv.p, out.p, static_cast<float*>(lse.p), B, s, static_cast<int>(C), heads, kv_heads,
                                 nullptr);
    cudaEventRecord(end, nullptr);
    cuda_check(cudaEventSynchronize(end), kWho, "forward");
    cudaEventElapsedTime(&ms, start, end);
    if (i >= 2) fwd.push_back(ms * 1e-3);
    cudaEventRecord(start, nullptr);
    gpu::flash_attention_backward(dt, qkv.p, out.p, dout.p, static_cast<const float*>(lse.p), dqkv.p, B, s,
                                  static_cast<int>(C), heads, kv_heads, nullptr);
    cudaEventRecord(end, nullptr);
    cuda_check(cudaEventSynchronize(end), kWho, "backward");
    cudaEventElapsedTime(&ms, start, end);
    if (i >= 2) bwd.push_back(ms * 1e-3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  return {median(fwd), median(bwd)};
}

}  // namespace pipebench
