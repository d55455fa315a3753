// Declarations of the three builds of the kernels of SimdKernels
// (pipebench/backends/cpu_simd.hpp, which documents each): `scalar`, plain
// C++ in cpu_kernels.cpp, and the vector builds of cpu_kernels_vector.hpp
// with SLEEF's exp, `avx2` (cpu_kernels_avx2.cpp, compiled with -mavx2
// -mfma) and `avx512` (cpu_kernels_avx512.cpp, -mavx512f -mfma). The tables
// in cpu_kernels.cpp hold their addresses: a signature that differs from the
// struct's does not compile.
#pragma once

#include <cstdint>

#include "pipebench/backends/cpu_simd.hpp"

namespace pipebench::cpu {

#define PIPEBENCH_CPU_SIMD_KERNELS                                                                                      \
  void gelu_forward(const float* in, float* out, std::int64_t n);                                                      \
  void gelu_backward(const float* in, const float* dout, float* din, std::int64_t n);                                  \
  void softmax_row(float* row, int n);                                                                                 \
  void softmax_backward_row(const float* p, float* d, int n);                                                          \
  float exp_shifted_row(float* row, int n, float shift);                                                               \
  void layernorm_row(const float* x, const float* gamma, const float* beta, float* out, int C, float& mean, float& rstd); \
  void layernorm_backward_input_row(const float* d, const float* x, const float* gamma, float mean, float rstd,         \
                                    float* dx, int C);                                                                 \
  void layernorm_backward_weight_row(const float* d, const float* x, float mean, float rstd, float* dgamma,            \
                                     float* dbeta, int C);                                                             \
  void add_bias_rows(float* y, const float* b, int T, int n);                                                          \
  void bias_gelu_rows(float* pre, const float* b, float* out, int T, int n);                                           \
  void sum_rows(const float* dy, float* db, int T, int n);                                                             \
  void adamw(float* p, const float* g, float* m, float* v, std::int64_t n, float lr, float beta1, float beta2, float eps, \
             float wd, float c1, float c2, float grad_scale);

namespace scalar {
PIPEBENCH_CPU_SIMD_KERNELS
}  // namespace scalar
namespace avx2 {
PIPEBENCH_CPU_SIMD_KERNELS
}  // namespace avx2
namespace avx512 {
PIPEBENCH_CPU_SIMD_KERNELS
}  // namespace avx512

}  // namespace pipebench::cpu
