#pragma once
// AVX-512 forms of fast_math.hpp's exp, sigmoid and tanh (the same Cody–Waite exponential and
// odd tanh polynomial, sixteen lanes at a time, FMA polynomials: lanes may differ from the
// scalar forms in the last bits). NaN in, NaN out: the clamps keep a NaN operand (vmaxps and
// vminps return their second source on NaN).
//
// Include only inside an AVX-512 target region (#pragma GCC target("avx512f,avx512dq,fma")
// after <immintrin.h>); everything here is internal-linkage inline.

namespace k3::simd512 {

static inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(88.7f), _mm512_max_ps(_mm512_set1_ps(-87.3f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f),
                                    _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x));
  __m512 p = _mm512_set1_ps(1.3888949e-3f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3333836e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1666668e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666667e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

/// 1 / (1 + e^{−x}).
static inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

static inline __m512 tanh16(__m512 y) {
  const __m512 y2 = _mm512_mul_ps(y, y);
  __m512 p = _mm512_set1_ps(62.0f / 2835.0f);
  p = _mm512_fmsub_ps(p, y2, _mm512_set1_ps(17.0f / 315.0f));
  p = _mm512_fmadd_ps(p, y2, _mm512_set1_ps(2.0f / 15.0f));
  p = _mm512_fmsub_ps(p, y2, _mm512_set1_ps(1.0f / 3.0f));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(y, y2), p, y);
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 big = _mm512_sub_ps(
      one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(exp16(_mm512_add_ps(y, y)), one)));
  // |y| < 0.25 (false for NaN, which then comes through big as NaN).
  const __mmask16 near0 = _mm512_cmp_ps_mask(_mm512_abs_ps(y), _mm512_set1_ps(0.25f), _CMP_LT_OQ);
  return _mm512_mask_blend_ps(near0, big, small);
}

/// Lanes [0, min(left, 16)) set.
static inline __mmask16 tail_mask16(long long left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

} // namespace k3::simd512
