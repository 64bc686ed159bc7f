// AVX-512 short convolution + SiLU over a channel range: sixteen channels per vector, the time
// loop inside, so each step loads one contiguous 64-byte row slice of x (the scalar form walks
// a channel down the time axis, one strided element per step, and calls libm exp). The window
// of the last K − 1 inputs stays in registers; y may alias x (x[t, c..c+16) is read before
// y[t, c..c+16) is written). The sum is Σ_j w[c, j] · window[j] in j order with FMAs and SiLU
// is s / (1 + e^{−s}) on the vector exponential, so a channel's outputs are the same bits
// however the tokens are split across calls (the carried state is exact).
//
// Only functions between push_options/pop_options are compiled for AVX-512.
#include "kernels/kda/kda.hpp"

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,fma")

#include "kernels/common/fast_math_avx512.hpp"

namespace k3::kda::detail {
namespace {

template <int K>
void conv_vector(const float* x, std::int64_t T, std::int64_t C, const float* w, float* state, float* y,
                 std::int64_t c, __mmask16 m) {
  constexpr int KM = K, kk = K;
  alignas(64) float tmp[KM * 16];
  // Weights and carried window, transposed to [j][16 channels].
  for (int j = 0; j < kk; ++j)
    for (int l = 0; l < 16; ++l) tmp[j * 16 + l] = (m >> l) & 1 ? w[(c + l) * kk + j] : 0.0f;
  __m512 wv[KM], win[KM];
  for (int j = 0; j < kk; ++j) wv[j] = _mm512_load_ps(tmp + j * 16);
  for (int j = 0; j + 1 < kk; ++j)
    for (int l = 0; l < 16; ++l) tmp[j * 16 + l] = (m >> l) & 1 ? state[(c + l) * (kk - 1) + j] : 0.0f;
  for (int j = 0; j + 1 < kk; ++j) win[j] = _mm512_load_ps(tmp + j * 16);
  const __m512 one = _mm512_set1_ps(1.0f);
  for (std::int64_t t = 0; t < T; ++t) {
    win[kk - 1] = _mm512_maskz_loadu_ps(m, x + t * C + c);
    __m512 s = _mm512_mul_ps(wv[0], win[0]);
    for (int j = 1; j < kk; ++j) s = _mm512_fmadd_ps(wv[j], win[j], s);
    for (int j = 0; j + 1 < kk; ++j) win[j] = win[j + 1];
    const __m512 e = simd512::exp16(_mm512_sub_ps(_mm512_setzero_ps(), s));
    _mm512_mask_storeu_ps(y + t * C + c, m, _mm512_div_ps(s, _mm512_add_ps(one, e)));
  }
  for (int j = 0; j + 1 < kk; ++j) _mm512_store_ps(tmp + j * 16, win[j]);
  for (int j = 0; j + 1 < kk; ++j)
    for (int l = 0; l < 16; ++l)
      if ((m >> l) & 1) state[(c + l) * (kk - 1) + j] = tmp[j * 16 + l];
}

} // namespace

void short_conv_avx512(const float* x, std::int64_t T, std::int64_t C, const float* w, int K, float* state, float* y,
                       std::int64_t c0, std::int64_t c1) {
  for (std::int64_t c = c0; c < c1; c += 16) {
    const __mmask16 m = simd512::tail_mask16(c1 - c);
    switch (K) { // a compile-time window keeps it in registers (short_conv checked 1 ≤ K ≤ 16)
#define K3_CONV_CASE(k) \
  case k: conv_vector<k>(x, T, C, w, state, y, c, m); break;
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
