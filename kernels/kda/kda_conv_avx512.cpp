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

// K = 4 (the models' window) over 16 whole channels: the weights' and the carried window's
// channel-major rows ([c][4], [c][3]) turned into [j][16 channels] and back by register
// permutes. A decode token's call (16 sequences × 3 streams a layer) is little more than this
// transpose: element by element it took ~300 cycles per 16 channels, gathers were no faster.
struct window4 {
  alignas(64) std::int32_t w[4][16];                // into A|B (lanes 0-7) and C|D, per tap j
  alignas(64) std::int32_t in_lo[3][16], in_hi[3][16]; // state in: flat 3l + j from S0|S1, else S2
  alignas(64) std::int32_t out_ab[3][16], out_c[3][16]; // state out: flat 16q + i from win0|win1, else win2
  __mmask16 in_m[3] = {}, out_m[3] = {};
  window4() {
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 16; ++l) w[j][l] = (l % 8 < 4 ? 0 : 16) + 4 * (l % 4) + j;
    for (int j = 0; j < 3; ++j)
      for (int l = 0; l < 16; ++l) {
        const int f = 3 * l + j;
        in_lo[j][l] = f < 32 ? f : 0;
        in_hi[j][l] = f < 32 ? 0 : f - 32;
        if (f >= 32) in_m[j] = static_cast<__mmask16>(in_m[j] | 1u << l);
      }
    for (int q = 0; q < 3; ++q)
      for (int i = 0; i < 16; ++i) {
        const int f = 16 * q + i, l = f / 3, j = f % 3;
        out_ab[q][i] = j == 1 ? 16 + l : l;
        out_c[q][i] = l;
        if (j == 2) out_m[q] = static_cast<__mmask16>(out_m[q] | 1u << i);
      }
  }
};

const window4& tables4() {
  static const window4 t;
  return t;
}

template <int K>
void conv_vector(const float* x, std::int64_t T, std::int64_t C, const float* w, float* state, float* y,
                 std::int64_t c, __mmask16 m) {
  constexpr int KM = K, kk = K;
  alignas(64) float tmp[KM * 16];
  __m512 wv[KM], win[KM];
  // Weights and carried window, transposed to [j][16 channels].
  const bool fast = K == 4 && m == 0xFFFF;
  if constexpr (K == 4) {
    if (fast) {
      const window4& t = tables4();
      const float* wc = w + c * 4;
      const __m512 a = _mm512_loadu_ps(wc), b = _mm512_loadu_ps(wc + 16), cc = _mm512_loadu_ps(wc + 32),
                   d = _mm512_loadu_ps(wc + 48);
      for (int j = 0; j < 4; ++j) {
        const __m512i idx = _mm512_load_si512(t.w[j]);
        const __m512 ab = _mm512_permutex2var_ps(a, idx, b), cd = _mm512_permutex2var_ps(cc, idx, d);
        wv[j] = _mm512_insertf32x8(ab, _mm512_castps512_ps256(cd), 1);
      }
      const float* sc = state + c * 3;
      const __m512 s0 = _mm512_loadu_ps(sc), s1 = _mm512_loadu_ps(sc + 16), s2 = _mm512_loadu_ps(sc + 32);
      for (int j = 0; j < 3; ++j) {
        const __m512 lo = _mm512_permutex2var_ps(s0, _mm512_load_si512(t.in_lo[j]), s1);
        win[j] = _mm512_mask_permutexvar_ps(lo, t.in_m[j], _mm512_load_si512(t.in_hi[j]), s2);
      }
    }
  }
  if (!fast) {
    for (int j = 0; j < kk; ++j)
      for (int l = 0; l < 16; ++l) tmp[j * 16 + l] = (m >> l) & 1 ? w[(c + l) * kk + j] : 0.0f;
    for (int j = 0; j < kk; ++j) wv[j] = _mm512_load_ps(tmp + j * 16);
    for (int j = 0; j + 1 < kk; ++j)
      for (int l = 0; l < 16; ++l) tmp[j * 16 + l] = (m >> l) & 1 ? state[(c + l) * (kk - 1) + j] : 0.0f;
    for (int j = 0; j + 1 < kk; ++j) win[j] = _mm512_load_ps(tmp + j * 16);
  }
  const __m512 one = _mm512_set1_ps(1.0f);
  for (std::int64_t t = 0; t < T; ++t) {
    win[kk - 1] = _mm512_maskz_loadu_ps(m, x + t * C + c);
    __m512 s = _mm512_mul_ps(wv[0], win[0]);
    for (int j = 1; j < kk; ++j) s = _mm512_fmadd_ps(wv[j], win[j], s);
    for (int j = 0; j + 1 < kk; ++j) win[j] = win[j + 1];
    const __m512 e = simd512::exp16(_mm512_sub_ps(_mm512_setzero_ps(), s));
    _mm512_mask_storeu_ps(y + t * C + c, m, _mm512_div_ps(s, _mm512_add_ps(one, e)));
  }
  if constexpr (K == 4) {
    if (fast) {
      const window4& t = tables4();
      float* sc = state + c * 3;
      for (int q = 0; q < 3; ++q) {
        const __m512 ab = _mm512_permutex2var_ps(win[0], _mm512_load_si512(t.out_ab[q]), win[1]);
        _mm512_storeu_ps(sc + 16 * q, _mm512_mask_permutexvar_ps(ab, t.out_m[q], _mm512_load_si512(t.out_c[q]), win[2]));
      }
      return;
    }
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
