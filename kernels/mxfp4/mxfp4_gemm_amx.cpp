// AMX MXFP4 expert GEMM (prefill: many tokens per expert). The tokens' activations arrive as
// bf16 tiles (dense::detail::split_bf16_rows: one rounded copy, or hi + mid + lo parts that
// carry fp32 activations exactly); the weights are decoded here, 32 rows × all columns at a
// time, straight into AMX tiles in bf16, then every 16- or 32-token band multiplies them.
//
// Decoding is exact: an E2M1 value (0, ±0.5 … ±6) is a bf16 with at most two mantissa bits, and
// its block's power-of-two scale only moves the exponent field (an integer add). That holds
// while the result stays a normal bf16, i.e. for scale exponents 2 ≤ e ≤ 252 (all real
// checkpoints); a row range with any other scale (tiny, huge, or the NaN code 255) is refused
// and the caller runs the fp32 kernel on it, so subnormals and NaN keep their exact meaning.
//
// Roles: the weights are the A operand (16 rows × 32 columns per tile, a row of a tile is one
// MXFP4 block of one row: 16 bytes, low nibble = even column, widened in order), so each row
// is decoded along its blocks with sequential reads and no transposes (reading 32 rows a block
// at a time stalled on memory). The activations are the B operand, in AMX's pair-interleaved
// layout (vnni_tiles), and an accumulator tile is 16 weight rows × 16 tokens, written to y
// transposed.
//
// Only the functions between push_options/pop_options are compiled for AMX.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/mxfp4/mxfp4_gemm.hpp"

#include <immintrin.h>

#include "kernels/common/amx_tiles.hpp"

namespace k3::mxfp4::detail {
namespace {

// bf16 bit patterns of the 16 E2M1 codes (sign in bit 3 of the code).
constexpr std::uint16_t e2m1_bf16[16] = {0x0000, 0x3f00, 0x3f80, 0x3fc0, 0x4000, 0x4040, 0x4080, 0x40c0,
                                         0x8000, 0xbf00, 0xbf80, 0xbfc0, 0xc000, 0xc040, 0xc080, 0xc0c0};

} // namespace

bool amx_scales_ok(const matrix_view& w, std::int64_t r0, std::int64_t r1) noexcept {
  const std::int64_t nb = w.cols / block_size;
  const std::uint8_t* s = w.scales + r0 * nb;
  std::uint8_t bad = 0;
  for (std::int64_t i = 0; i < (r1 - r0) * nb; ++i)
    bad |= static_cast<std::uint8_t>(s[i] < amx_min_scale || s[i] > amx_max_scale);
  return bad == 0;
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,amx-tile,amx-bf16")

namespace {

// Row r's blocks [0, nb) (16 bytes, 32 columns each) as 32 bf16 per block in column order, one
// A tile row per block (dst + 512 · b). adds[b]: (e − 127) · 128 in both 16-bit halves.
// Port 5 (shuffles) is the limit here, so the scale goes into the 16-entry table (one add on
// its nonzero entries, a fixed mask) rather than into the looked-up values (which would need a
// zero test per block), and the add arrives by a 32-bit broadcast load (no shuffle uop).
inline void decode_row(const std::uint8_t* packed, const std::int32_t* adds, std::int64_t nb, __m512i table,
                       bf16_t* dst) {
  constexpr __mmask32 nonzero_codes = 0xfefefefe; // entries 0 and 8 (±0) of each 16-entry half
  for (std::int64_t b = 0; b < nb; ++b) {
    const __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + 16 * b)));
    // Per 32-bit lane: low word = the byte (its low 5 bits index a table that repeats the 16
    // codes, so the high nibble's low bit is ignored), high word = the high nibble.
    const __m512i codes = _mm512_or_si512(d, _mm512_slli_epi32(d, 12));
    const __m512i scaled = _mm512_mask_add_epi16(table, nonzero_codes, table, _mm512_set1_epi32(adds[b]));
    _mm512_store_si512(dst + 512 * b, _mm512_permutexvar_epi16(codes, scaled));
  }
}

} // namespace

namespace {

// Accumulates 16 weight rows (one or two row tiles) × 16 tokens (one or two bands) over blocks
// [0, n): tiles 0/1 = row tile 0 × band 0/1, 2/3 = row tile 1 × band 0/1.
template <bool two_rows, bool two_bands>
inline void tile_loop(const bf16_t* a0, const bf16_t* a1, const bf16_t* b0, const bf16_t* b1, std::int64_t n,
                      int splits, std::int64_t split_stride) {
  for (std::int64_t c = 0; c < n; ++c) {
    _tile_loadd(4, a0 + c * 512, 64);
    if constexpr (two_rows) _tile_loadd(5, a1 + c * 512, 64);
    for (int s = 0; s < splits; ++s) {
      _tile_loadd(6, b0 + s * split_stride + c * 512, 64);
      if constexpr (two_bands) _tile_loadd(7, b1 + s * split_stride + c * 512, 64);
      _tile_dpbf16ps(0, 4, 6);
      if constexpr (two_bands) _tile_dpbf16ps(1, 4, 7);
      if constexpr (two_rows) _tile_dpbf16ps(2, 5, 6);
      if constexpr (two_rows && two_bands) _tile_dpbf16ps(3, 5, 7);
    }
  }
}

} // namespace

void gemm_rows_amx(const bf16_t* xs, int splits, std::int64_t split_stride, std::int64_t tokens, const matrix_view& w,
                   std::int64_t r0, std::int64_t r1, float* y, std::int64_t ldy, bf16_t* scratch, float* acc) {
  amx::configure_16x64();
  alignas(64) std::uint16_t tbl[32];
  for (int i = 0; i < 32; ++i) tbl[i] = e2m1_bf16[i % 16];
  const __m512i table = _mm512_load_si512(tbl);
  const std::int64_t nb = w.cols / block_size;
  const std::int64_t bands = (tokens + 15) / 16;
  alignas(64) float out[16 * 16];
  alignas(64) std::int32_t adds[amx_kblocks];
  // Accumulator tile (16 weight rows from rr × 16 tokens from t0) → y[t0 + t, rr + r].
  auto store = [&](std::int64_t rr, std::int64_t t0) {
    const std::int64_t nr = std::min<std::int64_t>(16, r1 - rr), nt = std::min<std::int64_t>(16, tokens - t0);
    for (std::int64_t r = 0; r < nr; ++r)
      for (std::int64_t t = 0; t < nt; ++t) y[(t0 + t) * ldy + rr + r] = out[16 * r + t];
  };
  for (std::int64_t rb = r0; rb < r1; rb += 32) {
    const bool two_rows = rb + 16 < r1;
    for (std::int64_t k0 = 0; k0 < nb; k0 += amx_kblocks) {
      const std::int64_t kn = std::min(amx_kblocks, nb - k0);
      // A tiles of rows [rb, rb + 32) × blocks [k0, k0 + kn): [row tile][block] of 16 rows ×
      // 32 columns (32 KiB at most, so they stay in L1); rows ≥ r1 are zeros.
      for (std::int64_t i = 0; i < 32; ++i) {
        bf16_t* dst = scratch + (i / 16) * amx_kblocks * 512 + (i % 16) * 32;
        if (rb + i >= r1) {
          for (std::int64_t b = 0; b < kn; ++b) _mm512_store_si512(dst + b * 512, _mm512_setzero_si512());
          continue;
        }
        const std::uint8_t* sc = w.scales + (rb + i) * nb + k0;
        for (std::int64_t b = 0; b < kn; ++b) {
          const auto a = static_cast<std::uint16_t>((sc[b] - 127) * 128);
          adds[b] = static_cast<std::int32_t>((std::uint32_t{a} << 16) | a);
        }
        const std::uint8_t* src = w.packed + (rb + i) * (w.cols / 2) + 16 * k0;
        // The next k-block of this row (reads advance 32 rows in step; prefetchers lose them).
        for (std::int64_t j = 0; j < 16 * kn; j += 64) _mm_prefetch(reinterpret_cast<const char*>(src + 16 * amx_kblocks + j), _MM_HINT_T0);
        decode_row(src, adds, kn, table, dst);
      }
      const bf16_t* a0 = scratch;
      const bf16_t* a1 = scratch + amx_kblocks * 512;
      const bool first = k0 == 0, last = k0 + kn == nb;
      for (std::int64_t band = 0; band < bands; band += 2) {
        const bf16_t* b0 = xs + band * nb * 512 + k0 * 512;
        const bf16_t* b1 = b0 + nb * 512;
        const bool two_bands = band + 1 < bands;
        float* c = acc + band / 2 * 1024; // this band pair's 4 tiles between k-blocks
        if (first) {
          _tile_zero(0);
          _tile_zero(1);
          _tile_zero(2);
          _tile_zero(3);
        } else {
          _tile_loadd(0, c, 64);
          _tile_loadd(1, c + 256, 64);
          _tile_loadd(2, c + 512, 64);
          _tile_loadd(3, c + 768, 64);
        }
        if (two_rows && two_bands) tile_loop<true, true>(a0, a1, b0, b1, kn, splits, split_stride);
        else if (two_rows) tile_loop<true, false>(a0, a1, b0, b1, kn, splits, split_stride);
        else if (two_bands) tile_loop<false, true>(a0, a1, b0, b1, kn, splits, split_stride);
        else tile_loop<false, false>(a0, a1, b0, b1, kn, splits, split_stride);
        if (!last) {
          _tile_stored(0, c, 64);
          _tile_stored(1, c + 256, 64);
          _tile_stored(2, c + 512, 64);
          _tile_stored(3, c + 768, 64);
          continue;
        }
        _tile_stored(0, out, 64);
        store(rb, 16 * band);
        if (two_bands) {
          _tile_stored(1, out, 64);
          store(rb, 16 * band + 16);
        }
        if (two_rows) {
          _tile_stored(2, out, 64);
          store(rb + 16, 16 * band);
          if (two_bands) {
            _tile_stored(3, out, 64);
            store(rb + 16, 16 * band + 16);
          }
        }
      }
    }
  }
  _tile_release();
}

#pragma GCC pop_options

} // namespace k3::mxfp4::detail
