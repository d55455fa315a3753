// The llama block's own kernels (kernels.hpp, "the llama block"): RMSNorm,
// rotary positions and SwiGLU, in the conventions of kernels.cu — fp32
// arithmetic over the storage type, one warp per row for row reductions,
// column sums in kColTile x kRowLanes blocks added in lane order, no atomics,
// so a run repeats bit for bit. cpu_kernels.cpp holds the fp32 reference of
// each (rmsnorm_*, rope_apply, swiglu_*).
#include <cuda_runtime.h>

#include "kernel_common.cuh"
#include "kernels.hpp"

namespace pipebench::gpu {

namespace {

using namespace kernel;

// One warp per row.
template <typename T>
__global__ void rmsnorm_forward_k(const T* x, const T* gamma, T* out, float* rrms, int T_, int C, float eps) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= T_) return;
  const T* xr = x + std::int64_t{row} * C;
  float ss = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float v = to_f(xr[c]);
    ss += v * v;
  }
  const float r = rsqrtf(warp_sum(ss) / static_cast<float>(C) + eps);
  T* o = out + std::int64_t{row} * C;
  for (int c = lane; c < C; c += 32) o[c] = from_f<T>(to_f(xr[c]) * r * to_f(gamma[c]));
  if (lane == 0) rrms[row] = r;
}

// dx += r·(g⊙dy) − x·r³·mean(g⊙dy⊙x), one warp per row.
template <typename T>
__global__ void rmsnorm_backward_dx_k(const T* dout, const T* x, const T* gamma, const float* rrms, T* dx, int T_, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= T_) return;
  const std::int64_t off = std::int64_t{row} * C;
  float dot = 0.0f;
  for (int c = lane; c < C; c += 32) dot += to_f(gamma[c]) * to_f(dout[off + c]) * to_f(x[off + c]);
  const float r = rrms[row];
  const float k = warp_sum(dot) / static_cast<float>(C) * r * r * r;
  for (int c = lane; c < C; c += 32)
    dx[off + c] = from_f<T>(to_f(dx[off + c]) + r * to_f(gamma[c]) * to_f(dout[off + c]) - to_f(x[off + c]) * k);
}

// dgamma: column sums of dout·x·r.
template <typename T>
__global__ void rmsnorm_backward_gamma_k(const T* dout, const T* x, const float* rrms, float* dgamma, int T_, int C) {
  column_sum(dgamma, T_, C, [&](int t, std::int64_t i) { return to_f(dout[i]) * to_f(x[i]) * rrms[t]; });
}

// One thread per (row, head, pair).
template <typename T>
__global__ void rope_apply_k(T* x, const float* table, int T_, int s, int heads, int d, int ld, float sign) {
  const int half = d / 2;
  const std::int64_t n = std::int64_t{T_} * heads * half;
  for (std::int64_t k = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; k < n; k += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t t = k / (std::int64_t{heads} * half);
    const int rest = static_cast<int>(k % (std::int64_t{heads} * half));
    const int head = rest / half, i = rest % half;
    const std::int64_t pos = t % s;
    const float c = table[pos * half + i], sn = sign * table[std::int64_t{s} * half + pos * half + i];
    T* v = x + t * ld + std::int64_t{head} * d + 2 * i;
    const float a = to_f(v[0]), b = to_f(v[1]);
    v[0] = from_f<T>(a * c - b * sn);
    v[1] = from_f<T>(a * sn + b * c);
  }
}

template <typename T>
__global__ void swiglu_forward_k(const T* pre, T* u, int T_, int f) {
  const std::int64_t n = std::int64_t{T_} * f;
  for (std::int64_t k = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; k < n; k += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t t = k / f, j = k % f;
    const float g = to_f(pre[t * 2 * f + j]), sig = 1.0f / (1.0f + expf(-g));
    u[k] = from_f<T>(g * sig * to_f(pre[t * 2 * f + f + j]));
  }
}

template <typename T>
__global__ void swiglu_backward_k(const T* pre, const T* du, T* dpre, int T_, int f) {
  const std::int64_t n = std::int64_t{T_} * f;
  for (std::int64_t k = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; k < n; k += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t t = k / f, j = k % f;
    const float g = to_f(pre[t * 2 * f + j]), up = to_f(pre[t * 2 * f + f + j]), d = to_f(du[k]);
    const float sig = 1.0f / (1.0f + expf(-g));
    dpre[t * 2 * f + j] = from_f<T>(d * up * sig * (1.0f + g * (1.0f - sig)));  // d silu(g)/dg = σ(1 + g(1 − σ))
    dpre[t * 2 * f + f + j] = from_f<T>(d * g * sig);
  }
}

}  // namespace

void rmsnorm_forward(DType dt, const void* x, const void* gamma, void* out, float* rrms, int T_, int C, float eps,
                     cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    rmsnorm_forward_k<T><<<rows_blocks(T_), kThreads, 0, st>>>(as<T>(x), as<T>(gamma), as<T>(out), rrms, T_, C, eps);
  });
  check_launch("rmsnorm_forward");
}

void rmsnorm_backward_input(DType dt, const void* dout, const void* x, const void* gamma, const float* rrms, void* dx,
                            int T_, int C, cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    rmsnorm_backward_dx_k<T><<<rows_blocks(T_), kThreads, 0, st>>>(as<T>(dout), as<T>(x), as<T>(gamma), rrms, as<T>(dx),
                                                                     T_, C);
  });
  check_launch("rmsnorm_backward_input");
}

void rmsnorm_backward_weight(DType dt, const void* dout, const void* x, const float* rrms, float* dgamma, int T_, int C,
                             cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    rmsnorm_backward_gamma_k<T><<<column_blocks(C), dim3(kColTile, kRowLanes), 0, st>>>(as<T>(dout), as<T>(x), rrms,
                                                                                         dgamma, T_, C);
  });
  check_launch("rmsnorm_backward_weight");
}

void rope_apply(DType dt, void* x, const float* table, int T_, int s, int heads, int d, int ld, bool inverse,
                cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    rope_apply_k<T><<<blocks_for(std::int64_t{T_} * heads * (d / 2)), kThreads, 0, st>>>(as<T>(x), table, T_, s, heads, d,
                                                                                         ld, inverse ? -1.0f : 1.0f);
  });
  check_launch("rope_apply");
}

void swiglu_forward(DType dt, const void* pre, void* u, int T_, int f, cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    swiglu_forward_k<T><<<blocks_for(std::int64_t{T_} * f), kThreads, 0, st>>>(as<T>(pre), as<T>(u), T_, f);
  });
  check_launch("swiglu_forward");
}

void swiglu_backward(DType dt, const void* pre, const void* du, void* dpre, int T_, int f, cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    swiglu_backward_k<T><<<blocks_for(std::int64_t{T_} * f), kThreads, 0, st>>>(as<T>(pre), as<T>(du), as<T>(dpre), T_, f);
  });
  check_launch("swiglu_backward");
}

}  // namespace pipebench::gpu
