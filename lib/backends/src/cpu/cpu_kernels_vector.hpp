// The vector builds of the cpu backend's element-wise and row kernels
// (cpu_kernels_simd.hpp), written once over an instruction set's traits `I`
// and compiled once per instruction set: cpu_kernels_avx2.cpp (8 lanes,
// -mavx2 -mfma) and cpu_kernels_avx512.cpp (16 lanes, -mavx512f). Include it
// only from those files, with `I` in an unnamed namespace, so no inline code
// built for one instruction set can stand in for another's at link time.
//
// `I` provides: V (the vector), kWidth (its lanes), Lanes (one vector step:
// all lanes, or the first few of a row's last, partial step; masked loads
// read no byte past the row and masked stores write none), all() and
// first(n), load/store, set1/zero, add/sub/mul/div/fmadd (a·b + c)/fnmadd
// (c − a·b)/min/max (the second operand when either is NaN)/sqrt, exp (SLEEF,
// 1.0 ULP), inside(l, v) (v in the row's lanes, else 0), or_lowest(l, v) (v in
// the row's lanes, else −∞) and the horizontal hsum and hmax. Every element of
// a row goes through the same arithmetic, whichever step holds it; only the
// horizontal sums' order depends on the width.
#pragma once

#include <cmath>
#include <cstdint>

namespace pipebench::cpu::vector {

inline constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
inline constexpr float kGeluCubic = 0.044715f;
inline constexpr float kGeluFlat = 20.0f;  // gelu' is 1 or 0 beyond it (cpu_kernels.cpp)

template <class I>
struct Kernels {
  using V = typename I::V;
  using Lanes = typename I::Lanes;

  // Calls f(i, lanes) for i = 0, kWidth, ... < n.
  template <class F>
  static void for_lanes(std::int64_t n, F&& f) {
    std::int64_t i = 0;
    for (; i + I::kWidth <= n; i += I::kWidth) f(i, I::all());
    if (i < n) f(i, I::first(n - i));
  }

  static V gelu_minus_2u(V x) {  // -2 sqrt(2/pi) (x + 0.044715 x^3)
    const V x2 = I::mul(x, x);
    return I::mul(I::set1(-2.0f * kGeluScale), I::fmadd(I::mul(I::set1(kGeluCubic), x2), x, x));
  }

  static V gelu(V x) {  // x / (1 + exp(-2u)) = 0.5 x (1 + tanh(u))
    return I::div(x, I::add(I::set1(1.0f), I::exp(gelu_minus_2u(x))));
  }

  static void gelu_forward(const float* in, float* out, std::int64_t n) {
    for_lanes(n, [&](std::int64_t i, const Lanes& l) { I::store(out + i, l, gelu(I::load(in + i, l))); });
  }

  static void gelu_backward(const float* in, const float* dout, float* din, std::int64_t n) {
    const V one = I::set1(1.0f), two = I::set1(2.0f), cap = I::set1(88.0f);
    const V hi = I::set1(kGeluFlat), lo = I::set1(-kGeluFlat);
    const V slope = I::set1(kGeluScale * 3.0f * kGeluCubic), scale = I::set1(kGeluScale);
    for_lanes(n, [&](std::int64_t i, const Lanes& l) {
      // min/max return their second operand when either is NaN: a NaN x stays
      // NaN.
      const V x = I::max(lo, I::min(hi, I::load(in + i, l)));
      const V e = I::exp(I::min(cap, gelu_minus_2u(x)));
      const V sig = I::div(one, I::add(one, e));
      // du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2); gelu' = sig (1 + 2 x (1 -
      // sig) du), 1 - sig = e sig
      const V du = I::fmadd(I::mul(slope, x), x, scale);
      const V inner = I::mul(I::mul(I::mul(two, x), I::mul(e, sig)), du);
      const V grad = I::mul(sig, I::add(one, inner));
      I::store(din + i, l, I::mul(I::load(dout + i, l), grad));
    });
  }

  static void softmax_row(float* row, int n) {
    V mx = I::set1(-INFINITY);
    for_lanes(n, [&](std::int64_t i, const Lanes& l) { mx = I::max(mx, I::or_lowest(l, I::load(row + i, l))); });
    const V m = I::set1(I::hmax(mx));
    V sum = I::zero();
    for_lanes(n, [&](std::int64_t i, const Lanes& l) {
      const V e = I::inside(l, I::exp(I::sub(I::load(row + i, l), m)));
      I::store(row + i, l, e);
      sum = I::add(sum, e);
    });
    const V inv = I::set1(1.0f / I::hsum(sum));
    for_lanes(n, [&](std::int64_t i, const Lanes& l) { I::store(row + i, l, I::mul(I::load(row + i, l), inv)); });
  }

  static float exp_shifted_row(float* row, int n, float shift) {
    const V m = I::set1(shift);
    V sum = I::zero();
    for_lanes(n, [&](std::int64_t i, const Lanes& l) {
      const V e = I::inside(l, I::exp(I::sub(I::load(row + i, l), m)));
      I::store(row + i, l, e);
      sum = I::add(sum, e);
    });
    return I::hsum(sum);
  }

  static void softmax_backward_row(const float* p, float* d, int n) {
    V dot = I::zero();
    for_lanes(n, [&](std::int64_t i, const Lanes& l) { dot = I::fmadd(I::load(p + i, l), I::load(d + i, l), dot); });
    const V s = I::set1(I::hsum(dot));
    for_lanes(n, [&](std::int64_t i, const Lanes& l) {
      I::store(d + i, l, I::mul(I::load(p + i, l), I::sub(I::load(d + i, l), s)));
    });
  }

  static void layernorm_row(const float* x, const float* gamma, const float* beta, float* out, int C, float& mean,
                            float& rstd) {
    constexpr float eps = 1e-5f;
    V sum = I::zero();
    for_lanes(C, [&](std::int64_t i, const Lanes& l) { sum = I::add(sum, I::load(x + i, l)); });
    const float m = I::hsum(sum) / static_cast<float>(C);
    const V mv = I::set1(m);
    V sq = I::zero();
    for_lanes(C, [&](std::int64_t i, const Lanes& l) {
      const V c = I::inside(l, I::sub(I::load(x + i, l), mv));
      sq = I::fmadd(c, c, sq);
    });
    const float r = 1.0f / std::sqrt(I::hsum(sq) / static_cast<float>(C) + eps);
    const V rv = I::set1(r);
    for_lanes(C, [&](std::int64_t i, const Lanes& l) {
      const V norm = I::mul(I::sub(I::load(x + i, l), mv), rv);
      I::store(out + i, l, I::fmadd(norm, I::load(gamma + i, l), I::load(beta + i, l)));
    });
    mean = m;
    rstd = r;
  }

  static void layernorm_backward_input_row(const float* d, const float* x, const float* gamma, float mean, float rstd,
                                           float* dx, int C) {
    const V mv = I::set1(mean), rv = I::set1(rstd);
    V sum_dn = I::zero(), sum_dn_n = I::zero();
    for_lanes(C, [&](std::int64_t i, const Lanes& l) {
      const V norm = I::mul(I::sub(I::load(x + i, l), mv), rv);
      const V dnorm = I::mul(I::load(gamma + i, l), I::load(d + i, l));
      sum_dn = I::add(sum_dn, dnorm);
      sum_dn_n = I::fmadd(dnorm, norm, sum_dn_n);
    });
    const V a = I::set1(I::hsum(sum_dn) / static_cast<float>(C));
    const V b = I::set1(I::hsum(sum_dn_n) / static_cast<float>(C));
    for_lanes(C, [&](std::int64_t i, const Lanes& l) {
      const V norm = I::mul(I::sub(I::load(x + i, l), mv), rv);
      const V dnorm = I::mul(I::load(gamma + i, l), I::load(d + i, l));
      const V g = I::mul(I::fnmadd(norm, b, I::sub(dnorm, a)), rv);
      I::store(dx + i, l, I::add(I::load(dx + i, l), g));
    });
  }

  static void add_bias_rows(float* y, const float* b, int T, int n) {
    for (int t = 0; t < T; ++t) {
      float* row = y + static_cast<std::int64_t>(t) * n;
      for_lanes(n, [&](std::int64_t i, const Lanes& l) {
        I::store(row + i, l, I::add(I::load(row + i, l), I::load(b + i, l)));
      });
    }
  }

  static void bias_gelu_rows(float* pre, const float* b, float* out, int T, int n) {
    for (int t = 0; t < T; ++t) {
      float* p = pre + static_cast<std::int64_t>(t) * n;
      float* o = out + static_cast<std::int64_t>(t) * n;
      for_lanes(n, [&](std::int64_t i, const Lanes& l) {
        const V x = I::add(I::load(p + i, l), I::load(b + i, l));
        I::store(p + i, l, x);
        I::store(o + i, l, gelu(x));
      });
    }
  }

  static void sum_rows(const float* dy, float* db, int T, int n) {
    for (int t = 0; t < T; ++t) {
      const float* row = dy + static_cast<std::int64_t>(t) * n;
      for_lanes(n, [&](std::int64_t i, const Lanes& l) {
        I::store(db + i, l, I::add(I::load(db + i, l), I::load(row + i, l)));
      });
    }
  }

  static void layernorm_backward_weight_row(const float* d, const float* x, float mean, float rstd, float* dgamma,
                                            float* dbeta, int C) {
    const V mv = I::set1(mean), rv = I::set1(rstd);
    for_lanes(C, [&](std::int64_t i, const Lanes& l) {
      const V dv = I::load(d + i, l);
      I::store(dbeta + i, l, I::add(I::load(dbeta + i, l), dv));
      const V norm = I::mul(I::sub(I::load(x + i, l), mv), rv);
      I::store(dgamma + i, l, I::fmadd(norm, dv, I::load(dgamma + i, l)));
    });
  }

  static void adamw(float* p, const float* g, float* m, float* v, std::int64_t n, float lr, float beta1, float beta2,
                    float eps, float wd, float c1, float c2, float grad_scale) {
    const V b1 = I::set1(beta1), b2 = I::set1(beta2), one_b1 = I::set1(1.0f - beta1), one_b2 = I::set1(1.0f - beta2),
            inv_c1 = I::set1(1.0f / c1), inv_c2 = I::set1(1.0f / c2), ev = I::set1(eps), wdv = I::set1(wd),
            lrv = I::set1(lr), gs = I::set1(grad_scale);
    for_lanes(n, [&](std::int64_t i, const Lanes& l) {
      const V gi = I::mul(I::load(g + i, l), gs);
      const V mi = I::fmadd(b1, I::load(m + i, l), I::mul(one_b1, gi));
      const V vi = I::fmadd(b2, I::load(v + i, l), I::mul(I::mul(one_b2, gi), gi));
      I::store(m + i, l, mi);
      I::store(v + i, l, vi);
      const V denom = I::add(I::sqrt(I::mul(vi, inv_c2)), ev);
      const V pi = I::load(p + i, l);
      const V step = I::fmadd(wdv, pi, I::div(I::mul(mi, inv_c1), denom));
      I::store(p + i, l, I::fnmadd(lrv, step, pi));
    });
  }
};

}  // namespace pipebench::cpu::vector

// The entry points of cpu_kernels_simd.hpp but adamw in the including file's
// namespace, each calling Kernels<I>'s.
#define PIPEBENCH_CPU_VECTOR_ENTRY_POINTS(I)                                                                        \
  void gelu_forward(const float* in, float* out, std::int64_t n) { vector::Kernels<I>::gelu_forward(in, out, n); }  \
  void gelu_backward(const float* in, const float* dout, float* din, std::int64_t n) {                              \
    vector::Kernels<I>::gelu_backward(in, dout, din, n);                                                            \
  }                                                                                                                 \
  void softmax_row(float* row, int n) { vector::Kernels<I>::softmax_row(row, n); }                                  \
  void softmax_backward_row(const float* p, float* d, int n) { vector::Kernels<I>::softmax_backward_row(p, d, n); } \
  float exp_shifted_row(float* row, int n, float shift) { return vector::Kernels<I>::exp_shifted_row(row, n, shift); } \
  void layernorm_row(const float* x, const float* gamma, const float* beta, float* out, int C, float& mean,         \
                     float& rstd) {                                                                                 \
    vector::Kernels<I>::layernorm_row(x, gamma, beta, out, C, mean, rstd);                                          \
  }                                                                                                                 \
  void layernorm_backward_input_row(const float* d, const float* x, const float* gamma, float mean, float rstd,     \
                                    float* dx, int C) {                                                             \
    vector::Kernels<I>::layernorm_backward_input_row(d, x, gamma, mean, rstd, dx, C);                               \
  }                                                                                                                 \
  void layernorm_backward_weight_row(const float* d, const float* x, float mean, float rstd, float* dgamma,         \
                                     float* dbeta, int C) {                                                         \
    vector::Kernels<I>::layernorm_backward_weight_row(d, x, mean, rstd, dgamma, dbeta, C);                          \
  }                                                                                                                 \
  void add_bias_rows(float* y, const float* b, int T, int n) { vector::Kernels<I>::add_bias_rows(y, b, T, n); }     \
  void bias_gelu_rows(float* pre, const float* b, float* out, int T, int n) {                                       \
    vector::Kernels<I>::bias_gelu_rows(pre, b, out, T, n);                                                          \
  }                                                                                                                 \
  void sum_rows(const float* dy, float* db, int T, int n) { vector::Kernels<I>::sum_rows(dy, db, T, n); }

// AdamW's entry point, apart: the avx512 build keeps avx2's
// (cpu_kernels_avx512.cpp).
#define PIPEBENCH_CPU_VECTOR_ADAMW(I)                                                                          \
  void adamw(float* p, const float* g, float* m, float* v, std::int64_t n, float lr, float beta1, float beta2, \
             float eps, float wd, float c1, float c2, float grad_scale) {                                      \
    vector::Kernels<I>::adamw(p, g, m, v, n, lr, beta1, beta2, eps, wd, c1, c2, grad_scale);                   \
  }
