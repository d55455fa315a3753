// The tensor-parallel kernels of the cuda backend (kernels.hpp, "tensor
// parallelism"; docs/tensor-parallel.md): the vocabulary-parallel embedding
// and cross-entropy, and the conversion of a group's fp32 sum to the storage
// dtype. The conventions of kernels.cu — fp32 arithmetic over the storage
// type, one block per row for row reductions in a fixed order, no atomics —
// and the cpu kernels' split (cpu_kernels.cpp vocab_parallel_*) as reference.
#include <cuda_runtime.h>

#include <cmath>

#include "kernel_common.cuh"
#include "kernels.hpp"

namespace pipebench::gpu {

namespace {

using namespace kernel;

template <typename T>
__global__ void embedding_forward_partial_k(const std::int32_t* tokens, const T* wte, const T* wpe, float* out, int T_,
                                            int s, int C, int first, int rows) {
  const std::int64_t n = std::int64_t{T_} * C;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t t = i / C;
    const int c = static_cast<int>(i % C);
    const int row = tokens[t] - first;
    const bool held = row >= 0 && row < rows;
    float v = held ? to_f(wte[std::int64_t{row} * C + c]) : 0.0f;
    if (wpe) v = held ? v + to_f(wpe[(t % s) * C + c]) : to_f(wpe[(t % s) * C + c]);
    out[i] = v;
  }
}

template <typename T>
__global__ void sum_to_storage_k(const float* sum, const T* bias, const T* residual, T* y, int T_, int C) {
  const std::int64_t n = std::int64_t{T_} * C;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x) {
    float v = sum[i];
    if (residual) v += to_f(residual[i]);
    if (bias) v += to_f(bias[i % C]);
    y[i] = from_f<T>(v);
  }
}

// One block per token row.
template <typename T>
__global__ void vocab_parallel_row_max_k(const T* logits, float* row_max, int V, int valid) {
  __shared__ float shared[kThreads / 32];
  const T* row = logits + std::int64_t{blockIdx.x} * V;
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < valid; v += blockDim.x) mx = fmaxf(mx, to_f(row[v]));
  mx = block_reduce(mx, [](float a, float b) { return fmaxf(a, b); }, shared);
  if (threadIdx.x == 0) row_max[blockIdx.x] = mx;
}

template <typename T>
__global__ void vocab_parallel_sums_k(const T* logits, const float* row_max, const std::int32_t* targets, int first,
                                      float* sum_target, int V, int valid) {
  __shared__ float shared[kThreads / 32];
  const T* row = logits + std::int64_t{blockIdx.x} * V;
  const float mx = row_max[blockIdx.x];
  float sum = 0.0f;
  for (int v = threadIdx.x; v < valid; v += blockDim.x) sum += expf(to_f(row[v]) - mx);
  sum = block_reduce(sum, [](float a, float b) { return a + b; }, shared);
  if (threadIdx.x != 0) return;
  const int target = targets[blockIdx.x] - first;
  sum_target[2 * blockIdx.x] = sum;
  sum_target[2 * blockIdx.x + 1] = target >= 0 && target < valid ? to_f(row[target]) - mx : 0.0f;
}

template <typename T>
__global__ void vocab_parallel_finish_k(T* logits, const float* row_max, const float* sum_target, float* losses, int V,
                                        int valid) {
  T* row = logits + std::int64_t{blockIdx.x} * V;
  const float mx = row_max[blockIdx.x], sum = sum_target[2 * blockIdx.x];
  const float inv = 1.0f / sum;
  for (int v = threadIdx.x; v < V; v += blockDim.x) row[v] = from_f<T>(v < valid ? expf(to_f(row[v]) - mx) * inv : 0.0f);
  // Log-sum-exp, as softmax_crossentropy_forward_k: the group's sum and the
  // target's shifted logit (0 on every rank but the one holding it).
  if (threadIdx.x == 0) losses[blockIdx.x] = logf(sum) - sum_target[2 * blockIdx.x + 1];
}

}  // namespace

void embedding_forward_partial(DType dt, const std::int32_t* tokens, const void* wte, const void* wpe, float* out,
                               int T_, int s, int C, int first, int rows, cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    embedding_forward_partial_k<T><<<blocks_for(std::int64_t{T_} * C), kThreads, 0, st>>>(
        tokens, as<T>(wte), as<T>(wpe), out, T_, s, C, first, rows);
  });
  check_launch("embedding_forward_partial");
}

void sum_to_storage(DType dt, const float* sum, const void* bias, const void* residual, void* y, int T_, int C,
                    cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    sum_to_storage_k<T><<<blocks_for(std::int64_t{T_} * C), kThreads, 0, st>>>(sum, as<T>(bias), as<T>(residual),
                                                                                as<T>(y), T_, C);
  });
  check_launch("sum_to_storage");
}

void vocab_parallel_row_max(DType dt, const void* logits, float* row_max, int T_, int V, int valid, cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    vocab_parallel_row_max_k<T><<<static_cast<unsigned>(T_), kThreads, 0, st>>>(as<T>(logits), row_max, V, valid);
  });
  check_launch("vocab_parallel_row_max");
}

void vocab_parallel_sums(DType dt, const void* logits, const float* row_max, const std::int32_t* targets, int first,
                         float* sum_target, int T_, int V, int valid, cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    vocab_parallel_sums_k<T><<<static_cast<unsigned>(T_), kThreads, 0, st>>>(as<T>(logits), row_max, targets, first,
                                                                             sum_target, V, valid);
  });
  check_launch("vocab_parallel_sums");
}

void vocab_parallel_finish(DType dt, void* logits, const float* row_max, const float* sum_target, float* losses, int T_,
                           int V, int valid, cudaStream_t st) {
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    vocab_parallel_finish_k<T><<<static_cast<unsigned>(T_), kThreads, 0, st>>>(as<T>(logits), row_max, sum_target,
                                                                               losses, V, valid);
  });
  check_launch("vocab_parallel_finish");
}

}  // namespace pipebench::gpu
