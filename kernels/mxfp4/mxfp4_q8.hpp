#pragma once
// int8 activations for MXFP4 matmuls (activations::int8): the numerics, their scalar reference,
// and the token-tile layout the AVX512-VNNI kernel reads.
//
// Definition (all arithmetic fp32 unless said otherwise):
//  * Each token's activations are rounded per 32-column block (the weights' blocks):
//      amax = max |x_i|;  d = amax / 127;  q_i = clamp(round_half_even(x_i · (127 / amax)), ±127).
//    A block with a NaN or an infinity gets d = NaN and q = 0, so the token's sums become NaN
//    (never a silently finite result). amax = 0, or so small that 127 / amax overflows
//    (amax < ~3.7e-37), gives d = 0 and q = 0.
//  * A weight is w2 · 2^(e−128) with w2 = 2·E2M1[code] ∈ {0, ±1, ±2, ±3, ±4, ±6, ±8, ±12}.
//  * y[t, r]: acc = 0; for each block b in column order:
//      acc = fma(float(Σ_i w2_i · q_i), fl(d[t, b] · 2^(e[r, b] − 128)), acc)
//    The block's integer dot is exact (|Σ| ≤ 32·12·127), so the result is defined bit for bit:
//    it depends on neither the CPU, nor the token's batch, nor the order inside a block.
// The VNNI kernel reproduces it exactly (tests compare bitwise with q8_reference). Where it
// does not run (no AVX512-VNNI, or too few tokens for a tile), the same rounded activations
// d · q go through the fp32 kernels: equal up to summation order.
//
// Error: the rounding step is ≤ amax/254 per element, so a dot's error is ≤ Σ_b amax_b/254 ·
// Σ_i |w_i| — about 0.4 % of Σ|x·w| in the worst case, ~0.1 % typically (llama.cpp's Q8_0
// activations for its MXFP4 path use the same block size and scale rule).

#include <cstdint>

#include "kernels/mxfp4/mxfp4_gemm.hpp"

namespace k3::mxfp4 {

/// Rounds one block of 32 activations (column order); returns d (see the definition above).
float q8_quantize_block(const float* x, std::int8_t q[block_size]) noexcept;

/// rows × cols activations (stride ld) replaced by their int8-grid values d · q, packed into
/// dst (stride cols): the activations::int8 input for the fp32 kernels. REQUIRES cols % 32 == 0.
void q8_round_rows(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t cols, float* dst) noexcept;

/// The definition, computed directly (slow; tests): y[t, r] for tokens [0, m), rows [r0, r1).
void q8_reference(const float* x, std::int64_t ldx, std::int64_t m, const matrix_view& w, std::int64_t r0,
                  std::int64_t r1, float* y, std::int64_t ldy);

// ---- VNNI tiles ------------------------------------------------------------------------------
//
// A tile holds up to 16 tokens, quantized once per call and shared by every row item:
//   q    [cols/4][16 tokens][4] int8 — 4 consecutive decode positions of one token per 32-bit
//        lane; decode position p of a block is column 2p for p < 16 and 2(p − 16) + 1 after
//        (low nibbles, then high nibbles, as the weights unpack);
//   d    [cols/32][16] float — the block scales;
//   corr [cols/32][16] int32 — −12 · Σ q over the block (the kernel multiplies the unsigned
//        weights w2 + 12, vpdpbusd being unsigned × signed).
// Padding tokens have q = 0, d = 0, corr = 0; their sums are never stored.
struct q8_tile {
  const std::int8_t* q = nullptr;
  const float* d = nullptr;
  const std::int32_t* corr = nullptr;
  int tokens = 0; ///< 1..16
};

inline constexpr int q8_tile_tokens = 16;

/// Segments of at least this many tokens run the VNNI tile kernel (a tile pads to 16 tokens);
/// smaller ones the few-token VNNI kernel (q8_gemv_avx512vnni), or without VNNI the fp32
/// kernels on the same rounded activations. Measured on a 2-core Xeon
/// (16 experts 3072 × 3584, GB/s of weights, fp32 → int8 kernel): m = 4: 12.6 → 7.3,
/// m = 5: 6.0 → 5.8, m = 6: 4.6 → 6.5, m = 16: 3.3 → 6.7.
inline constexpr std::int64_t q8_min_tokens = 5;

/// Bytes of one tile's storage for `cols` columns (a multiple of 64, so tiles stay aligned).
[[nodiscard]] inline std::int64_t q8_tile_bytes(std::int64_t cols) noexcept {
  return cols * q8_tile_tokens + 2 * (cols / block_size) * q8_tile_tokens * 4;
}

/// Bytes of one token in the few-token layout: per group of 4 blocks (128 columns; the last
/// group zero-padded), 256 bytes — [0, 64) q of the blocks' even columns (128-bit lane k =
/// block k), [64, 128) odd columns, [128, 192) float d (lanes 4k..4k+3 = block k), [192, 256)
/// int32 −12·Σq of block k in lane 4k, zeros elsewhere.
[[nodiscard]] inline std::int64_t q8_vec_bytes(std::int64_t cols) noexcept { return (cols + 127) / 128 * 256; }

namespace detail {
/// 256 floats: entry e is 2^(e − 128) (the w2 weights' block scale), NaN for e = 0xFF.
[[nodiscard]] const float* q8_weight_scales() noexcept;

/// Quantizes tg ≤ 16 tokens (x stride ldx) into `storage` (q8_tile_bytes(cols), 64-byte aligned)
/// and returns the tile. AVX-512 (REQUIRES int8_dot_available()).
q8_tile q8_make_tile_avx512(const float* x, std::int64_t ldx, int tg, std::int64_t cols, void* storage);

/// Quantizes one token into the few-token layout (storage: q8_vec_bytes(cols), 64-byte aligned).
void q8_make_vec_avx512(const float* x, std::int64_t cols, void* storage);

/// Few tokens (any m; designed for < q8_min_tokens): y[t·ldy + r] for rows [r0, r1), token t
/// from xv[t] (q8_make_vec_avx512). Equals the definition up to fp32 summation order; each row's
/// result depends only on its own bytes and the token's (not on r0, r1, m's grouping or next).
/// next: where the calling thread's next rows start, for the prefetch (see next_rows).
void q8_gemv_avx512vnni(const std::uint8_t* const* xv, int m, const matrix_view& w, std::int64_t r0, std::int64_t r1,
                        float* y, std::int64_t ldy, const next_rows& next = {});

// ---- AVX2 (no VNNI), few tokens ------------------------------------------------------------
// Per token, per pair of blocks p: 64 bytes of q — [even columns of block 2p | of 2p + 1 | odd
// columns of 2p | of 2p + 1] — then after all pairs d[2·pairs] floats and −12·Σq[2·pairs] int32
// (a missing last block of an odd count: zeros).

/// Segments of at most this many tokens take q8_gemv_avx2 where VNNI is missing; larger ones the
/// fp32 kernels on the rounded activations.
inline constexpr std::int64_t q8_avx2_max_tokens = 4;

/// Bytes of one token in the AVX2 layout (a multiple of 64).
[[nodiscard]] std::int64_t q8_vec_avx2_bytes(std::int64_t cols) noexcept;

/// Quantizes one token (the definition's rounding) into `storage` (q8_vec_avx2_bytes, 32-byte aligned).
void q8_make_vec_avx2(const float* x, std::int64_t cols, void* storage);

/// q8_round_rows with AVX2 (what the dispatching q8_round_rows calls on AVX2 and AVX-512 CPUs):
/// the same values bit for bit.
void q8_round_rows_avx2(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t cols, float* dst) noexcept;

/// y[t·ldy + r] for rows [r0, r1), token t from xv[t]: the definition exactly (bitwise equal to
/// q8_reference), whatever r0, r1 and next. AVX2; serial. next: where the calling thread's next
/// rows start, for the prefetch (see next_rows).
void q8_gemv_avx2(const std::uint8_t* const* xv, int m, const matrix_view& w, std::int64_t r0, std::int64_t r1, float* y,
                  std::int64_t ldy, const next_rows& next = {});

/// Rows [r0, r1) of w for tiles [0, ntiles): token i of tile k goes to y[(16k + i)·ldy + r].
/// REQUIRES int8_dot_available(); serial.
void q8_rows_avx512vnni(const q8_tile* tiles, std::int64_t ntiles, const matrix_view& w, std::int64_t r0,
                        std::int64_t r1, float* y, std::int64_t ldy);
} // namespace detail

} // namespace k3::mxfp4
