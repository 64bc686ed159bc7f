#include "kernels/ops/norms.hpp"

#include <cmath>

namespace k3::ops {

// target_clones: one body, compiled for AVX-512, AVX2 and the baseline, chosen at load time.
// The 16 partial sums keep the summation order identical across the three clones.
__attribute__((target_clones("avx512f", "avx2", "default"))) float dot(const float* a, const float* b,
                                                                        std::int64_t n) noexcept {
  float acc[16] = {};
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
  float s = 0;
  for (int j = 0; j < 16; ++j) s += acc[j];
  return s;
}

float sum_squares(const float* x, std::int64_t n) noexcept { return dot(x, x, n); }

void rms_norm(const float* x, const float* w, float eps, std::int64_t rows, std::int64_t n, float* y) noexcept {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float inv = 1.0f / std::sqrt(sum_squares(xr, n) / static_cast<float>(n) + eps);
    for (std::int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * w[i];
  }
}

void rms_norm_gated(const float* x, const float* gate, const float* w, float eps, std::int64_t rows, std::int64_t n,
                    float* y) noexcept {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const float* gr = gate + r * n;
    float* yr = y + r * n;
    const float inv = 1.0f / std::sqrt(sum_squares(xr, n) / static_cast<float>(n) + eps);
    for (std::int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * w[i] / (1.0f + std::exp(-gr[i]));
  }
}

void l2_norm(const float* x, float eps, std::int64_t rows, std::int64_t n, float* y) noexcept {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float inv = 1.0f / std::sqrt(sum_squares(xr, n) + eps);
    for (std::int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv;
  }
}

} // namespace k3::ops
