// The AVX2 + FMA build of the cpu backend's element-wise and row kernels
// (cpu_kernels_simd.hpp): cpu_kernels_vector.hpp over 8-lane vectors, exp
// from SLEEF's 8-lane, 1.0-ULP function (the library PyTorch vectorises
// with). This file alone is compiled with -mavx2 -mfma; nothing here runs
// unless simd_kernels() chose avx2 (the CPU has both).
#include <immintrin.h>
#include <sleef.h>

#include "cpu_kernels_simd.hpp"
#include "cpu_kernels_vector.hpp"

namespace pipebench::cpu::avx2 {

namespace {

struct Avx2 {
  using V = __m256;
  static constexpr int kWidth = 8;
  struct Lanes {
    __m256i mask;
    bool full;
  };
  static Lanes all() { return {_mm256_set1_epi32(-1), true}; }
  static Lanes first(std::int64_t n) {  // lanes [0, n), n in 1..7
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return {_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx), false};
  }
  static V load(const float* p, const Lanes& l) { return l.full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, l.mask); }
  static void store(float* p, const Lanes& l, V v) {
    if (l.full)
      _mm256_storeu_ps(p, v);
    else
      _mm256_maskstore_ps(p, l.mask, v);
  }
  static V inside(const Lanes& l, V v) { return l.full ? v : _mm256_and_ps(v, _mm256_castsi256_ps(l.mask)); }
  static V or_lowest(const Lanes& l, V v) {
    return l.full ? v : _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), v, _mm256_castsi256_ps(l.mask));
  }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V zero() { return _mm256_setzero_ps(); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V sqrt(V a) { return _mm256_sqrt_ps(a); }
  static V exp(V a) { return Sleef_expf8_u10avx2(a); }
  static float hsum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  static float hmax(V v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
};

}  // namespace

PIPEBENCH_CPU_VECTOR_ENTRY_POINTS(Avx2)
PIPEBENCH_CPU_VECTOR_ADAMW(Avx2)

}  // namespace pipebench::cpu::avx2
