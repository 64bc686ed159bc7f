#pragma once
// Prefill GEMM on oneDNN's bf16 matmul (Debian libdnnl-dev), for CPUs whose AVX512-BF16 dot runs
// at twice the fp32 FMA's flops and that have no AMX (AMD Zen 4/5; on an Intel Xeon without AMX
// the same matmul measured 143 GFLOP/s against the sgemm route's 150–212): y[m, n] = x · Wᵀ
// with W row-major [n, k] read in place as oneDNN's "ba" weights. The activations enter as bf16
// rows: fp32 activations as three parts hi + mid + lo = x (exact for normal values; a
// non-finite hi stands alone, as on the AMX path), whose three products are accumulated in fp32
// — every product is the fp32-exact product of the activation and the bf16 weight;
// fp32_bf16x2 activations as the two parts hi + lo (two thirds of the work; 1.19–1.23× a
// 512-token prefill of the test checkpoint at one thread); bf16 activations as one part,
// rounded once.
//
// Measured (2-vCPU Zen 5, 512 tokens, 6144 × 7168): 887 GFLOP/s with bf16 activations (0.89 of
// the vdpbf16ps peak) and 289 with the three fp32 parts, against 221–224 for the
// widen-then-OpenBLAS-sgemm route it replaces there.
//
// The token count is a run-time dimension of the cached primitives (oneDNN's jit gemm, as fast
// here as its brgemm kernels: 700–980 GFLOP/s at 64–512 tokens), so one primitive per weight
// shape serves every prompt length — compiled primitives per token count cost 0.2–13 ms each
// and ~0.5 s on a first 512-token prompt of the test checkpoint. Tokens go in even passes of at
// most 512.
// Threading: oneDNN's own OpenMP regions on the kernel pool's threads (omp_get_max_threads()).

#include <cstdint>

#include "kernels/common/bf16.hpp"

namespace k3::dense::detail {

/// Whether this build has oneDNN and the CPU runs vdpbf16ps at full rate without AMX
/// (bf16_dot_full_rate(): AMD Zen 4/5; Intel Xeons keep their AMX or sgemm routes).
[[nodiscard]] bool onednn_available() noexcept;

/// y[t, r] = Σ_k x[t, k] · w[r, k] for t < m, r < n; splits 3 (fp32 activations), 2 (fp32_bf16x2)
/// or 1 (bf16).
/// A token's result does not depend on m for m > 64 (gemm_bf16 sends only prefill here; oneDNN
/// computes a 1-token call by another kernel, with other bits).
/// REQUIRES onednn_available(), m, n, k ≥ 1, ldx ≥ k, ldy ≥ n.
void gemm_bf16_onednn(const float* x, std::int64_t ldx, std::int64_t m, const bf16_t* w, std::int64_t n,
                      std::int64_t k, float* y, std::int64_t ldy, int splits);

} // namespace k3::dense::detail
