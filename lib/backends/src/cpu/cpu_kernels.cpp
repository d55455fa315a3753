#include "pipebench/backends/cpu_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <cblas.h>

#include "cpu_kernels_simd.hpp"

extern "C" {
void openblas_set_num_threads(int num_threads);
char* openblas_get_config(void);
char* openblas_get_corename(void);
}

namespace pipebench::cpu {

void set_blas_threads(int threads) { openblas_set_num_threads(threads); }
const char* blas_config() { return openblas_get_config(); }

const char* better_blas_core() {
  if (const std::string_view core = openblas_get_corename(); core != "Prescott" && core != "prescott") return "";
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return "";
}

// The portable builds of the kernels of cpu_kernels_simd.hpp.
namespace scalar {

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluFlat = 20.0f;
}

// GELU's tanh approximation written as a sigmoid: 0.5 (1 + tanh(u)) =
// 1 / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3). The same function,
// one exp instead of a tanh (SLEEF's vector tanh cost four of its exps per
// element) and no 1 + tanh cancellation for negative x. The backward's
// sigmoid' = e / (1 + e)^2 takes e below exp(88), which stays finite, and x
// within ±kGeluFlat, where gelu' is 1 or 0 in float and x^3 cannot overflow.
void gelu_forward(const float* in, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = in[i];
    out[i] = x / (1.0f + std::exp(-2.0f * kGeluScale * (x + 0.044715f * x * x * x)));
  }
}

void gelu_backward(const float* in, const float* dout, float* din, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = std::clamp(in[i], -kGeluFlat, kGeluFlat);  // NaN stays NaN
    const float e = std::exp(std::min(-2.0f * kGeluScale * (x + 0.044715f * x * x * x), 88.0f));
    const float sig = 1.0f / (1.0f + e);
    const float du = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    din[i] = dout[i] * (sig * (1.0f + 2.0f * x * (e * sig) * du));
  }
}

void softmax_row(float* row, int n) {
  float mx = row[0];
  for (int j = 1; j < n; ++j) mx = std::max(mx, row[j]);
  float sum = 0.0f;
  for (int j = 0; j < n; ++j) {
    row[j] = std::exp(row[j] - mx);
    sum += row[j];
  }
  const float inv = 1.0f / sum;
  for (int j = 0; j < n; ++j) row[j] *= inv;
}

void softmax_backward_row(const float* p, float* d, int n) {
  float dot = 0.0f;
  for (int j = 0; j < n; ++j) dot += p[j] * d[j];
  for (int j = 0; j < n; ++j) d[j] = p[j] * (d[j] - dot);
}

float exp_shifted_row(float* row, int n, float shift) {
  float sum = 0.0f;
  for (int j = 0; j < n; ++j) {
    row[j] = std::exp(row[j] - shift);
    sum += row[j];
  }
  return sum;
}

void layernorm_row(const float* x, const float* gamma, const float* beta, float* out, int C, float& mean, float& rstd) {
  constexpr float eps = 1e-5f;
  float m = 0.0f;
  for (int c = 0; c < C; ++c) m += x[c];
  m /= static_cast<float>(C);
  float var = 0.0f;
  for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
  var /= static_cast<float>(C);
  const float r = 1.0f / std::sqrt(var + eps);
  for (int c = 0; c < C; ++c) out[c] = (x[c] - m) * r * gamma[c] + beta[c];
  mean = m;
  rstd = r;
}

void layernorm_backward_input_row(const float* d, const float* x, const float* gamma, float mean, float rstd, float* dx,
                                  int C) {
  float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
  for (int c = 0; c < C; ++c) {
    const float norm = (x[c] - mean) * rstd;
    const float dnorm = gamma[c] * d[c];
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * norm;
  }
  dnorm_mean /= static_cast<float>(C);
  dnorm_norm_mean /= static_cast<float>(C);
  for (int c = 0; c < C; ++c) {
    const float norm = (x[c] - mean) * rstd;
    dx[c] += (gamma[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * rstd;
  }
}

void add_bias_rows(float* y, const float* b, int T, int n) {
  for (int t = 0; t < T; ++t) {
    float* row = y + static_cast<std::int64_t>(t) * n;
    for (int o = 0; o < n; ++o) row[o] += b[o];
  }
}

void bias_gelu_rows(float* pre, const float* b, float* out, int T, int n) {
  for (int t = 0; t < T; ++t) {
    const std::int64_t o = static_cast<std::int64_t>(t) * n;
    add_bias_rows(pre + o, b, 1, n);
    gelu_forward(pre + o, out + o, n);
  }
}

void sum_rows(const float* dy, float* db, int T, int n) {
  for (int t = 0; t < T; ++t) {
    const float* row = dy + static_cast<std::int64_t>(t) * n;
    for (int o = 0; o < n; ++o) db[o] += row[o];
  }
}

void layernorm_backward_weight_row(const float* d, const float* x, float mean, float rstd, float* dgamma, float* dbeta,
                                   int C) {
  for (int c = 0; c < C; ++c) {
    dbeta[c] += d[c];
    dgamma[c] += (x[c] - mean) * rstd * d[c];
  }
}

void adamw(float* p, const float* g, float* m, float* v, std::int64_t n, float lr, float beta1, float beta2, float eps,
           float wd, float c1, float c2, float grad_scale) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * grad_scale;
    m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
    v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    const float mhat = m[i] / c1, vhat = v[i] / c2;
    p[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * p[i]);
  }
}

}  // namespace scalar

namespace {
#define PIPEBENCH_SIMD_TABLE(ns)                                                                                       \
  SimdKernels {                                                                                                        \
    SimdPath::ns, #ns, ns::gelu_forward, ns::gelu_backward, ns::softmax_row, ns::softmax_backward_row,                  \
        ns::exp_shifted_row, ns::layernorm_row, ns::layernorm_backward_input_row, ns::layernorm_backward_weight_row, ns::add_bias_rows,      \
        ns::bias_gelu_rows, ns::sum_rows, ns::adamw                                                                    \
  }
constexpr SimdKernels kScalar = PIPEBENCH_SIMD_TABLE(scalar);
#if PIPEBENCH_HAVE_AVX2_KERNELS
constexpr SimdKernels kAvx2 = PIPEBENCH_SIMD_TABLE(avx2);
#endif
#if PIPEBENCH_HAVE_AVX512_KERNELS
constexpr SimdKernels kAvx512 = PIPEBENCH_SIMD_TABLE(avx512);
#endif
#undef PIPEBENCH_SIMD_TABLE
}  // namespace

const SimdKernels* simd_kernels(SimdPath path) {
  __builtin_cpu_init();
  switch (path) {
    case SimdPath::scalar:
      return &kScalar;
    case SimdPath::avx2:
#if PIPEBENCH_HAVE_AVX2_KERNELS
      if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &kAvx2;
#endif
      return nullptr;
    case SimdPath::avx512:
      // __builtin_cpu_supports also checks that the OS saves the 512-bit registers.
#if PIPEBENCH_HAVE_AVX512_KERNELS
      if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")) return &kAvx512;
#endif
      return nullptr;
  }
  return nullptr;
}

const SimdKernels& simd_kernels() {
  static const SimdKernels& chosen = []() -> const SimdKernels& {
    const SimdKernels* widest = nullptr;
    for (SimdPath p : {SimdPath::avx512, SimdPath::avx2, SimdPath::scalar})
      if ((widest = simd_kernels(p))) break;
    const char* env = std::getenv("PIPEBENCH_CPU_KERNELS");
    if (!env || !*env) return *widest;
    for (SimdPath p : {SimdPath::scalar, SimdPath::avx2, SimdPath::avx512})
      if (const SimdKernels* k = simd_kernels(p); k && std::string_view(env) == k->name) return *k;
    std::fprintf(stderr,
                 "pipebench: PIPEBENCH_CPU_KERNELS=%s is not a kernel build this program and CPU have (scalar, avx2, "
                 "avx512); using %s\n",
                 env, widest->name);
    return *widest;
  }();
  return chosen;
}

void linear_forward(const float* x, const float* W, const float* b, float* y, int T, int in, int out, bool accumulate) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, out, in, 1.0f, x, in, W, out, accumulate ? 1.0f : 0.0f, y,
              out);
  if (b) simd_kernels().add_bias_rows(y, b, T, out);
}

void linear_gelu_forward(const float* x, const float* W, const float* b, float* pre, float* out, int T, int in,
                         int n) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, n, in, 1.0f, x, in, W, n, 0.0f, pre, n);
  simd_kernels().bias_gelu_rows(pre, b, out, T, n);
}

void linear_backward_weight(const float* x, const float* dy, float* dW, float* db, int T, int in, int out) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, out, T, 1.0f, x, in, dy, out, 1.0f, dW, out);
  if (db) simd_kernels().sum_rows(dy, db, T, out);
}

void linear_backward_input(const float* W, const float* dy, float* dx, int T, int in, int out, bool accumulate_dx) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, in, out, 1.0f, dy, out, W, out, accumulate_dx ? 1.0f : 0.0f,
              dx, in);
}

void linear_backward(const float* x, const float* W, const float* dy, float* dx, float* dW, float* db, int T, int in,
                     int out, bool accumulate_dx) {
  linear_backward_weight(x, dy, dW, db, T, in, out);
  if (dx) linear_backward_input(W, dy, dx, T, in, out, accumulate_dx);
}

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* out, float* mean, float* rstd,
                       int T, int C) {
  const SimdKernels& k = simd_kernels();
  for (int t = 0; t < T; ++t) {
    const std::int64_t o = static_cast<std::int64_t>(t) * C;
    k.layernorm_row(x + o, gamma, beta, out + o, C, mean[t], rstd[t]);
  }
}

void layernorm_backward_weight(const float* dout, const float* x, const float* mean, const float* rstd, float* dgamma,
                               float* dbeta, int T, int C) {
  const SimdKernels& k = simd_kernels();
  for (int t = 0; t < T; ++t) {
    const std::int64_t o = static_cast<std::int64_t>(t) * C;
    k.layernorm_backward_weight_row(dout + o, x + o, mean[t], rstd[t], dgamma, dbeta, C);
  }
}

void layernorm_backward_input(const float* dout, const float* x, const float* gamma, const float* mean,
                              const float* rstd, float* dx, int T, int C) {
  const SimdKernels& k = simd_kernels();
  for (int t = 0; t < T; ++t) {
    const std::int64_t o = static_cast<std::int64_t>(t) * C;
    k.layernorm_backward_input_row(dout + o, x + o, gamma, mean[t], rstd[t], dx + o, C);
  }
}

void layernorm_backward(const float* dout, const float* x, const float* gamma, const float* mean, const float* rstd,
                        float* dx, float* dgamma, float* dbeta, int T, int C) {
  layernorm_backward_weight(dout, x, mean, rstd, dgamma, dbeta, T, C);
  layernorm_backward_input(dout, x, gamma, mean, rstd, dx, T, C);
}

void gelu_forward(const float* in, float* out, std::int64_t n) { simd_kernels().gelu_forward(in, out, n); }

void gelu_backward(const float* in, const float* dout, float* din, std::int64_t n) {
  simd_kernels().gelu_backward(in, dout, din, n);
}

// Causal attention skips the zero upper triangle: the queries go in blocks
// of kCausalBlock rows, and a block's products run only over the keys it can
// see (up to its last row), so QKᵀ and P·V cost (n+1)/2n of the full s×s
// products with n blocks (s = 256: 62.5%); the backward's four products
// likewise. The probabilities stay stored whole, zero above the diagonal.
void attention_forward(const float* qkv, float* probs, float* out, int B, int s, int C, int heads, int kv_heads) {
  if (kv_heads == 0) kv_heads = heads;
  const int d = C / heads, group = heads / kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int ld = C + 2 * kv_heads * d;
  const SimdKernels& kernels = simd_kernels();
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < heads; ++h) {
      const float* row0 = qkv + static_cast<std::int64_t>(b) * s * ld;
      const float* q = row0 + h * d;
      const float* k = row0 + C + (h / group) * d;
      const float* v = row0 + C + kv_heads * d + (h / group) * d;
      float* P = probs + (static_cast<std::int64_t>(b) * heads + h) * s * s;
      float* o = out + static_cast<std::int64_t>(b) * s * C + h * d;
      for (int i0 = 0; i0 < s; i0 += kCausalBlock) {
        const int i1 = std::min(i0 + kCausalBlock, s), rows = i1 - i0;  // rows i0..i1-1 see keys 0..i1-1
        float* Pb = P + static_cast<std::int64_t>(i0) * s;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, i1, d, scale, q + static_cast<std::int64_t>(i0) * ld,
                    ld, k, ld, 0.0f, Pb, s);
        for (int i = i0; i < i1; ++i) {
          float* row = P + static_cast<std::int64_t>(i) * s;
          kernels.softmax_row(row, i + 1);
          std::fill(row + i + 1, row + s, 0.0f);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, i1, 1.0f, Pb, s, v, ld, 0.0f,
                    o + static_cast<std::int64_t>(i0) * C, C);
      }
    }
}

void attention_backward(const float* dout, const float* qkv, const float* probs, float* dqkv, float* scratch, int B,
                        int s, int C, int heads, int kv_heads) {
  if (kv_heads == 0) kv_heads = heads;
  const int d = C / heads, group = heads / kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int ld = C + 2 * kv_heads * d;
  const SimdKernels& kernels = simd_kernels();
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < heads; ++h) {
      const std::int64_t row0 = static_cast<std::int64_t>(b) * s * ld;
      const std::int64_t kv_off = C + (h / group) * d;
      const float* q = qkv + row0 + h * d;
      const float* k = qkv + row0 + kv_off;
      const float* v = k + kv_heads * d;
      float* dq = dqkv + row0 + h * d;
      float* dk = dqkv + row0 + kv_off;
      float* dv = dk + kv_heads * d;
      // The first query head of a group writes its K/V gradients, the others add theirs, in head order.
      const float beta = h % group == 0 ? 0.0f : 1.0f;
      const float* P = probs + (static_cast<std::int64_t>(b) * heads + h) * s * s;
      const float* dO = dout + static_cast<std::int64_t>(b) * s * C + h * d;
      float* dP = scratch;  // dP, then dS in place; row i is read up to its block's end only
      // Per query block: dP = dO·Vᵀ over the keys it sees, dS = P ⊙ (dP - rowsum(P ⊙ dP)), dQ = dS·K.
      for (int i0 = 0; i0 < s; i0 += kCausalBlock) {
        const int i1 = std::min(i0 + kCausalBlock, s), rows = i1 - i0;
        float* dPb = dP + static_cast<std::int64_t>(i0) * s;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, i1, d, 1.0f, dO + static_cast<std::int64_t>(i0) * C,
                    C, v, ld, 0.0f, dPb, s);
        for (int i = i0; i < i1; ++i) {
          const float* pr = P + static_cast<std::int64_t>(i) * s;
          float* dr = dP + static_cast<std::int64_t>(i) * s;
          kernels.softmax_backward_row(pr, dr, i + 1);
          std::fill(dr + i + 1, dr + i1, 0.0f);  // masked entries have P = 0
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, i1, scale, dPb, s, k, ld, 0.0f,
                    dq + static_cast<std::int64_t>(i0) * ld, ld);
      }
      // Per key block j0..j1-1, seen by queries j0..s-1: dV = Pᵀ·dO, dK = dSᵀ·Q.
      for (int j0 = 0; j0 < s; j0 += kCausalBlock) {
        const int j1 = std::min(j0 + kCausalBlock, s), cols = j1 - j0, seen_by = s - j0;
        const std::int64_t corner = static_cast<std::int64_t>(j0) * s + j0;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, d, seen_by, 1.0f, P + corner, s,
                    dO + static_cast<std::int64_t>(j0) * C, C, beta, dv + static_cast<std::int64_t>(j0) * ld, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, d, seen_by, scale, dP + corner, s,
                    q + static_cast<std::int64_t>(j0) * ld, ld, beta, dk + static_cast<std::int64_t>(j0) * ld, ld);
      }
    }
}

void rmsnorm_forward(const float* x, const float* gamma, float* out, float* rrms, int T, int C, float eps) {
  for (int t = 0; t < T; ++t) {
    const float* xr = x + static_cast<std::int64_t>(t) * C;
    float* o = out + static_cast<std::int64_t>(t) * C;
    double ss = 0.0;
    for (int c = 0; c < C; ++c) ss += static_cast<double>(xr[c]) * xr[c];
    const float r = static_cast<float>(1.0 / std::sqrt(ss / C + eps));
    rrms[t] = r;
    for (int c = 0; c < C; ++c) o[c] = xr[c] * r * gamma[c];
  }
}

void rmsnorm_backward_weight(const float* dout, const float* x, const float* rrms, float* dgamma, int T, int C) {
  for (int t = 0; t < T; ++t) {
    const float* d = dout + static_cast<std::int64_t>(t) * C;
    const float* xr = x + static_cast<std::int64_t>(t) * C;
    for (int c = 0; c < C; ++c) dgamma[c] += d[c] * xr[c] * rrms[t];
  }
}

void rmsnorm_backward_input(const float* dout, const float* x, const float* gamma, const float* rrms, float* dx, int T,
                            int C) {
  // dx = r·(g⊙dy) - x·r³·mean(g⊙dy⊙x)
  for (int t = 0; t < T; ++t) {
    const float* d = dout + static_cast<std::int64_t>(t) * C;
    const float* xr = x + static_cast<std::int64_t>(t) * C;
    float* o = dx + static_cast<std::int64_t>(t) * C;
    double dot = 0.0;
    for (int c = 0; c < C; ++c) dot += static_cast<double>(gamma[c] * d[c]) * xr[c];
    const float r = rrms[t];
    const float k = static_cast<float>(dot / C) * r * r * r;
    for (int c = 0; c < C; ++c) o[c] += r * gamma[c] * d[c] - xr[c] * k;
  }
}

void rope_table(float* table, int s, int d, double theta, const int* positions) {
  const int half = d / 2;
  for (int pos = 0; pos < s; ++pos)
    for (int i = 0; i < half; ++i) {
      const double angle = (positions ? positions[pos] : pos) * std::pow(theta, -2.0 * i / d);
      table[static_cast<std::int64_t>(pos) * half + i] = static_cast<float>(std::cos(angle));
      table[static_cast<std::int64_t>(s) * half + static_cast<std::int64_t>(pos) * half + i] = static_cast<float>(std::sin(angle));
    }
}

void rope_apply(float* x, const float* table, int T, int s, int heads, int d, int ld, bool inverse) {
  const int half = d / 2;
  for (int t = 0; t < T; ++t) {
    const std::int64_t pos = t % s;
    const float* cs = table + pos * half;
    const float* sn = table + static_cast<std::int64_t>(s) * half + pos * half;
    float* row = x + static_cast<std::int64_t>(t) * ld;
    for (int h = 0; h < heads; ++h) {
      float* v = row + h * d;
      for (int i = 0; i < half; ++i) {
        const float a = v[2 * i], b = v[2 * i + 1], c = cs[i], n = inverse ? -sn[i] : sn[i];
        v[2 * i] = a * c - b * n;
        v[2 * i + 1] = a * n + b * c;
      }
    }
  }
}

void swiglu_forward(const float* pre, float* u, int T, int f) {
  for (int t = 0; t < T; ++t) {
    const float* a = pre + static_cast<std::int64_t>(t) * 2 * f;
    float* o = u + static_cast<std::int64_t>(t) * f;
    for (int j = 0; j < f; ++j) {
      const float g = a[j], sig = 1.0f / (1.0f + std::exp(-g));
      o[j] = g * sig * a[f + j];
    }
  }
}

void swiglu_backward(const float* pre, const float* du, float* dpre, int T, int f) {
  for (int t = 0; t < T; ++t) {
    const float* a = pre + static_cast<std::int64_t>(t) * 2 * f;
    const float* d = du + static_cast<std::int64_t>(t) * f;
    float* o = dpre + static_cast<std::int64_t>(t) * 2 * f;
    for (int j = 0; j < f; ++j) {
      const float g = a[j], sig = 1.0f / (1.0f + std::exp(-g));
      o[j] = d[j] * a[f + j] * sig * (1.0f + g * (1.0f - sig));  // d silu(g) / dg = σ(1 + g(1 - σ))
      o[f + j] = d[j] * g * sig;
    }
  }
}

void embedding_forward(const std::int32_t* tokens, const float* wte, const float* wpe, float* out, int B, int s, int C,
                       VocabPart part) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < s; ++t) {
      const std::int64_t i = static_cast<std::int64_t>(b) * s + t;
      const float* te = part.holds(tokens[i]) ? wte + static_cast<std::int64_t>(tokens[i] - part.first) * C : nullptr;
      const float* pe = wpe ? wpe + static_cast<std::int64_t>(t) * C : nullptr;
      float* o = out + i * C;
      if (te && pe) {
        for (int c = 0; c < C; ++c) o[c] = te[c] + pe[c];
      } else if (te || pe) {
        std::copy(te ? te : pe, (te ? te : pe) + C, o);
      } else {
        std::fill(o, o + C, 0.0f);
      }
    }
}

void embedding_backward(const std::int32_t* tokens, const float* dout, float* dwte, float* dwpe, int B, int s, int C,
                        VocabPart part) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < s; ++t) {
      const std::int64_t i = static_cast<std::int64_t>(b) * s + t;
      const float* d = dout + i * C;
      if (part.holds(tokens[i])) {
        float* te = dwte + static_cast<std::int64_t>(tokens[i] - part.first) * C;
        for (int c = 0; c < C; ++c) te[c] += d[c];
      }
      if (!dwpe) continue;
      float* pe = dwpe + static_cast<std::int64_t>(t) * C;
      for (int c = 0; c < C; ++c) pe[c] += d[c];
    }
}

double softmax_crossentropy_forward(float* logits, const std::int32_t* targets, int T, int V) {
  double loss = 0.0;
  for (int t = 0; t < T; ++t) {
    float* row = logits + static_cast<std::int64_t>(t) * V;
    simd_kernels().softmax_row(row, V);
    loss -= std::log(static_cast<double>(std::max(row[targets[t]], 1e-30f)));
  }
  return loss / T;
}

void softmax_crossentropy_backward(float* probs, const std::int32_t* targets, int T, int V, float scale, VocabPart part) {
  for (int t = 0; t < T; ++t) {
    float* row = probs + static_cast<std::int64_t>(t) * V;
    if (part.holds(targets[t])) row[targets[t] - part.first] -= 1.0f;
    for (int v = 0; v < V; ++v) row[v] *= scale;
  }
}

void vocab_parallel_row_max(const float* logits, float* row_max, int T, int V, int valid) {
  for (int t = 0; t < T; ++t) {
    const float* row = logits + static_cast<std::int64_t>(t) * V;
    float mx = -INFINITY;
    for (int v = 0; v < valid; ++v) mx = std::max(mx, row[v]);
    row_max[t] = mx;
  }
}

void vocab_parallel_exp(float* logits, const float* row_max, const std::int32_t* targets, VocabPart part,
                        float* sum_target, int T, int V, int valid) {
  for (int t = 0; t < T; ++t) {
    float* row = logits + static_cast<std::int64_t>(t) * V;
    float sum = 0.0f;
    for (int v = 0; v < valid; ++v) {
      row[v] = std::exp(row[v] - row_max[t]);
      sum += row[v];
    }
    std::fill(row + valid, row + V, 0.0f);
    sum_target[2 * t] = sum;
    sum_target[2 * t + 1] = part.holds(targets[t]) ? row[targets[t] - part.first] : 0.0f;
  }
}

double vocab_parallel_finish(float* exps, const float* sum_target, int T, int V) {
  double loss = 0.0;
  for (int t = 0; t < T; ++t) {
    float* row = exps + static_cast<std::int64_t>(t) * V;
    const float inv = 1.0f / sum_target[2 * t];
    for (int v = 0; v < V; ++v) row[v] *= inv;
    loss -= std::log(static_cast<double>(std::max(sum_target[2 * t + 1] * inv, 1e-30f)));
  }
  return loss / T;
}

void adamw_update(float* p, const float* g, float* m, float* v, std::int64_t n, float lr, float beta1, float beta2,
                  float eps, float wd, int t, float grad_scale) {
  const float c1 = 1.0f - std::pow(beta1, static_cast<float>(t));
  const float c2 = 1.0f - std::pow(beta2, static_cast<float>(t));
  simd_kernels().adamw(p, g, m, v, n, lr, beta1, beta2, eps, wd, c1, c2, grad_scale);
}

void sgd_update(float* p, const float* g, std::int64_t n, float lr, float grad_scale) {
  for (std::int64_t i = 0; i < n; ++i) p[i] -= lr * g[i] * grad_scale;
}

// Eight partial sums, element i in sum i mod 8, added pairwise at the end: a
// fixed order for a given tensor whatever its address or the build (so a
// stage's piece sums, and the global norm, are the same bits in every split),
// and eight independent additions in flight instead of one chain.
double sum_squares(const float* x, std::int64_t n) {
  double acc[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += static_cast<double>(x[i + k]) * x[i + k];
  for (int k = 0; i < n; ++i, ++k) acc[k] += static_cast<double>(x[i]) * x[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace pipebench::cpu
