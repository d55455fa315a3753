// What the cuda backend's kernel sources share (kernels.cu,
// kernels_llama.cu): the launch shape (kThreads per block, grid-stride
// loops), fp32 conversion of the storage types, warp and block reductions
// in a fixed order, and the DType dispatch. Internal; nvcc only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "pipebench/core/job.hpp"

namespace pipebench::gpu::kernel {

constexpr int kThreads = 256;
// Column sums: a block owns kColTile columns; its kRowLanes lanes take every
// kRowLanes-th row; the lanes' partial sums are added in lane order.
constexpr int kColTile = 32;
constexpr int kRowLanes = 16;

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
template <typename T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <>
__device__ __forceinline__ __half from_f<__half>(float x) { return __float2half(x); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide reductions over kThreads threads; every thread gets the result.
template <typename V, typename Op>
__device__ __forceinline__ V block_reduce(V v, Op op, V* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // `shared` may still be read from a previous reduction
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  V r = shared[0];
  for (int w = 1; w < kThreads / 32; ++w) r = op(r, shared[w]);
  return r;
}

// One column-sum block (launched as column_blocks(C) x dim3(kColTile,
// kRowLanes)): out[c] += Σ_t term(t, t·C + c) for its column c, lane
// threadIdx.y taking rows threadIdx.y, + kRowLanes, …, the lanes' partial
// sums added in lane order — the same order every run. Every thread of the
// block must call it.
template <typename Term>
__device__ __forceinline__ void column_sum(float* out, int T_, int C, Term term) {
  __shared__ float part[kRowLanes][kColTile + 1];
  const int c = blockIdx.x * kColTile + threadIdx.x;
  float sum = 0.0f;
  if (c < C)
    for (int t = threadIdx.y; t < T_; t += kRowLanes) sum += term(t, std::int64_t{t} * C + c);
  part[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float total = 0.0f;
  for (int lane = 0; lane < kRowLanes; ++lane) total += part[lane][threadIdx.x];
  out[c] += total;
}

inline unsigned column_blocks(int C) { return static_cast<unsigned>((C + kColTile - 1) / kColTile); }

inline unsigned blocks_for(std::int64_t n, int threads = kThreads) {
  const std::int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535LL * 512 ? 65535LL * 512 : b));
}

template <typename F>
void dispatch(DType dt, F&& f) {
  switch (dt) {
    case DType::fp32: f(float{}); return;
    case DType::bf16: f(__nv_bfloat16{}); return;
    case DType::fp16: f(__half{}); return;
  }
}

template <typename T>
T* as(void* p) {
  return static_cast<T*>(p);
}
template <typename T>
const T* as(const void* p) {
  return static_cast<const T*>(p);
}

inline unsigned rows_blocks(std::int64_t rows) { return static_cast<unsigned>((rows + kThreads / 32 - 1) / (kThreads / 32)); }

}  // namespace pipebench::gpu::kernel
