#pragma once
// Gated activations and softmax (fp32).
//
//   silu_glu(a, b) = silu(a) · b                                       (Kimi Linear, hidden_act silu)
//   situ_glu(a, b) = β·tanh(a/β)·sigmoid(a) · β_lin·tanh(b/β_lin)     (K3, β = 4, β_lin = 25)
//                    with β_lin ≤ 0 meaning "up branch untransformed" (spec §8)
//   softmax         numerically stable (max subtracted), fp32 sum
//
// The GLU forms read gate/up as two arrays of `n` (or, for the fused `gate_up` layout produced
// by one GEMM over concatenated [w1; w3], as the first and second half of each row).
// The GLUs run 16 lanes at a time on AVX-512, 8 on AVX2 and element by element on the scalar
// path (fast_math.hpp).

#include <cstdint>

namespace k3::ops {

struct situ_params {
  float beta = 4.0f;        ///< activation_situ_beta
  float linear_beta = 25.0f; ///< activation_situ_linear_beta; ≤ 0 disables the up transform
};

void silu_glu(const float* gate, const float* up, std::int64_t n, float* out) noexcept;
void situ_glu(const float* gate, const float* up, std::int64_t n, const situ_params& p, float* out) noexcept;

/// rows × [gate(n) | up(n)] -> rows × n, for the fused w1‖w3 GEMM output.
void silu_glu_fused(const float* gate_up, std::int64_t rows, std::int64_t n, float* out) noexcept;
void situ_glu_fused(const float* gate_up, std::int64_t rows, std::int64_t n, const situ_params& p,
                    float* out) noexcept;

namespace detail {
// AVX-512 and AVX2 forms (same formulas, FMA polynomials); the public functions pick them by
// active_isa().
void silu_glu_avx512(const float* gate, const float* up, std::int64_t n, float* out) noexcept;
void situ_glu_avx512(const float* gate, const float* up, std::int64_t n, const situ_params& p, float* out) noexcept;
void silu_glu_avx2(const float* gate, const float* up, std::int64_t n, float* out) noexcept;
void situ_glu_avx2(const float* gate, const float* up, std::int64_t n, const situ_params& p, float* out) noexcept;
} // namespace detail

/// In-place softmax over each of `rows` rows of n elements.
void softmax(float* x, std::int64_t rows, std::int64_t n) noexcept;

} // namespace k3::ops
