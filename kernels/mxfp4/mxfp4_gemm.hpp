#pragma once
// MXFP4-weight x fp32-activation GEMV / small-M GEMM, and the expert-grouped form.
//
//   y[m, r] = sum_k x[m, k] * W[r, k]        (W in compressed-tensors MXFP4 layout)
//
// Weights are dequantized in registers (E2M1 lookup, exact power-of-two scale); products and
// sums are fp32, so the result equals "dequantize then fp32 GEMM" up to summation order.
// M is the token count (1..64 is the designed range; larger M works, tiled by 4 tokens).
// Paths: AVX-512, AVX2+FMA, scalar, chosen by k3::active_isa(); grouped_gemm runs experts with
// 8 or more tokens on AMX tiles where the CPU has them (mxfp4_gemm_amx.cpp, same products,
// another summation order).
//
// Threading: gemm() and grouped_gemm() split rows over the kernel pool (parallel_for);
// gemm_rows() is serial for callers that already parallelise. All are reentrant.
// REQUIRES: w.cols % 32 == 0, x has m rows of ≥ w.cols floats (stride ldx), y has m rows of
// ≥ w.rows floats (stride ldy); x and y do not alias. Violations throw std::invalid_argument.

#include <cstdint>
#include <span>

#include "kernels/common/bf16.hpp"
#include "kernels/mxfp4/mxfp4_format.hpp"

namespace k3::mxfp4 {

/// Non-owning view of one MXFP4 matrix (e.g. a memory-mapped expert projection).
struct matrix_view {
  const std::uint8_t* packed = nullptr; ///< [rows, cols/2]
  const std::uint8_t* scales = nullptr; ///< [rows, cols/32]
  std::int64_t rows = 0;
  std::int64_t cols = 0;

  [[nodiscard]] static matrix_view of(const packed_matrix& m) noexcept {
    return {m.packed.data(), m.scales.data(), m.rows, m.cols};
  }
  /// Bytes read by one pass over the weights (packed + scales).
  [[nodiscard]] std::int64_t bytes() const noexcept { return rows * (cols / 2) + rows * (cols / block_size); }
};

/// Activation precision (see k3::activations): with bf16, activations are rounded once per call
/// and the AVX512-BF16 kernel (vdpbf16ps) runs where the CPU has it and cols % 64 == 0; other
/// paths compute the same rounded products in fp32. With int8 (mxfp4_q8.hpp), the AVX512-VNNI
/// kernels run where the CPU has them, else the fp32 kernels on the same rounded values. Either
/// way a token's result does not depend on m or on the other tokens' values beyond summation
/// order (int8 on VNNI from q8_min_tokens tokens per segment: not at all).
using activations = k3::activations;

/// y = x · Wᵀ for m tokens, parallel over row tiles.
void gemm(const float* x, std::int64_t ldx, std::int64_t m, const matrix_view& w, float* y, std::int64_t ldy,
          activations a = activations::fp32);

/// Serial form over rows [row_begin, row_end) only.
void gemm_rows(const float* x, std::int64_t ldx, std::int64_t m, const matrix_view& w, std::int64_t row_begin,
               std::int64_t row_end, float* y, std::int64_t ldy);

/// One expert's share of a grouped call: tokens [begin, end) of the sorted activations use w.
struct expert_segment {
  matrix_view w;
  std::int64_t begin = 0;
  std::int64_t end = 0;
};

/// Expert-grouped GEMM: for each segment s, y[begin_s:end_s, :w_s.rows] = x[begin_s:end_s] · W_sᵀ.
/// Rows of x are tokens already sorted by expert (see moe_permutation in kernels/router).
/// All segments' work is spread over the pool as (segment, row-tile) items in one call.
/// REQUIRES: segments do not overlap in [begin, end); every w_s has the same cols.
void grouped_gemm(const float* x, std::int64_t ldx, std::span<const expert_segment> segments, float* y,
                  std::int64_t ldy, activations a = activations::fp32);

namespace detail {
/// AMX (amx_bf16_available()): y[t, r] for t < tokens, rows [r0, r1), from the tokens' bf16
/// activation tiles xs (dense::detail::split_bf16_rows over the segment's rows, `splits` copies
/// split_stride apart, summed; then dense::detail::vnni_tiles over all of them). REQUIRES amx_scales_ok(w, r0,
/// r1). Scratch, 64-byte aligned: `scratch` 32 · 32 · amx_kblocks bf16 (decoded weights of one
/// k-block), `acc` ceil(tokens / 32) · 1024 floats (accumulators between k-blocks). Serial; each
/// (t, r) sums its blocks in column order, all splits per block.
constexpr std::int64_t amx_kblocks = 16;
void gemm_rows_amx(const bf16_t* xs, int splits, std::int64_t split_stride, std::int64_t tokens, const matrix_view& w,
                   std::int64_t r0, std::int64_t r1, float* y, std::int64_t ldy, bf16_t* scratch, float* acc);
/// Scale exponents the AMX decode keeps exact (scaled E2M1 values stay normal bf16).
constexpr std::uint8_t amx_min_scale = 2, amx_max_scale = 252;
[[nodiscard]] bool amx_scales_ok(const matrix_view& w, std::int64_t r0, std::int64_t r1) noexcept;
/// Where the calling thread's next rows start (their packed and scale bytes). A kernel's software
/// prefetch runs this far ahead of its reads; near the end of its own rows it walks on into
/// these instead of the bytes that follow in memory (another expert's, usually), so a thread
/// moving through many small expert matrices never starts one cold. Null: no next rows known.
/// Prefetching only — results never depend on it.
struct next_rows {
  const std::uint8_t* packed = nullptr;
  const std::uint8_t* scales = nullptr;
};
// Per-ISA serial kernels (same contract as gemm_rows; m ≥ 1, shapes already checked).
using gemm_rows_fn = void (*)(const float*, std::int64_t, std::int64_t, const matrix_view&, std::int64_t,
                              std::int64_t, float*, std::int64_t, const next_rows&);
void gemm_rows_scalar(const float*, std::int64_t, std::int64_t, const matrix_view&, std::int64_t, std::int64_t,
                      float*, std::int64_t, const next_rows&);
void gemm_rows_avx2(const float*, std::int64_t, std::int64_t, const matrix_view&, std::int64_t, std::int64_t,
                    float*, std::int64_t, const next_rows&);
void gemm_rows_avx512(const float*, std::int64_t, std::int64_t, const matrix_view&, std::int64_t, std::int64_t,
                      float*, std::int64_t, const next_rows&);
/// bf16 activations (see activations::bf16); REQUIRES cols % 64 == 0 and AVX512-BF16.
void gemm_rows_avx512bf16(const float*, std::int64_t, std::int64_t, const matrix_view&, std::int64_t, std::int64_t,
                          float*, std::int64_t, const next_rows&);
} // namespace detail

} // namespace k3::mxfp4
