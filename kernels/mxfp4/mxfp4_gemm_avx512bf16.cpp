// AVX512-BF16 MXFP4 GEMM: activations rounded to bf16 once per token tile, weights decoded
// straight to bf16, products summed in fp32 by vdpbf16ps (32 multiply-adds per instruction,
// twice an fp32 FMA's).
//
// The model's opt-in bf16 activations (activations::bf16) on CPUs with AVX512-BF16, for every
// token count, so that a token's result never depends on its batch; see mxfp4_gemm.cpp.
// Against the fp32 kernel on a Zen 5 (K3 expert shapes, 2 threads): grouped M = 16 1.6–1.8×,
// M = 1 about equal (README: the Xeon figures, taken before the passes of 4 below).
//
// Decode: two 16-byte blocks (64 weights) are zero-extended to 32 words; the low nibble of word
// i is column 2i of the span and the high nibble column 2i+1. vpermw over a 32-entry table —
// the two blocks' pre-scaled 16-entry bf16 tables side by side (E2M1 · 2^(e−127) is exact in
// bf16) — turns nibbles into final weights, the high block's lanes offset by 16. The activations
// of a span are stored in the same lane order (even columns, then odd columns), so each
// vdpbf16ps pairs weights and activations lane by lane; which two products it adds first does
// not matter for the result's definition (fp32 accumulation per token and row, in span order,
// independent of how many tokens or rows share the call).
//
// Only functions between push_options/pop_options are compiled for AVX512-BF16.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/common/bf16.hpp"
#include "kernels/mxfp4/mxfp4_gemm.hpp"
#include "kernels/mxfp4/prefetch_chain.hpp"

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")

namespace k3::mxfp4::detail {
namespace {

// R rows × TG tokens over every 64-column span. xb: [TG][spans][64] bf16 (32 even, 32 odd).
// Prefetch: whether this pass prefetches (only the first token pass of a row group does; the
// others find the rows in L1).
template <int R, int TG, bool Prefetch>
void micro_bf16(const std::uint8_t* packed, const std::uint8_t* scales, std::int64_t row_bytes, std::int64_t nb,
                const std::uint16_t* luts, const std::uint16_t* xb, std::int64_t spans, float* y, std::int64_t ldy, int tokens,
                const std::uint8_t* pf_packed, const std::uint8_t* pf_scales) {
  const __m512i off = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(16), 1);
  const __m512i low4 = _mm512_set1_epi16(0x0F);
  __m512 acc[R][TG];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TG; ++t) acc[r][t] = _mm512_setzero_ps();
  // The group's scale bytes a prefetch distance ahead, then the packed bytes as far ahead,
  // span by span as this group's are consumed (prefetch_chain).
  if constexpr (Prefetch)
    for (std::int64_t o = 0; o < R * nb; o += 64) _mm_prefetch(reinterpret_cast<const char*>(pf_scales + o), _MM_HINT_T0);
  for (std::int64_t s = 0; s < spans; ++s) {
    // Every line of the R·32 bytes this span consumes (one prefetch per span left half of
    // them to the hardware at R = 4: 0.6–0.77 of streaming at M = 1 instead of 0.8–0.94).
    if constexpr (Prefetch)
      for (int o = 0; o < 32 * R; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(pf_packed + s * 32 * R + o), _MM_HINT_T0);
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* p = packed + r * row_bytes + s * 32;
      const std::uint8_t* sc = scales + r * nb + 2 * s;
      const __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      const __m512i table = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(luts + 16 * sc[0]))),
          _mm256_load_si256(reinterpret_cast<const __m256i*>(luts + 16 * sc[1])), 1);
      const __m512i we = _mm512_permutexvar_epi16(_mm512_or_si512(_mm512_and_si512(w, low4), off), table);
      const __m512i wo = _mm512_permutexvar_epi16(_mm512_or_si512(_mm512_srli_epi16(w, 4), off), table);
      for (int t = 0; t < TG; ++t) {
        const std::uint16_t* xt = xb + (t * spans + s) * 64;
        acc[r][t] = _mm512_dpbf16_ps(acc[r][t], (__m512bh)we, (__m512bh)_mm512_loadu_si512(xt));
        acc[r][t] = _mm512_dpbf16_ps(acc[r][t], (__m512bh)wo, (__m512bh)_mm512_loadu_si512(xt + 32));
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TG && t < tokens; ++t) {
      y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
    }
}

// One pass: up to 4 tokens (padded to 1, 2 or 4) against R rows.
template <int R, bool Prefetch>
void pass_bf16(const std::uint8_t* packed, const std::uint8_t* scales, std::int64_t row_bytes, std::int64_t nb,
               const std::uint16_t* luts, const std::uint16_t* xb, std::int64_t spans, float* y, std::int64_t ldy, int tokens,
               const std::uint8_t* pf_packed, const std::uint8_t* pf_scales) {
  if (tokens <= 1) micro_bf16<R, 1, Prefetch>(packed, scales, row_bytes, nb, luts, xb, spans, y, ldy, tokens, pf_packed, pf_scales);
  else if (tokens <= 2) micro_bf16<R, 2, Prefetch>(packed, scales, row_bytes, nb, luts, xb, spans, y, ldy, tokens, pf_packed, pf_scales);
  else micro_bf16<R, 4, Prefetch>(packed, scales, row_bytes, nb, luts, xb, spans, y, ldy, tokens, pf_packed, pf_scales);
}

// One row group against the tile's tokens in passes of up to 4 (16 accumulators, 8 activation
// loads and 4 row decodes per 32 vdpbf16ps): the R rows are read from memory once, by the first
// pass (the one that prefetches), and from L1 by the others. A pass of 3 runs as 4 over a zero
// token.
template <int R>
void group_bf16(const std::uint8_t* packed, const std::uint8_t* scales, std::int64_t row_bytes, std::int64_t nb,
                const std::uint16_t* luts, const std::uint16_t* xb, std::int64_t spans, float* y, std::int64_t ldy, int tg,
                const std::uint8_t* pf_packed, const std::uint8_t* pf_scales) {
  pass_bf16<R, true>(packed, scales, row_bytes, nb, luts, xb, spans, y, ldy, std::min(tg, 4), pf_packed, pf_scales);
  for (int t0 = 4; t0 < tg; t0 += 4)
    pass_bf16<R, false>(packed, scales, row_bytes, nb, luts, xb + static_cast<std::int64_t>(t0) * spans * 64, spans,
                        y + static_cast<std::int64_t>(t0) * ldy, ldy, std::min(tg - t0, 4), pf_packed, pf_scales);
}

} // namespace

void tile_bf16(const std::uint16_t* xb, int tg, const matrix_view& w, std::int64_t r0, std::int64_t r1, float* y,
               std::int64_t ldy, const std::uint16_t* luts, const next_rows& next) {
  constexpr int R = 4;
  const std::int64_t nb = w.cols / block_size, rb = w.cols / 2, spans = w.cols / 64;
  const prefetch_chain pf(w, r1, R, next);
  std::int64_t r = r0;
  for (; r + R <= r1; r += R)
    group_bf16<R>(w.packed + r * rb, w.scales + r * nb, rb, nb, luts, xb, spans, y + r, ldy, tg, pf.packed(r), pf.scales(r));
  for (; r < r1; ++r)
    group_bf16<1>(w.packed + r * rb, w.scales + r * nb, rb, nb, luts, xb, spans, y + r, ldy, tg, pf.packed(r), pf.scales(r));
}

} // namespace k3::mxfp4::detail

#pragma GCC pop_options

namespace k3::mxfp4::detail {
namespace {

// 256 tables of 16 bf16 values: table e holds E2M1[c] · 2^(e−127), exact in bf16 (3 significant
// bits, fp32's exponent range); 8 KiB, 32-byte aligned rows for the aligned 256-bit loads.
const std::uint16_t* bf16_luts() {
  struct tables {
    alignas(64) std::uint16_t v[256 * 16];
    tables() {
      for (int e = 0; e < 256; ++e)
        for (int c = 0; c < 16; ++c) {
          const float f = decode(static_cast<std::uint8_t>(c), static_cast<std::uint8_t>(e));
          std::uint32_t b;
          std::memcpy(&b, &f, 4);
          v[e * 16 + c] = static_cast<std::uint16_t>(b >> 16); // exact: the low half is zero (NaN stays NaN)
        }
    }
  };
  static const tables t;
  return t.v;
}

} // namespace

void gemm_rows_avx512bf16(const float* x, std::int64_t ldx, std::int64_t m, const matrix_view& w, std::int64_t r0,
                          std::int64_t r1, float* y, std::int64_t ldy, const next_rows& next) {
  // Token tiles of up to 16 (the rows stream from memory once per tile), each row group then
  // decoded once per pass of 4 tokens (group_bf16). One pass of 16 tokens per row decoded each
  // row once per tile but loaded 32 activation vectors per 32 vdpbf16ps and ran at a third of
  // the speed on a Zen 5 (M = 16, K3 expert shapes: 156–201 vs 441–445 GFLOP/s).
  constexpr int max_tg = 16;
  const std::int64_t spans = w.cols / 64;
  thread_local std::vector<std::uint16_t> xb;
  xb.resize(static_cast<std::size_t>(max_tg * spans * 64));
  const std::uint16_t* luts = bf16_luts();
  for (std::int64_t t0 = 0; t0 < m; t0 += max_tg) {
    const int tg = static_cast<int>(std::min<std::int64_t>(max_tg, m - t0));
    const int padded = tg <= 2 ? tg : (tg + 3) / 4 * 4; // group_bf16's passes of 1, 2 or 4
    // Activations rounded to bf16 (nearest even) once per tile, in the weights' lane order;
    // padding tokens are zeros (their sums are never stored).
    for (int t = 0; t < padded; ++t)
      for (std::int64_t s = 0; s < spans; ++s) {
        std::uint16_t* dst = xb.data() + (static_cast<std::int64_t>(t) * spans + s) * 64;
        if (t >= tg) {
          std::fill(dst, dst + 64, std::uint16_t{0});
          continue;
        }
        const float* src = x + (t0 + t) * ldx + s * 64;
        for (int i = 0; i < 32; ++i) {
          dst[i] = f32_to_bf16(src[2 * i]);
          dst[32 + i] = f32_to_bf16(src[2 * i + 1]);
        }
      }
    tile_bf16(xb.data(), tg, w, r0, r1, y + t0 * ldy, ldy, luts, next);
  }
}

} // namespace k3::mxfp4::detail
