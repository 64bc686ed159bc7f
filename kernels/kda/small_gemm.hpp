#pragma once
// Small dense fp32 GEMMs for the chunked KDA kernel (shapes ≤ a few hundred, row-major):
//
//   gemm_nn:  C = alpha · A·B  (+ C if accumulate)     A [M, K] (lda), B [K, N] (ldb)
//   gemm_tn:  C = alpha · Aᵀ·B (+ C)                   A [K, M] (lda)
//   gemm_nt:  C = alpha · A·Bᵀ (+ C)                   B [N, K] (ldb)
//
// Why not OpenBLAS: at these sizes (e.g. 32x128x128) call and packing overhead dominate, and
// the Debian build picks its Haswell (AVX2) kernels on unknown CPUs. The AVX-512 path is a
// register-blocked 8x32 micro-kernel with the A element broadcast and no packing; other ISAs
// fall back to cblas_sgemm. Serial; call from inside the head-parallel loop.

#include <cstdint>

namespace k3::kda::detail {

void gemm_nn(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
             bool accumulate);
/// With row_scale (length M), accumulation scales the old C rows first: C = diag(row_scale)·C + alpha·AᵀB
/// (used to fold the KDA state decay into the state update).
void gemm_tn(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
             bool accumulate, const float* row_scale = nullptr);
void gemm_nt(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
             bool accumulate);

} // namespace k3::kda::detail
