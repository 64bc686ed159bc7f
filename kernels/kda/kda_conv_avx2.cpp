// AVX2 short convolution + SiLU over a channel range: kda_conv_avx512.cpp's order eight
// channels per vector (time loop inside, the window of the last K − 1 inputs in registers, one
// contiguous 32-byte row slice of x per step), for CPUs without AVX-512. y may alias x
// (x[t, c..c+8) is read before y[t, c..c+8) is written). The sum is Σ_j w[c, j] · window[j] in
// j order with FMAs and SiLU is s / (1 + e^{−s}) on the vector exponential, so a channel's
// outputs are the same bits however the tokens are split across calls.
//
// Only functions between push_options/pop_options are compiled for AVX2.
#include "kernels/kda/kda.hpp"

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "kernels/common/fast_math_avx2.hpp"

namespace k3::kda::detail {
namespace {

template <int K>
void conv_vector8(const float* x, std::int64_t T, std::int64_t C, const float* w, float* state, float* y,
                  std::int64_t c, int lanes) {
  alignas(32) float tmp[K * 8];
  // Weights and carried window, transposed to [j][8 channels] (zeros past the last channel).
  for (int j = 0; j < K; ++j)
    for (int l = 0; l < 8; ++l) tmp[j * 8 + l] = l < lanes ? w[(c + l) * K + j] : 0.0f;
  __m256 wv[K], win[K];
  for (int j = 0; j < K; ++j) wv[j] = _mm256_load_ps(tmp + j * 8);
  for (int j = 0; j + 1 < K; ++j)
    for (int l = 0; l < 8; ++l) tmp[j * 8 + l] = l < lanes ? state[(c + l) * (K - 1) + j] : 0.0f;
  for (int j = 0; j + 1 < K; ++j) win[j] = _mm256_load_ps(tmp + j * 8);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256i m = simd256::tail_mask8(lanes);
  const bool full = lanes == 8;
  for (std::int64_t t = 0; t < T; ++t) {
    win[K - 1] = full ? _mm256_loadu_ps(x + t * C + c) : _mm256_maskload_ps(x + t * C + c, m);
    __m256 s = _mm256_mul_ps(wv[0], win[0]);
    for (int j = 1; j < K; ++j) s = _mm256_fmadd_ps(wv[j], win[j], s);
    for (int j = 0; j + 1 < K; ++j) win[j] = win[j + 1];
    const __m256 e = simd256::exp8(_mm256_sub_ps(_mm256_setzero_ps(), s));
    const __m256 r = _mm256_div_ps(s, _mm256_add_ps(one, e));
    if (full) _mm256_storeu_ps(y + t * C + c, r);
    else _mm256_maskstore_ps(y + t * C + c, m, r);
  }
  for (int j = 0; j + 1 < K; ++j) _mm256_store_ps(tmp + j * 8, win[j]);
  for (int j = 0; j + 1 < K; ++j)
    for (int l = 0; l < lanes; ++l) state[(c + l) * (K - 1) + j] = tmp[j * 8 + l];
}

} // namespace

void short_conv_avx2(const float* x, std::int64_t T, std::int64_t C, const float* w, int K, float* state, float* y,
                     std::int64_t c0, std::int64_t c1) {
  for (std::int64_t c = c0; c < c1; c += 8) {
    const int lanes = c1 - c >= 8 ? 8 : static_cast<int>(c1 - c);
    switch (K) { // a compile-time window keeps it in registers (short_conv checked 1 ≤ K ≤ 16)
#define K3_CONV_CASE(k) \
  case k: conv_vector8<k>(x, T, C, w, state, y, c, lanes); break;
      K3_CONV_CASE(1) K3_CONV_CASE(2) K3_CONV_CASE(3) K3_CONV_CASE(4) K3_CONV_CASE(5) K3_CONV_CASE(6)
      K3_CONV_CASE(7) K3_CONV_CASE(8) K3_CONV_CASE(9) K3_CONV_CASE(10) K3_CONV_CASE(11) K3_CONV_CASE(12)
      K3_CONV_CASE(13) K3_CONV_CASE(14) K3_CONV_CASE(15) K3_CONV_CASE(16)
#undef K3_CONV_CASE
      default: break;
    }
  }
}

} // namespace k3::kda::detail

#pragma GCC pop_options
