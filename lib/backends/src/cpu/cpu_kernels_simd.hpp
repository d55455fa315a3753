// The two builds of the kernels of SimdKernels (pipebench/backends/cpu_simd.hpp): `scalar`
// (plain C++, any x86-64 or other CPU) and `avx2` (AVX2 + FMA intrinsics,
// exp and tanh from SLEEF, 1-ULP accurate: cpu_kernels_avx2.cpp, compiled
// with -mavx2 -mfma). cpu_kernels.cpp picks one per process (simd_path()):
// avx2 where the CPU has it, unless PIPEBENCH_CPU_KERNELS=scalar. Every rank
// of a run on one machine takes the same path, so a pipeline still computes
// the baseline's bits; the two paths differ in the last bits (summation
// order, fused multiply-add, the libraries' rounding), within the cpu
// backend's documented tolerance (docs/cpu-backend.md).
#pragma once

#include <cstdint>

#include "pipebench/backends/cpu_simd.hpp"

namespace pipebench::cpu {

#define PIPEBENCH_CPU_SIMD_KERNELS                                                                                     \
  /* out = gelu(in) (tanh approximation) */                                                                         \
  void gelu_forward(const float* in, float* out, std::int64_t n);                                                      \
  /* din = dout * gelu'(in); din may alias dout */                                                                    \
  void gelu_backward(const float* in, const float* dout, float* din, std::int64_t n);                                  \
  /* row[0, n) = softmax(row[0, n)) in place */                                                                        \
  void softmax_row(float* row, int n);                                                                                 \
  /* d[j] = p[j] * (d[j] - sum_k p[k] d[k]) for j < n: the softmax backward of one row */                               \
  void softmax_backward_row(const float* p, float* d, int n);                                                          \
  /* one LayerNorm row: out = (x - mean) * rstd * gamma + beta; returns mean and rstd */                               \
  void layernorm_row(const float* x, const float* gamma, const float* beta, float* out, int C, float& mean, float& rstd); \
  /* one LayerNorm row's input gradient, accumulated: dx += ... */                                                     \
  void layernorm_backward_input_row(const float* d, const float* x, const float* gamma, float mean, float rstd,         \
                                    float* dx, int C);                                                                 \
  /* y[T, n] += b[n] on every row */                                                                                   \
  void add_bias_rows(float* y, const float* b, int T, int n);                                                          \
  void bias_gelu_rows(float* pre, const float* b, float* out, int T, int n);                                           \
  /* db[n] += sum_t dy[t, n] */                                                                                        \
  void sum_rows(const float* dy, float* db, int T, int n);                                                             \
  /* dgamma += (x - mean) * rstd * d, dbeta += d over one row */                                                       \
  void layernorm_backward_weight_row(const float* d, const float* x, float mean, float rstd, float* dgamma,            \
                                     float* dbeta, int C);                                                             \
  /* AdamW over n parameters (c1, c2: the bias corrections 1 - beta^t) */                                               \
  void adamw(float* p, const float* g, float* m, float* v, std::int64_t n, float lr, float beta1, float beta2, float eps, \
             float wd, float c1, float c2, float grad_scale);

namespace scalar {
PIPEBENCH_CPU_SIMD_KERNELS
}  // namespace scalar
namespace avx2 {
PIPEBENCH_CPU_SIMD_KERNELS
}  // namespace avx2

}  // namespace pipebench::cpu
