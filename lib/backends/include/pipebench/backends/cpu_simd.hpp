// The cpu backend's element-wise and row kernels (GELU, softmax rows,
// LayerNorm rows, bias sums, AdamW) come in three builds: portable C++
// (`scalar`) and two vector builds with SLEEF's vectorised exp, AVX2 + FMA
// (`avx2`, 8 lanes) and AVX-512F (`avx512`, 16 lanes), built on x86-64 where
// libsleef-dev is found. One is chosen per process: the widest this build
// and CPU have, or the one PIPEBENCH_CPU_KERNELS names (scalar, avx2 or
// avx512) where it is available.
// Every rank of a run on one machine takes the same path, so a pipeline
// computes the baseline's bits; the paths differ in the last bits
// (summation order, fused multiply-add, the math libraries' rounding),
// within the cpu backend's tolerance (docs/cpu-backend.md).
#pragma once

#include <cstdint>

namespace pipebench::cpu {

enum class SimdPath { scalar, avx2, avx512 };

struct SimdKernels {
  SimdPath path;
  const char* name;
  // out = gelu(in), tanh approximation (computed as x · sigmoid(2u), cpu_kernels.cpp).
  void (*gelu_forward)(const float* in, float* out, std::int64_t n);
  // din = dout * gelu'(in); din may alias dout.
  void (*gelu_backward)(const float* in, const float* dout, float* din, std::int64_t n);
  // row[0, n) = softmax(row[0, n)) in place.
  void (*softmax_row)(float* row, int n);
  // d[j] = p[j] * (d[j] - sum_k p[k] d[k]) for j < n: one row of the softmax backward.
  void (*softmax_backward_row)(const float* p, float* d, int n);
  // row[j] = exp(row[j] - shift) for j < n; returns their sum (flash
  // attention's tiles: a row's unnormalised probabilities).
  float (*exp_shifted_row)(float* row, int n, float shift);
  // One LayerNorm row: out = (x - mean) * rstd * gamma + beta; gives mean and rstd.
  void (*layernorm_row)(const float* x, const float* gamma, const float* beta, float* out, int C, float& mean,
                        float& rstd);
  // One LayerNorm row's input gradient, accumulated: dx += ...
  void (*layernorm_backward_input_row)(const float* d, const float* x, const float* gamma, float mean, float rstd,
                                       float* dx, int C);
  // dgamma += (x - mean) * rstd * d, dbeta += d over one row.
  void (*layernorm_backward_weight_row)(const float* d, const float* x, float mean, float rstd, float* dgamma,
                                        float* dbeta, int C);
  // y[T, n] += b[n] on every row.
  void (*add_bias_rows)(float* y, const float* b, int T, int n);
  // Both in one pass: pre[T, n] += b[n], then out = gelu(pre) (the bits of
  // add_bias_rows followed by gelu_forward).
  void (*bias_gelu_rows)(float* pre, const float* b, float* out, int T, int n);
  // db[n] += sum_t dy[t, n].
  void (*sum_rows)(const float* dy, float* db, int T, int n);
  // AdamW over n parameters; c1, c2 are the bias corrections 1 - beta^t.
  void (*adamw)(float* p, const float* g, float* m, float* v, std::int64_t n, float lr, float beta1, float beta2,
                float eps, float wd, float c1, float c2, float grad_scale);
};

// The kernels of `path`, or nullptr where this build or this CPU has none.
const SimdKernels* simd_kernels(SimdPath path);
// This process's kernels, decided on first use: the ones PIPEBENCH_CPU_KERNELS
// names if set and available, else the widest available (avx512, avx2,
// scalar).
const SimdKernels& simd_kernels();

}  // namespace pipebench::cpu
