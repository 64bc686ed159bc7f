// AVX2+FMA bf16 GEMV (fp32 activations): 4 rows × up to 2 tokens per micro-kernel, eight
// columns per step. bf16 → fp32 is a zero-extend and a 16-bit shift, so each weight is widened
// once per pass and shared by the pass's tokens; 8 accumulators, the tokens' activations and
// one widened vector fit the 16 ymm registers. Rows outer (4-row blocks), token pairs inner: a
// block is read from DRAM once and re-read from L1/L2 for the other pairs. Each (token, row) sum
// runs over k in lane order and is reduced by a fixed tree, so a token's result does not depend
// on its batch. (The compiler-vectorised generic loop this replaces went row by row and token by
// token, re-widening every weight per token, with one dependent FMA chain per 8 lanes.)
#include <algorithm>

#include "kernels/dense/dense_gemm.hpp"
#include "kernels/dense/gemv_prefetch.hpp"

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "kernels/common/fast_math_avx2.hpp"

namespace k3::dense::detail {
namespace {

using simd256::hsum8;

inline __m256 widen8(const bf16_t* p) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

template <int R, int TG, bool S>
void micro(const float* x, std::int64_t ldx, const bf16_t* w, std::int64_t rs, std::int64_t k, float* y,
           std::int64_t ys, std::int64_t ldy) {
  __m256 acc[R][TG];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TG; ++t) acc[r][t] = _mm256_setzero_ps();
  [[maybe_unused]] block_prefetch pf(w, R, k);
  std::int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    __m256 xv[TG];
    for (int t = 0; t < TG; ++t) xv[t] = _mm256_loadu_ps(x + t * ldx + i);
    if (i % 32 == 0)
      for (int r = 0; r < R; ++r) {
        if constexpr (S) stream_prefetch(w + r * rs + i);
        else pf.line();
      }
    for (int r = 0; r < R; ++r) {
      const __m256 wv = widen8(w + r * rs + i);
      for (int t = 0; t < TG; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  if (i < k) { // the last k % 8 columns, zero-padded
    const int left = static_cast<int>(k - i);
    const __m256i m = simd256::tail_mask8(left);
    for (int r = 0; r < R; ++r) {
      alignas(16) bf16_t tail[8] = {};
      std::copy_n(w + r * rs + i, left, tail);
      const __m256 wv = widen8(tail);
      for (int t = 0; t < TG; ++t) acc[r][t] = _mm256_fmadd_ps(wv, _mm256_maskload_ps(x + t * ldx + i, m), acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TG; ++t) y[t * ldy + r * ys] = hsum8(acc[r][t]);
}

template <int R, bool S>
void tokens(const float* x, std::int64_t ldx, std::int64_t m, const bf16_t* w, std::int64_t rs, std::int64_t k, float* y,
            std::int64_t ys, std::int64_t ldy) {
  std::int64_t t0 = 0;
  for (; t0 + 2 <= m; t0 += 2) micro<R, 2, S>(x + t0 * ldx, ldx, w, rs, k, y + t0 * ldy, ys, ldy);
  if (t0 < m) micro<R, 1, S>(x + t0 * ldx, ldx, w, rs, k, y + t0 * ldy, ys, ldy);
}

} // namespace

void gemv_bf16_rows_avx2(const float* x, std::int64_t ldx, std::int64_t m, const bf16_t* w, std::int64_t k,
                         std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy) {
  // Row order as the AVX-512 kernels (gemv_blocking.inc, gemv_prefetch.hpp): quarters for rows
  // of 256 bytes and more, else 4-row blocks; each row's sum the same either way.
  std::int64_t r = n0;
  if (k * static_cast<std::int64_t>(sizeof(bf16_t)) >= stream_min_row_bytes && n1 - n0 >= 8) {
    const std::int64_t q = (n1 - n0) / 4;
    for (std::int64_t j = 0; j < q; ++j) tokens<4, true>(x, ldx, m, w + (n0 + j) * k, q * k, k, y + n0 + j, q, ldy);
    for (r = n0 + 4 * q; r < n1; ++r) tokens<1, true>(x, ldx, m, w + r * k, k, k, y + r, 1, ldy);
    return;
  }
  for (; r + 4 <= n1; r += 4) tokens<4, false>(x, ldx, m, w + r * k, k, k, y + r, 1, ldy);
  for (; r < n1; ++r) tokens<1, false>(x, ldx, m, w + r * k, k, k, y + r, 1, ldy);
}

} // namespace k3::dense::detail

#pragma GCC pop_options
