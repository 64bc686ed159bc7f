// AVX-512 SiLU-GLU and SiTU-GLU on fast_math_avx512.hpp (fast_math.hpp's formulas sixteen lanes
// at a time). GCC keeps the scalar loops scalar (-ftrapping-math blocks if-converting their
// selects), and the activation was ~8 % of a bench3 prefill step. Lanes may differ from the
// scalar path in the last bits (tests: ≤ 1e-6 relative, both within 1e-5 of fp64).
//
// Only functions between push_options/pop_options are compiled for AVX-512.
#include "kernels/ops/activations.hpp"

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,fma")

#include "kernels/common/fast_math_avx512.hpp"

namespace k3::ops::detail {

using simd512::sigmoid16;
using simd512::tanh16;
using simd512::tail_mask16;

void silu_glu_avx512(const float* gate, const float* up, std::int64_t n, float* out) noexcept {
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask16(n - i);
    const __m512 a = _mm512_maskz_loadu_ps(k, gate + i), b = _mm512_maskz_loadu_ps(k, up + i);
    _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(_mm512_mul_ps(a, sigmoid16(a)), b));
  }
}

void situ_glu_avx512(const float* gate, const float* up, std::int64_t n, const situ_params& p, float* out) noexcept {
  const __m512 beta = _mm512_set1_ps(p.beta), ib = _mm512_set1_ps(1.0f / p.beta);
  const bool lin = p.linear_beta > 0.0f;
  const __m512 lb = _mm512_set1_ps(p.linear_beta), ilb = _mm512_set1_ps(lin ? 1.0f / p.linear_beta : 0.0f);
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask16(n - i);
    const __m512 a = _mm512_maskz_loadu_ps(k, gate + i), b = _mm512_maskz_loadu_ps(k, up + i);
    const __m512 g = _mm512_mul_ps(_mm512_mul_ps(beta, tanh16(_mm512_mul_ps(a, ib))), sigmoid16(a));
    const __m512 u = lin ? _mm512_mul_ps(lb, tanh16(_mm512_mul_ps(b, ilb))) : b;
    _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(g, u));
  }
}

} // namespace k3::ops::detail

#pragma GCC pop_options
