#pragma once
// Dense GEMM with bf16 or fp32 weights and fp32 activations:  y[m, n] = Σ_k x[m, k] · W[n, k]
// (W row-major [n, k] as stored in safetensors, i.e. y = x · Wᵀ).
//
// bf16 weights: for m ≤ 8 (decode) a hand-written GEMV widens bf16 to fp32 in registers and
// streams W once (AVX-512 / AVX2 / scalar by active_isa()); for larger m (prefill) W is
// widened panel by panel into an L2-sized fp32 buffer and multiplied with OpenBLAS sgemm.
// fp32 weights go to OpenBLAS directly. All arithmetic is fp32.
//
// Threading: parallel over output rows on the kernel pool; reentrant.
// REQUIRES: ldx ≥ k, ldy ≥ n, non-aliasing buffers; violations throw std::invalid_argument.

#include <cstdint>

#include "kernels/common/bf16.hpp"

namespace k3::dense {

void gemm_bf16(const float* x, std::int64_t ldx, std::int64_t m, const bf16_t* w, std::int64_t n, std::int64_t k,
               float* y, std::int64_t ldy);

void gemm_f32(const float* x, std::int64_t ldx, std::int64_t m, const float* w, std::int64_t n, std::int64_t k,
              float* y, std::int64_t ldy);

/// Serial bf16 kernel over output rows [n0, n1) (m ≤ 8 path), for callers that parallelise.
void gemv_bf16_rows(const float* x, std::int64_t ldx, std::int64_t m, const bf16_t* w, std::int64_t k,
                    std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy);

namespace detail {
void gemv_bf16_rows_scalar(const float*, std::int64_t, std::int64_t, const bf16_t*, std::int64_t, std::int64_t,
                           std::int64_t, float*, std::int64_t);
void gemv_bf16_rows_avx2(const float*, std::int64_t, std::int64_t, const bf16_t*, std::int64_t, std::int64_t,
                         std::int64_t, float*, std::int64_t);
void gemv_bf16_rows_avx512(const float*, std::int64_t, std::int64_t, const bf16_t*, std::int64_t, std::int64_t,
                           std::int64_t, float*, std::int64_t);
} // namespace detail

} // namespace k3::dense
