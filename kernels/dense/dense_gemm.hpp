#pragma once
// Dense GEMM with bf16 or fp32 weights and fp32 activations (optionally rounded to bf16):  y[m, n] = Σ_k x[m, k] · W[n, k]
// (W row-major [n, k] as stored in safetensors, i.e. y = x · Wᵀ).
//
// bf16 weights: for m ≤ 64 (decode, batched decode) hand-written kernels stream W once (small
// calls on the calling thread): the GEMV (a lane per column) below 7 tokens, and with fp32
// activations from 7 tokens tiles of tokens in the lanes — 16/32 on AVX-512, 8/16 on AVX2 —
// (each (token, row) sum in k order, independent of the tile's other tokens); for larger m (prefill) W is widened
// in 256-row × 512-column blocks and multiplied with OpenBLAS sgemm, accumulating over k. fp32
// weights go to OpenBLAS.
//
// Activations (k3::activations): fp32 — every path multiplies the fp32 activations (the exact
// contract). bf16 — the activations are rounded to bf16 once per call; on CPUs with
// AVX512-BF16 the GEMV then runs vdpbf16ps on bf16 × bf16 (no widening, half the activation
// bytes), elsewhere and for prefill the same rounded values are multiplied in fp32. Sums are
// fp32 on every path.
//
// Threading: parallel over output rows on the kernel pool; reentrant.
// REQUIRES: ldx ≥ k, ldy ≥ n, non-aliasing buffers; violations throw std::invalid_argument.

#include <cstdint>

#include "kernels/common/bf16.hpp"

namespace k3::dense {

void gemm_bf16(const float* x, std::int64_t ldx, std::int64_t m, const bf16_t* w, std::int64_t n, std::int64_t k,
               float* y, std::int64_t ldy, activations a = activations::fp32);

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
/// Batch tile (AVX-512, tokens in lanes): y[t, r] for t < tg ≤ 16 · vectors (vectors 1 or 2),
/// rows [r0, r1), from xt = the tile's activations transposed to [k][16 · vectors] (64-byte
/// aligned, lanes ≥ tg zero); wt: 64-byte aligned scratch of 16 · bcast_chunk floats. Each
/// (t, r) sum runs over k in order, one FMA per step.
constexpr std::int64_t bcast_chunk = 256;
void gemm_bf16_tile_avx512(const float* xt, int vectors, int tg, const bf16_t* w, std::int64_t k, std::int64_t r0,
                           std::int64_t r1, float* y, std::int64_t ldy, float* wt);
/// The AVX2 form: tg ≤ 8 · vectors tokens, xt [k][8 · vectors] 32-byte aligned, same contract.
void gemm_bf16_tile_avx2(const float* xt, int vectors, int tg, const bf16_t* w, std::int64_t k, std::int64_t r0,
                         std::int64_t r1, float* y, std::int64_t ldy, float* wt);
} // namespace detail

} // namespace k3::dense
