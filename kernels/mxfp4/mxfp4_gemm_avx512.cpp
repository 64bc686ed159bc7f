// AVX-512 MXFP4 GEMM.
//
// Decode: 16 packed bytes (32 weights) are zero-extended to 16 int32 lanes; vpermps with the
// 16-entry E2M1 table indexes by the low 4 bits, so the low nibbles (even columns) need no mask
// and the high nibbles (odd columns) one shift. Activations are de-interleaved once per token
// tile into even/odd halves so that each decoded vector meets its activations lane by lane.
// The block scale is applied per 32-element block (folded into the weights when several
// tokens share them, into the partial sum for one token). Rows go in groups so several
// independent accumulator chains hide FMA latency.
//
// Only functions defined between push_options/pop_options are compiled for AVX-512; buffer
// management stays in default-target code so no std:: template is instantiated for AVX-512.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/mxfp4/mxfp4_gemm.hpp"

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")

namespace k3::mxfp4::detail {
namespace {

// Splits tg token rows into even/odd column halves: out[t*2*half + j] = x[2j],
// out[t*2*half + half + j] = x[2j+1].
void deinterleave512(const float* x, std::int64_t ldx, int tg, std::int64_t cols, float* out) {
  const std::int64_t half = cols / 2;
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int t = 0; t < tg; ++t) {
    const float* xt = x + t * ldx;
    float* e = out + t * 2 * half;
    float* o = e + half;
    for (std::int64_t j = 0; j < half; j += 16) { // cols % 32 == 0 => half % 16 == 0
      const __m512 a = _mm512_loadu_ps(xt + 2 * j);
      const __m512 b = _mm512_loadu_ps(xt + 2 * j + 16);
      _mm512_storeu_ps(e + j, _mm512_permutex2var_ps(a, ev, b));
      _mm512_storeu_ps(o + j, _mm512_permutex2var_ps(a, od, b));
    }
  }
}

// E8M0 bytes -> fp32 scales (exact, incl. 0x00 -> 2^-127 and 0xFF -> NaN).
void scales512(const std::uint8_t* s, std::int64_t nb, float* out) {
  for (std::int64_t b = 0; b < nb; b += 16) {
    const __mmask16 k = nb - b >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (nb - b)) - 1);
    const __m512i e = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, s + b));
    __m512i bits = _mm512_slli_epi32(e, 23);
    bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()),
                                 _mm512_set1_epi32(0x00400000));
    bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(0xFF)),
                                 _mm512_set1_epi32(0x7fc00000));
    _mm512_mask_storeu_ps(out + b, k, _mm512_castsi512_ps(bits));
  }
}

// R rows x TG tokens. xs: de-interleaved tokens (stride 2*half); sc: R rows of nb scales.
template <int R, int TG>
void micro512(const std::uint8_t* packed, std::int64_t row_bytes, const float* sc, std::int64_t nb,
              const float* xs, std::int64_t half, float* y, std::int64_t ldy) {
  const __m512 lut = _mm512_loadu_ps(e2m1_values);
  __m512 acc[R][TG];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TG; ++t) acc[r][t] = _mm512_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    for (int r = 0; r < R; ++r) {
      const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(
          reinterpret_cast<const __m128i*>(packed + r * row_bytes + b * 16)));
      __m512 we = _mm512_permutexvar_ps(q, lut);
      __m512 wo = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), lut);
      const __m512 s = _mm512_set1_ps(sc[r * nb + b]);
      if constexpr (TG == 1) {
        __m512 p = _mm512_mul_ps(we, _mm512_loadu_ps(xs + b * 16));
        p = _mm512_fmadd_ps(wo, _mm512_loadu_ps(xs + half + b * 16), p);
        acc[r][0] = _mm512_fmadd_ps(p, s, acc[r][0]);
      } else {
        we = _mm512_mul_ps(we, s); // exact: power-of-two scale
        wo = _mm512_mul_ps(wo, s);
        for (int t = 0; t < TG; ++t) {
          const float* xt = xs + t * 2 * half;
          acc[r][t] = _mm512_fmadd_ps(we, _mm512_loadu_ps(xt + b * 16), acc[r][t]);
          acc[r][t] = _mm512_fmadd_ps(wo, _mm512_loadu_ps(xt + half + b * 16), acc[r][t]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TG; ++t) y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
}

template <int TG>
void rows512(const matrix_view& w, std::int64_t r0, std::int64_t r1, const float* xs, float* sc, float* y,
             std::int64_t ldy) {
  constexpr int R = TG <= 4 ? 4 : 2;
  const std::int64_t nb = w.cols / block_size, rb = w.cols / 2, half = w.cols / 2;
  std::int64_t r = r0;
  for (; r + R <= r1; r += R) {
    for (int i = 0; i < R; ++i) scales512(w.scales + (r + i) * nb, nb, sc + i * nb);
    micro512<R, TG>(w.packed + r * rb, rb, sc, nb, xs, half, y + r, ldy);
  }
  for (; r < r1; ++r) {
    scales512(w.scales + r * nb, nb, sc);
    micro512<1, TG>(w.packed + r * rb, rb, sc, nb, xs, half, y + r, ldy);
  }
}

void tile512(const float* x, std::int64_t ldx, int tg, const matrix_view& w, std::int64_t r0, std::int64_t r1,
             float* y, std::int64_t ldy, float* xs, float* sc) {
  deinterleave512(x, ldx, tg, w.cols, xs);
  switch (tg) {
    case 1: rows512<1>(w, r0, r1, xs, sc, y, ldy); break;
    case 2: rows512<2>(w, r0, r1, xs, sc, y, ldy); break;
    case 3: rows512<3>(w, r0, r1, xs, sc, y, ldy); break;
    case 4: rows512<4>(w, r0, r1, xs, sc, y, ldy); break;
    case 5: rows512<5>(w, r0, r1, xs, sc, y, ldy); break;
    case 6: rows512<6>(w, r0, r1, xs, sc, y, ldy); break;
    case 7: rows512<7>(w, r0, r1, xs, sc, y, ldy); break;
    default: rows512<8>(w, r0, r1, xs, sc, y, ldy); break;
  }
}

} // namespace
} // namespace k3::mxfp4::detail

#pragma GCC pop_options

namespace k3::mxfp4::detail {

void gemm_rows_avx512(const float* x, std::int64_t ldx, std::int64_t m, const matrix_view& w, std::int64_t r0,
                      std::int64_t r1, float* y, std::int64_t ldy) {
  constexpr int max_tg = 8;
  thread_local std::vector<float> xs, sc;
  xs.resize(static_cast<std::size_t>(max_tg * w.cols));
  sc.resize(static_cast<std::size_t>(4 * (w.cols / block_size) + 16));
  for (std::int64_t t0 = 0; t0 < m; t0 += max_tg) {
    const int tg = static_cast<int>(std::min<std::int64_t>(max_tg, m - t0));
    tile512(x + t0 * ldx, ldx, tg, w, r0, r1, y + t0 * ldy, ldy, xs.data(), sc.data());
  }
}

} // namespace k3::mxfp4::detail
