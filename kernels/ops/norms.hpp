#pragma once
// Row-wise normalisations, fp32 in and out (weights fp32; widen bf16 weights at load).
//
//   rms_norm        y = x / sqrt(mean(x²) + eps) ⊙ w
//   rms_norm_gated  y = rms_norm(x, w) ⊙ sigmoid(gate)          (KDA output, spec §5.1 step 9)
//   l2_norm         y = x · rsqrt(Σx² + eps)                     (KDA q/k, eps 1e-6)
//
// Every function processes `rows` rows of `n` contiguous elements (row strides = n), in place
// allowed (y == x). Sums of squares accumulate in fp32 with 16 independent partial sums (a
// fixed order, so results are identical for the same row whatever the batch composition).
// Pure functions; safe from any thread.

#include <cstdint>

namespace k3::ops {

void rms_norm(const float* x, const float* w, float eps, std::int64_t rows, std::int64_t n, float* y) noexcept;

void rms_norm_gated(const float* x, const float* gate, const float* w, float eps, std::int64_t rows, std::int64_t n,
                    float* y) noexcept;

void l2_norm(const float* x, float eps, std::int64_t rows, std::int64_t n, float* y) noexcept;

/// Σ x[i]² with the fixed 16-lane partial-sum order used by the norms above.
[[nodiscard]] float sum_squares(const float* x, std::int64_t n) noexcept;

/// Σ a[i]·b[i] in the same fixed 16-lane order.
[[nodiscard]] float dot(const float* a, const float* b, std::int64_t n) noexcept;

} // namespace k3::ops
