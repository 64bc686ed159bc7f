// AVX-512 SiLU-GLU and SiTU-GLU: the formulas of fast_math.hpp (Cody–Waite exp, the odd tanh
// polynomial below |y| = 0.25, 1 − 2/(e^{2y}+1) above) sixteen lanes at a time. GCC keeps the
// scalar loops scalar (-ftrapping-math blocks if-converting their selects), and the activation
// was ~8 % of a bench3 prefill step. Polynomials use FMA here, so lanes may differ from the
// scalar path in the last bits (tests: ≤ 1e-6 relative, both within 1e-5 of fp64). NaN in, NaN
// out: the clamps keep a NaN operand (vmaxps/vminps return their second source on NaN).
//
// Only functions between push_options/pop_options are compiled for AVX-512.
#include "kernels/ops/activations.hpp"

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,fma")

namespace k3::ops::detail {
namespace {

inline __m512 exp16(__m512 x) {
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

inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

inline __m512 tanh16(__m512 y) {
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

inline __mmask16 tail_mask(std::int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

} // namespace

void silu_glu_avx512(const float* gate, const float* up, std::int64_t n, float* out) noexcept {
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);
    const __m512 a = _mm512_maskz_loadu_ps(k, gate + i), b = _mm512_maskz_loadu_ps(k, up + i);
    _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(_mm512_mul_ps(a, sigmoid16(a)), b));
  }
}

void situ_glu_avx512(const float* gate, const float* up, std::int64_t n, const situ_params& p, float* out) noexcept {
  const __m512 beta = _mm512_set1_ps(p.beta), ib = _mm512_set1_ps(1.0f / p.beta);
  const bool lin = p.linear_beta > 0.0f;
  const __m512 lb = _mm512_set1_ps(p.linear_beta), ilb = _mm512_set1_ps(lin ? 1.0f / p.linear_beta : 0.0f);
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);
    const __m512 a = _mm512_maskz_loadu_ps(k, gate + i), b = _mm512_maskz_loadu_ps(k, up + i);
    const __m512 g = _mm512_mul_ps(_mm512_mul_ps(beta, tanh16(_mm512_mul_ps(a, ib))), sigmoid16(a));
    const __m512 u = lin ? _mm512_mul_ps(lb, tanh16(_mm512_mul_ps(b, ilb))) : b;
    _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(g, u));
  }
}

} // namespace k3::ops::detail

#pragma GCC pop_options
