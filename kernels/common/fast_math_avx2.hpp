#pragma once
// AVX2+FMA forms of fast_math.hpp's exp, sigmoid and tanh: fast_math_avx512.hpp's formulas
// eight lanes at a time, for CPUs without AVX-512 (AMD Zen 2/3, older Xeons). Lanes may differ
// from the scalar forms in the last bits (FMA polynomials). NaN in, NaN out: vmaxps/vminps
// return their second source on NaN, so the clamps below keep a NaN operand. Also the lane
// helpers every AVX2 kernel uses: a tail mask and a fixed-order horizontal sum.
//
// Include only inside an AVX2 target region (#pragma GCC target("avx2,fma") after
// <immintrin.h>); everything here is internal-linkage inline.

namespace k3::simd256 {

static inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_set1_ps(88.7f), _mm256_max_ps(_mm256_set1_ps(-87.3f), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x));
  __m256 p = _mm256_set1_ps(1.3888949e-3f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3333836e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1666668e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666667e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/// 1 / (1 + e^{−x}).
static inline __m256 sigmoid8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

static inline __m256 tanh8(__m256 y) {
  const __m256 y2 = _mm256_mul_ps(y, y);
  __m256 p = _mm256_set1_ps(62.0f / 2835.0f);
  p = _mm256_fmsub_ps(p, y2, _mm256_set1_ps(17.0f / 315.0f));
  p = _mm256_fmadd_ps(p, y2, _mm256_set1_ps(2.0f / 15.0f));
  p = _mm256_fmsub_ps(p, y2, _mm256_set1_ps(1.0f / 3.0f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(y, y2), p, y);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 big =
      _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(exp8(_mm256_add_ps(y, y)), one)));
  // |y| < 0.25 (false for NaN, which then comes through big as NaN).
  const __m256 ay = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), y);
  const __m256 near0 = _mm256_cmp_ps(ay, _mm256_set1_ps(0.25f), _CMP_LT_OQ);
  return _mm256_blendv_ps(big, small, near0);
}

/// Lane mask (all bits set in lanes [0, min(left, 8))) for _mm256_maskload_ps / maskstore.
static inline __m256i tail_mask8(long long left) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const int l = left >= 8 ? 8 : static_cast<int>(left);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(l), idx);
}

/// Sum of the 8 lanes by a fixed tree: (low + high halves), then pairs, then the last two.
static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

} // namespace k3::simd256
