// AVX2 SiLU-GLU and SiTU-GLU on fast_math_avx2.hpp: the AVX-512 forms eight lanes at a time,
// for CPUs without AVX-512. GCC keeps the scalar loops scalar (-ftrapping-math blocks
// if-converting their selects). Lanes may differ from the scalar path in the last bits (tests:
// ≤ 1e-6 relative, every path within 1e-5 of fp64).
//
// Only functions between push_options/pop_options are compiled for AVX2.
#include "kernels/ops/activations.hpp"

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "kernels/common/fast_math_avx2.hpp"

namespace k3::ops::detail {

using simd256::sigmoid8;
using simd256::tail_mask8;
using simd256::tanh8;

void silu_glu_avx2(const float* gate, const float* up, std::int64_t n, float* out) noexcept {
  for (std::int64_t i = 0; i < n; i += 8) {
    const bool full = n - i >= 8;
    const __m256i k = tail_mask8(n - i);
    const __m256 a = full ? _mm256_loadu_ps(gate + i) : _mm256_maskload_ps(gate + i, k);
    const __m256 b = full ? _mm256_loadu_ps(up + i) : _mm256_maskload_ps(up + i, k);
    const __m256 r = _mm256_mul_ps(_mm256_mul_ps(a, sigmoid8(a)), b);
    if (full) _mm256_storeu_ps(out + i, r);
    else _mm256_maskstore_ps(out + i, k, r);
  }
}

void situ_glu_avx2(const float* gate, const float* up, std::int64_t n, const situ_params& p, float* out) noexcept {
  const __m256 beta = _mm256_set1_ps(p.beta), ib = _mm256_set1_ps(1.0f / p.beta);
  const bool lin = p.linear_beta > 0.0f;
  const __m256 lb = _mm256_set1_ps(p.linear_beta), ilb = _mm256_set1_ps(lin ? 1.0f / p.linear_beta : 0.0f);
  for (std::int64_t i = 0; i < n; i += 8) {
    const bool full = n - i >= 8;
    const __m256i k = tail_mask8(n - i);
    const __m256 a = full ? _mm256_loadu_ps(gate + i) : _mm256_maskload_ps(gate + i, k);
    const __m256 b = full ? _mm256_loadu_ps(up + i) : _mm256_maskload_ps(up + i, k);
    const __m256 g = _mm256_mul_ps(_mm256_mul_ps(beta, tanh8(_mm256_mul_ps(a, ib))), sigmoid8(a));
    const __m256 u = lin ? _mm256_mul_ps(lb, tanh8(_mm256_mul_ps(b, ilb))) : b;
    const __m256 r = _mm256_mul_ps(g, u);
    if (full) _mm256_storeu_ps(out + i, r);
    else _mm256_maskstore_ps(out + i, k, r);
  }
}

} // namespace k3::ops::detail

#pragma GCC pop_options
