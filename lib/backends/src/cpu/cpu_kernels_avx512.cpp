// The AVX-512 build of the cpu backend's element-wise and row kernels
// (cpu_kernels_simd.hpp): cpu_kernels_vector.hpp over 16-lane vectors, with
// native lane masks for a row's last, partial step and exp from SLEEF's
// 16-lane, 1.0-ULP function. This file alone is compiled with -mavx512f
// -mfma; nothing here runs unless simd_kernels() chose avx512 (the CPU and
// the OS have AVX-512F).
#include <immintrin.h>
#include <sleef.h>

#include "cpu_kernels_simd.hpp"
#include "cpu_kernels_vector.hpp"

namespace pipebench::cpu::avx512 {

namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int kWidth = 16;
  struct Lanes {
    __mmask16 mask;
    bool full;
  };
  static Lanes all() { return {static_cast<__mmask16>(0xffff), true}; }
  static Lanes first(std::int64_t n) { return {static_cast<__mmask16>((1u << n) - 1u), false}; }  // n in 1..15
  static V load(const float* p, const Lanes& l) {
    return l.full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(l.mask, p);
  }
  static void store(float* p, const Lanes& l, V v) {
    if (l.full)
      _mm512_storeu_ps(p, v);
    else
      _mm512_mask_storeu_ps(p, l.mask, v);
  }
  static V inside(const Lanes& l, V v) { return l.full ? v : _mm512_maskz_mov_ps(l.mask, v); }
  static V or_lowest(const Lanes& l, V v) {
    return l.full ? v : _mm512_mask_blend_ps(l.mask, _mm512_set1_ps(-INFINITY), v);
  }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V zero() { return _mm512_setzero_ps(); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V sqrt(V a) { return _mm512_sqrt_ps(a); }
  static V exp(V a) { return Sleef_expf16_u10avx512f(a); }
  static float hsum(V v) {  // halves added pairwise down to one lane: a fixed order
    const __m256 h =
        _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  static float hmax(V v) { return _mm512_reduce_max_ps(v); }
};

}  // namespace

PIPEBENCH_CPU_VECTOR_ENTRY_POINTS(Avx512)

// AdamW stays on 8 lanes: on 16 lanes it measured 15-25% slower over 4 M
// parameters, with 64-byte-aligned arrays too (bench_cpu_kernels, Intel Xeon
// with AVX-512, 2026-12-01); it streams seven arrays and does a square root
// and a division per element, which 16 lanes do not make faster.
void adamw(float* p, const float* g, float* m, float* v, std::int64_t n, float lr, float beta1, float beta2, float eps,
           float wd, float c1, float c2, float grad_scale) {
  avx2::adamw(p, g, m, v, n, lr, beta1, beta2, eps, wd, c1, c2, grad_scale);
}

}  // namespace pipebench::cpu::avx512
