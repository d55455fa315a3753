// AVX2 + FMA builds of the cpu backend's element-wise and row kernels
// (cpu_kernels_simd.hpp). This file alone is compiled with -mavx2 -mfma;
// nothing here runs unless simd_path() chose avx2 (the CPU has both).
// exp is SLEEF's 8-lane, 1.0-ULP function (the library PyTorch vectorises
// with); GELU is the sigmoid form of the portable build (cpu_kernels.cpp).
// A row whose length is not a multiple of 8 ends with one masked vector
// step, so every element goes through the same arithmetic.
#include <immintrin.h>
#include <sleef.h>

#include <cmath>

#include "cpu_kernels_simd.hpp"

namespace pipebench::cpu::avx2 {

namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;
constexpr float kGeluFlat = 20.0f;  // gelu' is 1 or 0 beyond it (cpu_kernels.cpp)

// Lanes [0, n) set (n in 0..8).
__m256i lane_mask(std::int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
}

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// The lanes of one vector step: all 8, or the first few of a row's last,
// partial step (masked loads read no byte past the row, masked stores write none).
struct Lanes {
  __m256i mask;
  bool full;
};

// Calls f(i, lanes) for i = 0, 8, ... < n.
template <class F>
inline void for_lanes(std::int64_t n, F&& f) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) f(i, Lanes{_mm256_set1_epi32(-1), true});
  if (i < n) f(i, Lanes{lane_mask(n - i), false});
}

inline __m256 load(const float* p, const Lanes& l) { return l.full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, l.mask); }
inline void store(float* p, const Lanes& l, __m256 v) {
  if (l.full) _mm256_storeu_ps(p, v);
  else _mm256_maskstore_ps(p, l.mask, v);
}
// v where the lane is inside the row, else 0.
inline __m256 inside(const Lanes& l, __m256 v) { return l.full ? v : _mm256_and_ps(v, _mm256_castsi256_ps(l.mask)); }

inline __m256 gelu_minus_2u(__m256 x) {  // -2 sqrt(2/pi) (x + 0.044715 x^3)
  const __m256 x2 = _mm256_mul_ps(x, x);
  return _mm256_mul_ps(_mm256_set1_ps(-2.0f * kGeluScale),
                       _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(kGeluCubic), x2), x, x));
}

inline __m256 gelu(__m256 x) {  // x / (1 + exp(-2u)) = 0.5 x (1 + tanh(u))
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), Sleef_expf8_u10avx2(gelu_minus_2u(x))));
}

}  // namespace

void gelu_forward(const float* in, float* out, std::int64_t n) {
  for_lanes(n, [&](std::int64_t i, const Lanes& l) { store(out + i, l, gelu(load(in + i, l))); });
}

void gelu_backward(const float* in, const float* dout, float* din, std::int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f), cap = _mm256_set1_ps(88.0f);
  const __m256 hi = _mm256_set1_ps(kGeluFlat), lo = _mm256_set1_ps(-kGeluFlat);
  const __m256 slope = _mm256_set1_ps(kGeluScale * 3.0f * kGeluCubic), scale = _mm256_set1_ps(kGeluScale);
  for_lanes(n, [&](std::int64_t i, const Lanes& l) {
    // min/max return their second operand when either is NaN: a NaN x stays NaN.
    const __m256 x = _mm256_max_ps(lo, _mm256_min_ps(hi, load(in + i, l)));
    const __m256 e = Sleef_expf8_u10avx2(_mm256_min_ps(cap, gelu_minus_2u(x)));
    const __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, e));
    // du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2); gelu' = sig (1 + 2 x (1 - sig) du), 1 - sig = e sig
    const __m256 du = _mm256_fmadd_ps(_mm256_mul_ps(slope, x), x, scale);
    const __m256 inner = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(two, x), _mm256_mul_ps(e, sig)), du);
    const __m256 grad = _mm256_mul_ps(sig, _mm256_add_ps(one, inner));
    store(din + i, l, _mm256_mul_ps(load(dout + i, l), grad));
  });
}

void softmax_row(float* row, int n) {
  const __m256 lowest = _mm256_set1_ps(-INFINITY);
  __m256 mx = lowest;
  for_lanes(n, [&](std::int64_t i, const Lanes& l) {
    const __m256 x = load(row + i, l);
    mx = _mm256_max_ps(mx, l.full ? x : _mm256_blendv_ps(lowest, x, _mm256_castsi256_ps(l.mask)));
  });
  const __m256 m = _mm256_set1_ps(hmax(mx));
  __m256 sum = _mm256_setzero_ps();
  for_lanes(n, [&](std::int64_t i, const Lanes& l) {
    const __m256 e = inside(l, Sleef_expf8_u10avx2(_mm256_sub_ps(load(row + i, l), m)));
    store(row + i, l, e);
    sum = _mm256_add_ps(sum, e);
  });
  const __m256 inv = _mm256_set1_ps(1.0f / hsum(sum));
  for_lanes(n, [&](std::int64_t i, const Lanes& l) { store(row + i, l, _mm256_mul_ps(load(row + i, l), inv)); });
}

void softmax_backward_row(const float* p, float* d, int n) {
  __m256 dot = _mm256_setzero_ps();
  for_lanes(n, [&](std::int64_t i, const Lanes& l) { dot = _mm256_fmadd_ps(load(p + i, l), load(d + i, l), dot); });
  const __m256 s = _mm256_set1_ps(hsum(dot));
  for_lanes(n, [&](std::int64_t i, const Lanes& l) {
    store(d + i, l, _mm256_mul_ps(load(p + i, l), _mm256_sub_ps(load(d + i, l), s)));
  });
}

void layernorm_row(const float* x, const float* gamma, const float* beta, float* out, int C, float& mean, float& rstd) {
  constexpr float eps = 1e-5f;
  __m256 sum = _mm256_setzero_ps();
  for_lanes(C, [&](std::int64_t i, const Lanes& l) { sum = _mm256_add_ps(sum, load(x + i, l)); });
  const float m = hsum(sum) / static_cast<float>(C);
  const __m256 mv = _mm256_set1_ps(m);
  __m256 sq = _mm256_setzero_ps();
  for_lanes(C, [&](std::int64_t i, const Lanes& l) {
    const __m256 c = inside(l, _mm256_sub_ps(load(x + i, l), mv));
    sq = _mm256_fmadd_ps(c, c, sq);
  });
  const float r = 1.0f / std::sqrt(hsum(sq) / static_cast<float>(C) + eps);
  const __m256 rv = _mm256_set1_ps(r);
  for_lanes(C, [&](std::int64_t i, const Lanes& l) {
    const __m256 norm = _mm256_mul_ps(_mm256_sub_ps(load(x + i, l), mv), rv);
    store(out + i, l, _mm256_fmadd_ps(norm, load(gamma + i, l), load(beta + i, l)));
  });
  mean = m;
  rstd = r;
}

void layernorm_backward_input_row(const float* d, const float* x, const float* gamma, float mean, float rstd, float* dx,
                                  int C) {
  const __m256 mv = _mm256_set1_ps(mean), rv = _mm256_set1_ps(rstd);
  __m256 sum_dn = _mm256_setzero_ps(), sum_dn_n = _mm256_setzero_ps();
  for_lanes(C, [&](std::int64_t i, const Lanes& l) {
    const __m256 norm = _mm256_mul_ps(_mm256_sub_ps(load(x + i, l), mv), rv);
    const __m256 dnorm = _mm256_mul_ps(load(gamma + i, l), load(d + i, l));
    sum_dn = _mm256_add_ps(sum_dn, dnorm);
    sum_dn_n = _mm256_fmadd_ps(dnorm, norm, sum_dn_n);
  });
  const __m256 a = _mm256_set1_ps(hsum(sum_dn) / static_cast<float>(C));
  const __m256 b = _mm256_set1_ps(hsum(sum_dn_n) / static_cast<float>(C));
  for_lanes(C, [&](std::int64_t i, const Lanes& l) {
    const __m256 norm = _mm256_mul_ps(_mm256_sub_ps(load(x + i, l), mv), rv);
    const __m256 dnorm = _mm256_mul_ps(load(gamma + i, l), load(d + i, l));
    const __m256 g = _mm256_mul_ps(_mm256_fnmadd_ps(norm, b, _mm256_sub_ps(dnorm, a)), rv);
    store(dx + i, l, _mm256_add_ps(load(dx + i, l), g));
  });
}

void add_bias_rows(float* y, const float* b, int T, int n) {
  for (int t = 0; t < T; ++t) {
    float* row = y + static_cast<std::int64_t>(t) * n;
    for_lanes(n, [&](std::int64_t i, const Lanes& l) {
      store(row + i, l, _mm256_add_ps(load(row + i, l), load(b + i, l)));
    });
  }
}

void bias_gelu_rows(float* pre, const float* b, float* out, int T, int n) {
  for (int t = 0; t < T; ++t) {
    float* p = pre + static_cast<std::int64_t>(t) * n;
    float* o = out + static_cast<std::int64_t>(t) * n;
    for_lanes(n, [&](std::int64_t i, const Lanes& l) {
      const __m256 x = _mm256_add_ps(load(p + i, l), load(b + i, l));
      store(p + i, l, x);
      store(o + i, l, gelu(x));
    });
  }
}

void sum_rows(const float* dy, float* db, int T, int n) {
  for (int t = 0; t < T; ++t) {
    const float* row = dy + static_cast<std::int64_t>(t) * n;
    for_lanes(n, [&](std::int64_t i, const Lanes& l) {
      store(db + i, l, _mm256_add_ps(load(db + i, l), load(row + i, l)));
    });
  }
}

void layernorm_backward_weight_row(const float* d, const float* x, float mean, float rstd, float* dgamma, float* dbeta,
                                   int C) {
  const __m256 mv = _mm256_set1_ps(mean), rv = _mm256_set1_ps(rstd);
  for_lanes(C, [&](std::int64_t i, const Lanes& l) {
    const __m256 dv = load(d + i, l);
    store(dbeta + i, l, _mm256_add_ps(load(dbeta + i, l), dv));
    const __m256 norm = _mm256_mul_ps(_mm256_sub_ps(load(x + i, l), mv), rv);
    store(dgamma + i, l, _mm256_fmadd_ps(norm, dv, load(dgamma + i, l)));
  });
}

void adamw(float* p, const float* g, float* m, float* v, std::int64_t n, float lr, float beta1, float beta2, float eps,
           float wd, float c1, float c2, float grad_scale) {
  const __m256 b1 = _mm256_set1_ps(beta1), b2 = _mm256_set1_ps(beta2), one_b1 = _mm256_set1_ps(1.0f - beta1),
               one_b2 = _mm256_set1_ps(1.0f - beta2), inv_c1 = _mm256_set1_ps(1.0f / c1),
               inv_c2 = _mm256_set1_ps(1.0f / c2), ev = _mm256_set1_ps(eps), wdv = _mm256_set1_ps(wd),
               lrv = _mm256_set1_ps(lr), gs = _mm256_set1_ps(grad_scale);
  for_lanes(n, [&](std::int64_t i, const Lanes& l) {
    const __m256 gi = _mm256_mul_ps(load(g + i, l), gs);
    const __m256 mi = _mm256_fmadd_ps(b1, load(m + i, l), _mm256_mul_ps(one_b1, gi));
    const __m256 vi = _mm256_fmadd_ps(b2, load(v + i, l), _mm256_mul_ps(_mm256_mul_ps(one_b2, gi), gi));
    store(m + i, l, mi);
    store(v + i, l, vi);
    const __m256 denom = _mm256_add_ps(_mm256_sqrt_ps(_mm256_mul_ps(vi, inv_c2)), ev);
    const __m256 pi = load(p + i, l);
    const __m256 step = _mm256_fmadd_ps(wdv, pi, _mm256_div_ps(_mm256_mul_ps(mi, inv_c1), denom));
    store(p + i, l, _mm256_fnmadd_ps(lrv, step, pi));
  });
}

}  // namespace pipebench::cpu::avx2
