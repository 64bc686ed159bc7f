// AMX bf16 GEMM for prefill: y[t, r] = Σ_s Σ_k xs_s[t, k] · w[r, k] with tile instructions
// (TDPBF16PS: a 16 × 16 fp32 tile += a 16 × 32 bf16 tile · a 32 × 16 bf16 tile, 16 384 flops per
// instruction — ~15× the AVX-512 FMA rate of one core on the Xeons that have it).
//
// Roles: the activations are the A operand (16 tokens × 32 k, loaded straight from the caller's
// bf16 rows), the weights the B operand, which AMX wants "VNNI"-packed (row = a pair of k,
// 16 columns × 2 bf16). The weights stay as stored (row-major [n, k], which the GEMV needs for
// decode); each call packs the slice of W it multiplies, a 16 × 16 transpose of 32-bit pairs per
// tile, just before the 32-row × k-block slice is used, and reuses it for every token block —
// one pass over W, paid once per prompt of m tokens. The fp32 accumulator tiles are y itself: loaded at the start of each
// k-block after the first, stored at its end, so no transposes or side buffers are needed.
//
// Blocking: 2 × 2 accumulator tiles (32 tokens × 32 rows) with two A and two B tiles; for
// splits = 3 (fp32 activations carried as hi + mid + lo bf16 parts) each B pair is reused by
// all three A pairs. Per k-block: 32-row blocks outer, token blocks inner, so the packed B
// tiles stay in L1 and the k-block of A (all tokens) in L2.
//
// Only the functions between push_options/pop_options are compiled for AMX; callers check
// amx_bf16_available() (cpu_features.hpp) first, which also obtained the kernel's permission
// to use tile data (arch_prctl on Linux).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/dense/dense_gemm.hpp"

#include <immintrin.h>

#include "kernels/common/amx_tiles.hpp"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,amx-tile,amx-bf16")

#include "kernels/dense/bf16_parts_avx512.hpp"

namespace k3::dense::detail {
namespace {

// Packs rows [r0, r0 + 16) × columns [k0, k0 + 32) of w (zeros past k, rows past rmax) into one
// B tile: 16 rows of (k pair) × 16 columns × 2 bf16.
inline void pack_tile(const bf16_t* w, std::int64_t k, std::int64_t r0, std::int64_t rmax, std::int64_t k0,
                      bf16_t* dst) {
  __m512i r[16];
  const std::int64_t left = k - k0;
  const __mmask32 mask = left >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((std::uint64_t{1} << left) - 1);
  for (int i = 0; i < 16; ++i)
    r[i] = r0 + i < rmax ? _mm512_maskz_loadu_epi16(mask, w + (r0 + i) * k + k0) : _mm512_setzero_si512();
  amx::transpose16x16_epi32(r);
  for (int i = 0; i < 16; ++i) _mm512_store_si512(dst + i * 32, r[i]);
}

} // namespace

void split_bf16_rows(const float* x, std::int64_t ldx, std::int64_t rows, std::int64_t k, int splits, bf16_t* xs,
                     std::int64_t split_stride) {
  // Tile-blocked: 16 rows × 32 columns (1 KiB) contiguous, tiles of a 16-row band in column order.
  const std::int64_t chunks = (k + 31) / 32;
  for (std::int64_t t = 0; t < rows; ++t) {
    const float* src = x + t * ldx;
    bf16_t* dst = xs + (t / 16) * chunks * 512 + (t % 16) * 32;
    for (std::int64_t c = 0; c < chunks; ++c, dst += 512)
      for (std::int64_t h = 0; h < 32; h += 16) {
        const std::int64_t i = 32 * c + h, left = k - i;
        const __mmask16 mask = left >= 16 ? __mmask16(0xffff) : left <= 0 ? __mmask16(0)
                                                            : static_cast<__mmask16>((1u << left) - 1);
        __m256i part[3];
        bf16_parts(_mm512_maskz_loadu_ps(mask, src + i), splits, part);
        for (int s = 0; s < splits; ++s)
          _mm256_store_si256(reinterpret_cast<__m256i*>(dst + s * split_stride + h), part[s]);
      }
  }
  // Rows past `rows` in the last band are zeros.
  for (std::int64_t t = rows; t % 16 != 0; ++t)
    for (int s = 0; s < splits; ++s) {
      bf16_t* dst = xs + s * split_stride + (t / 16) * chunks * 512 + (t % 16) * 32;
      for (std::int64_t c = 0; c < chunks; ++c) std::memset(dst + c * 512, 0, 64);
    }
}

void vnni_tiles(bf16_t* tiles, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i, tiles += 512) {
    __m512i r[16];
    for (int j = 0; j < 16; ++j) r[j] = _mm512_load_si512(tiles + 32 * j);
    amx::transpose16x16_epi32(r);
    for (int j = 0; j < 16; ++j) _mm512_store_si512(tiles + 32 * j, r[j]);
  }
}

void gemm_bf16_amx(const bf16_t* xs, int splits, std::int64_t split_stride, std::int64_t m, const bf16_t* w,
                   std::int64_t k, std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy, bf16_t* wpack) {
  amx::configure_16x64();
  const std::int64_t chunks = (k + 31) / 32;
  const std::int64_t row_blocks = (n1 - n0) / 32;
  const std::int64_t token_blocks = m / 32;
  const std::int64_t ystride = ldy * static_cast<std::int64_t>(sizeof(float));
  // k-block: fp32 activations (3 splits) keep the block's A tiles for all tokens in L2
  // (512 tokens · 512 columns · 3 · 2 bytes = 1.5 MiB); one split affords twice the columns,
  // which halves the accumulator traffic through y (2-core Xeon, 6144 × 7168, m = 512, one
  // thread: 16 → 32 chunks 500 → 665 GFLOP/s; 3 splits at 32 chunks 290 → 231).
  const std::int64_t kblock = splits == 1 ? amx_kblock : amx_kblock / 2;
  for (std::int64_t c0 = 0; c0 < chunks; c0 += kblock) {
    const std::int64_t nc = std::min(kblock, chunks - c0);
    // Row blocks outer: their 2 · nc B tiles, packed just before (wpack: [row tile][chunk] of
    // 512 bf16), stay in L1 while every token block passes.
    for (std::int64_t rb = 0; rb < row_blocks; ++rb) {
      for (std::int64_t rt = 0; rt < 2; ++rt)
        for (std::int64_t c = 0; c < nc; ++c)
          pack_tile(w, k, n0 + 32 * rb + 16 * rt, n1, 32 * (c0 + c), wpack + (rt * nc + c) * 512);
      const bf16_t* b0 = wpack;
      const bf16_t* b1 = b0 + nc * 512;
      for (std::int64_t tb = 0; tb < token_blocks; ++tb) {
        float* yc = y + 32 * tb * ldy + n0 + 32 * rb;
        if (c0 == 0) {
          _tile_zero(0);
          _tile_zero(1);
          _tile_zero(2);
          _tile_zero(3);
        } else {
          _tile_loadd(0, yc, ystride);
          _tile_loadd(1, yc + 16, ystride);
          _tile_loadd(2, yc + 16 * ldy, ystride);
          _tile_loadd(3, yc + 16 * ldy + 16, ystride);
        }
        const bf16_t* a0 = xs + (2 * tb * chunks + c0) * 512;
        const bf16_t* a1 = a0 + chunks * 512;
        for (std::int64_t c = 0; c < nc; ++c) {
          _tile_loadd(6, b0 + c * 512, 64);
          _tile_loadd(7, b1 + c * 512, 64);
          for (int s = 0; s < splits; ++s) {
            _tile_loadd(4, a0 + s * split_stride + c * 512, 64);
            _tile_loadd(5, a1 + s * split_stride + c * 512, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
          }
        }
        _tile_stored(0, yc, ystride);
        _tile_stored(1, yc + 16, ystride);
        _tile_stored(2, yc + 16 * ldy, ystride);
        _tile_stored(3, yc + 16 * ldy + 16, ystride);
      }
    }
  }
  _tile_release();
}

} // namespace k3::dense::detail

#pragma GCC pop_options
