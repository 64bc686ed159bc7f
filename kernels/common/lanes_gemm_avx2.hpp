#pragma once
// lanes_gemm_avx512.hpp's "tokens in the lanes" batch GEMM for AVX2: a tile of up to 8·V tokens
// transposed to xt[position][8·V], weight rows turned into fp32 chunk by chunk (wt[R][lanes_chunk],
// L1-resident; the caller's fill decodes or widens), and every weight broadcast into V FMAs with
// the R·V accumulators in registers over all positions. Bands are sized for 16 ymm registers:
// R·V accumulators + V activation vectors + 1 broadcast. Each (token, row) sum runs over the
// positions in order, one FMA per step, whatever the other tokens of the tile and the band.
//
// Include only inside an AVX2 target region (after <immintrin.h>); internal linkage.

#include <cstdint>

namespace k3::simd256 {

/// Positions per chunk (the row stride of wt): 256 floats, 1 KiB per row.
inline constexpr std::int64_t lanes_chunk = 256;

// acc[i][v] += Σ_p wt[i][p] · xt[p][v] over p in [0, n), in order.
template <int R, int V>
static inline void lanes_micro(const float* wt, std::int64_t n, const float* xt, __m256* acc) {
  __m256 a[R][V];
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < V; ++v) a[i][v] = acc[i * V + v];
  for (std::int64_t p = 0; p < n; ++p) {
    __m256 xv[V];
    for (int v = 0; v < V; ++v) xv[v] = _mm256_load_ps(xt + (p * V + v) * 8);
    for (int i = 0; i < R; ++i) {
      const __m256 wv = _mm256_broadcast_ss(wt + i * lanes_chunk + p);
      for (int v = 0; v < V; ++v) a[i][v] = _mm256_fmadd_ps(wv, xv[v], a[i][v]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < V; ++v) acc[i * V + v] = a[i][v];
}

/// Rows [r, r + R) of one tile over positions [0, len): fill(r, p0, n, wt) writes
/// wt[R][lanes_chunk] for positions [p0, p0 + n); sums of tokens t < tg go to y[t·ldy + r + i].
template <int R, int V, class Fill>
static inline void lanes_band(Fill& fill, std::int64_t r, std::int64_t len, const float* xt, int tg, float* wt,
                              float* y, std::int64_t ldy) {
  __m256 acc[R * V];
  for (int i = 0; i < R * V; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t p0 = 0; p0 < len; p0 += lanes_chunk) {
    const std::int64_t n = len - p0 < lanes_chunk ? len - p0 : lanes_chunk;
    fill.template operator()<R>(r, p0, n, wt);
    lanes_micro<R, V>(wt, n, xt + p0 * 8 * V, acc);
  }
  alignas(32) float lanes[8 * V];
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < V; ++v) _mm256_store_ps(lanes + 8 * v, acc[i * V + v]);
    for (int t = 0; t < tg; ++t) y[t * ldy + r + i] = lanes[t];
  }
}

/// Rows [r0, r1) in bands of 12 (V = 1) or 5 (V = 2), the rest in bands of 4, then 2, 1. Bands
/// of 6 at V = 2 (15 registers on paper) spilled: MXFP4 at 16 tokens ran 76 GFLOP/s against 145
/// with bands of 5 (2 vCPU Zen 3).
template <int V, class Fill>
static inline void lanes_rows(Fill& fill, std::int64_t r0, std::int64_t r1, std::int64_t len, const float* xt, int tg,
                              float* wt, float* y, std::int64_t ldy) {
  constexpr int RB = V == 1 ? 12 : 5;
  std::int64_t r = r0;
  for (; r + RB <= r1; r += RB) lanes_band<RB, V>(fill, r, len, xt, tg, wt, y, ldy);
  for (; r + 4 <= r1; r += 4) lanes_band<4, V>(fill, r, len, xt, tg, wt, y, ldy);
  if (r + 2 <= r1) { lanes_band<2, V>(fill, r, len, xt, tg, wt, y, ldy); r += 2; }
  if (r < r1) lanes_band<1, V>(fill, r, len, xt, tg, wt, y, ldy);
}

} // namespace k3::simd256
