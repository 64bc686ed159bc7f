// AVX-512 bf16-weight GEMM for batches (7–64 tokens, fp32 activations): the tokens in the
// lanes. A tile of up to 16·V tokens is transposed once by the caller into xt[k][16·V]; a band
// of weight rows is widened chunk by chunk (256 columns) into fp32 (wt, L1-resident) and every
// weight is broadcast into V FMAs, one per 16-token vector, the accumulators in registers over
// the whole of k. Each (token, row) sum runs over k in order with one FMA per step, so a
// token's result depends neither on the other tokens of the tile nor on the row band. The
// GEMV (lane per column) loads the activations again for every 4-row block from L2; at 16
// tokens it reached ~0.35 of the FMA peak. Same scheme as the MXFP4 batch kernel
// (mxfp4_gemm_avx512.cpp) with a bf16 widening (zero-extend, shift) in place of the lookup.
//
// Only functions between push_options/pop_options are compiled for AVX-512.
#include "kernels/dense/dense_gemm.hpp"

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")

namespace k3::dense::detail {
namespace {

constexpr std::int64_t chunk = bcast_chunk; // columns widened per step

// Rows [r, r + R) × columns [k0, k0 + n) → wt[R][chunk] (fp32).
template <int R>
void widen_band(const bf16_t* w, std::int64_t k, std::int64_t r, std::int64_t k0, std::int64_t n, float* wt) {
  for (int i = 0; i < R; ++i) {
    const bf16_t* src = w + (r + i) * k + k0;
    float* dst = wt + i * chunk;
    // Rows are read in runs of chunk · 2 bytes, then the next row: prefetch this row's next run.
    for (std::int64_t j = 0; j < chunk; j += 32) _mm_prefetch(reinterpret_cast<const char*>(src + chunk + j), _MM_HINT_T0);
    for (std::int64_t j = 0; j < n; j += 16) {
      const __mmask16 m = n - j >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - j)) - 1);
      const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + j));
      _mm512_store_ps(dst + j, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
    }
  }
}

// acc[i][v] += Σ_p wt[i][p] · xt[p][v] over p in [0, n), in order.
template <int R, int V>
void micro(const float* wt, std::int64_t n, const float* xt, __m512* acc) {
  __m512 a[R][V];
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < V; ++v) a[i][v] = acc[i * V + v];
  for (std::int64_t p = 0; p < n; ++p) {
    __m512 xv[V];
    for (int v = 0; v < V; ++v) xv[v] = _mm512_load_ps(xt + (p * V + v) * 16);
    for (int i = 0; i < R; ++i) {
      const __m512 wv = _mm512_set1_ps(wt[i * chunk + p]);
      for (int v = 0; v < V; ++v) a[i][v] = _mm512_fmadd_ps(wv, xv[v], a[i][v]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < V; ++v) acc[i * V + v] = a[i][v];
}

template <int R, int V>
void band(const bf16_t* w, std::int64_t k, std::int64_t r, const float* xt, int tg, float* wt, float* y,
          std::int64_t ldy) {
  __m512 acc[R * V];
  for (int i = 0; i < R * V; ++i) acc[i] = _mm512_setzero_ps();
  for (std::int64_t k0 = 0; k0 < k; k0 += chunk) {
    const std::int64_t n = k - k0 < chunk ? k - k0 : chunk;
    widen_band<R>(w, k, r, k0, n, wt);
    micro<R, V>(wt, n, xt + k0 * 16 * V, acc);
  }
  alignas(64) float lanes[16 * V];
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < V; ++v) _mm512_store_ps(lanes + 16 * v, acc[i * V + v]);
    for (int t = 0; t < tg; ++t) y[t * ldy + r + i] = lanes[t];
  }
}

template <int V>
void rows(const float* xt, int tg, const bf16_t* w, std::int64_t k, std::int64_t r0, std::int64_t r1, float* y,
          std::int64_t ldy, float* wt) {
  constexpr int RB = V == 1 ? 16 : 12; // 16 or 24 accumulators
  std::int64_t r = r0;
  for (; r + RB <= r1; r += RB) band<RB, V>(w, k, r, xt, tg, wt, y, ldy);
  if (r + 8 <= r1) { band<8, V>(w, k, r, xt, tg, wt, y, ldy); r += 8; }
  if (r + 4 <= r1) { band<4, V>(w, k, r, xt, tg, wt, y, ldy); r += 4; }
  if (r + 2 <= r1) { band<2, V>(w, k, r, xt, tg, wt, y, ldy); r += 2; }
  if (r < r1) band<1, V>(w, k, r, xt, tg, wt, y, ldy);
}

} // namespace

void gemm_bf16_tile_avx512(const float* xt, int vectors, int tg, const bf16_t* w, std::int64_t k, std::int64_t r0,
                           std::int64_t r1, float* y, std::int64_t ldy, float* wt) {
  if (vectors == 1) rows<1>(xt, tg, w, k, r0, r1, y, ldy, wt);
  else rows<2>(xt, tg, w, k, r0, r1, y, ldy, wt);
}

} // namespace k3::dense::detail

#pragma GCC pop_options
