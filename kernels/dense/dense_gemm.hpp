#pragma once
// Dense GEMM with bf16 or fp32 weights and fp32 activations (optionally rounded to bf16):  y[m, n] = Σ_k x[m, k] · W[n, k]
// (W row-major [n, k] as stored in safetensors, i.e. y = x · Wᵀ).
//
// bf16 weights: for m ≤ 64 (decode, batched decode) hand-written kernels stream W once (small
// calls on the calling thread): the GEMV (a lane per column), and with fp32 activations from
// detail::lanes_min_tokens() tokens (7 on Intel; 25 with AVX-512 and 13 with AVX2 on AMD, where
// the GEMV measured faster up to there) tiles of tokens in the lanes — 16/32 on AVX-512, 8/16
// on AVX2 — (each (token, row) sum in k order, independent of the tile's other tokens); for
// larger m (prefill) AMX tiles where the
// CPU has them (gemm_bf16_amx.cpp; fp32 activations as three exact bf16 parts), else W is widened
// in 256-row × 512-column blocks and multiplied with OpenBLAS sgemm, accumulating over k. fp32
// weights go to OpenBLAS.
//
// Activations (k3::activations): fp32 — every path multiplies the fp32 activations (the exact
// contract; the bf16 × bf16 routes take three bf16 parts). fp32_bf16x2 — every path multiplies
// round_bf16x2(x) (16 significant bits): the bf16 × bf16 routes take its two parts, the others
// a rounded fp32 copy made once per call. bf16 — the activations are rounded to bf16 once per
// call; on CPUs with AVX512-BF16 the GEMV then runs vdpbf16ps on bf16 × bf16 (no widening,
// half the activation bytes), elsewhere and for prefill the same rounded values are multiplied
// in fp32. Sums are fp32 on every path, so a token's result depends on the route only through
// the summation order.
//
// Threading: parallel over output rows on the kernel pool (decode: one contiguous row range per
// thread, which the GEMV reads as four quarter-long streams — gemv_prefetch.hpp); reentrant.
// REQUIRES: ldx ≥ k, ldy ≥ n, non-aliasing buffers; violations throw std::invalid_argument.

#include <cstdint>
#include <span>

#include "kernels/common/bf16.hpp"

namespace k3::dense {

void gemm_bf16(const float* x, std::int64_t ldx, std::int64_t m, const bf16_t* w, std::int64_t n, std::int64_t k,
               float* y, std::int64_t ldy, activations a = activations::fp32);

/// One output of gemm_bf16_multi: y[m, n] (stride ldy) = x · Wᵀ for W row-major [n, k], with
/// its own activation precision.
struct bf16_output {
  const bf16_t* w;
  std::int64_t n;
  float* y;
  std::int64_t ldy;
  activations a = activations::fp32;
};

/// Several bf16 weights with the same input x [m, k]: each output's y as gemm_bf16 would give it,
/// bit for bit. On the GEMV route (decode) the rows of all the weights are split over the pool
/// threads in one parallel region and bf16 activations are rounded once — one fork/join instead
/// of one per weight (a K3 layer's q/k/v/gate projections, MLA's q_a/kv_a/gate, the router and
/// shared experts); other sizes run gemm_bf16 per output. Outputs may mix precisions (the
/// router's fp32 beside fp32_bf16x2 or bf16 projections): each rounded copy of x is made once.
/// Same requirements per output as gemm_bf16; outputs must not alias x or each other.
void gemm_bf16_multi(const float* x, std::int64_t ldx, std::int64_t m, std::int64_t k,
                     std::span<const bf16_output> outs);

void gemm_f32(const float* x, std::int64_t ldx, std::int64_t m, const float* w, std::int64_t n, std::int64_t k,
              float* y, std::int64_t ldy);

/// Serial bf16 GEMV (fp32 activations) over output rows [n0, n1), for callers that parallelise.
void gemv_bf16_rows(const float* x, std::int64_t ldx, std::int64_t m, const bf16_t* w, std::int64_t k,
                    std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy);

namespace detail {
void gemv_bf16_rows_scalar(const float*, std::int64_t, std::int64_t, const bf16_t*, std::int64_t, std::int64_t,
                           std::int64_t, float*, std::int64_t);
void gemv_bf16_rows_avx2(const float*, std::int64_t, std::int64_t, const bf16_t*, std::int64_t, std::int64_t,
                         std::int64_t, float*, std::int64_t);
void gemv_bf16_rows_avx512(const float*, std::int64_t, std::int64_t, const bf16_t*, std::int64_t, std::int64_t,
                           std::int64_t, float*, std::int64_t);
/// bf16 activations xb [m, ldxb] (rows zero-padded to a multiple of 32, ldxb ≥ that); REQUIRES
/// AVX512-BF16 (bf16_dot_available()).
void gemv_bf16_rows_avx512bf16(const bf16_t* xb, std::int64_t ldxb, std::int64_t m, const bf16_t* w,
                               std::int64_t k, std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy);
/// Tokens from which fp32-activation batches (m ≤ 64, no AMX) take the tokens-in-lanes tiles
/// instead of the GEMV, for the active ISA and this CPU's vendor (see dense_gemm.cpp).
[[nodiscard]] std::int64_t lanes_min_tokens() noexcept;
/// Batch tile (AVX-512, tokens in lanes): y[t, r] for t < tg ≤ 16 · vectors (vectors 1 or 2),
/// rows [r0, r1), from xt = the tile's activations transposed to [k][16 · vectors] (64-byte
/// aligned, lanes ≥ tg zero); wt: 64-byte aligned scratch of 16 · bcast_chunk floats. Each
/// (t, r) sum runs over k in order, one FMA per step.
constexpr std::int64_t bcast_chunk = 256;
void gemm_bf16_tile_avx512(const float* xt, int vectors, int tg, const bf16_t* w, std::int64_t k, std::int64_t r0,
                           std::int64_t r1, float* y, std::int64_t ldy, float* wt);
/// round_bf16x2_rows (kernels/common/bf16.hpp) sixteen lanes at a time, from the same two-part
/// split the bf16 × bf16 routes take. AVX-512.
void round_bf16x2_rows_avx512(const float* x, std::int64_t ldx, std::int64_t rows, std::int64_t k, float* dst);
/// AMX (amx_bf16_available()). split_bf16_rows: `rows` rows of x as `splits` bf16 copies in
/// tile order — 16-row bands, each band's 32-column chunks as contiguous 16 × 32 tiles, zeros
/// past k and in the last band's rows past `rows`; copy s at xs + s · split_stride,
/// split_stride ≥ ceil(rows/16) · 16 · ceil(k/32) · 32, xs 64-byte aligned. splits = 1 rounds each value (f32_to_bf16's rule); splits = 3 writes hi, mid,
/// lo with hi + mid + lo = x (exact for normal values; a non-finite hi stands alone), so the tile
/// products reproduce fp32 activations against bf16 weights. AVX-512.
void split_bf16_rows(const float* x, std::int64_t ldx, std::int64_t rows, std::int64_t k, int splits, bf16_t* xs,
                     std::int64_t split_stride);
/// gemm_bf16_amx: y[t, r] = Σ_s Σ_k xs_s[t, k] · w[r, k] for t < m and rows [n0, n1), m and
/// n1 − n0 multiples of 32, xs as split_bf16_rows wrote it for m rows. wpack: 64-byte aligned
/// scratch of 32 · amx_kblock · 32 bf16 (64 KiB). Serial; sums fp32 in tile order (per 32-column
/// chunk all splits, chunks in order).
constexpr std::int64_t amx_kblock = 32; ///< most 32-column chunks per k-block
void gemm_bf16_amx(const bf16_t* xs, int splits, std::int64_t split_stride, std::int64_t m, const bf16_t* w,
                   std::int64_t k, std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy, bf16_t* wpack);
/// Batched decode on AMX (gemm_bf16_amx_batch.cpp): y[t, r] = Σ_s Σ_k xb_s[t, k] · w[r, k] for
/// t < m ≤ 64 and rows [n0, n1), n1 − n0 a multiple of 16, any k ≥ 1; w is read in place. xb:
/// split_bf16_rows' output for m rows (⌈m/16⌉ bands) after vnni_tiles on all its tiles
/// (ceil(m/16) · ceil(k/32) per split). Serial; each (t, r) sum in gemm_bf16_amx's order, so a
/// token's result does not depend on m.
/// Rewrites `count` contiguous 16 × 32 bf16 tiles (64-byte aligned) in place into AMX's B
/// layout: row p holds column pair (2p, 2p + 1) of all 16 rows. AVX-512.
void vnni_tiles(bf16_t* tiles, std::int64_t count);
void gemm_bf16_amx_batch(const bf16_t* xb, int splits, std::int64_t split_stride, std::int64_t m, const bf16_t* w,
                         std::int64_t k, std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy);
/// The AVX2 form: tg ≤ 8 · vectors tokens, xt [k][8 · vectors] 32-byte aligned, same contract.
void gemm_bf16_tile_avx2(const float* xt, int vectors, int tg, const bf16_t* w, std::int64_t k, std::int64_t r0,
                         std::int64_t r1, float* y, std::int64_t ldy, float* wt);
} // namespace detail

} // namespace k3::dense
