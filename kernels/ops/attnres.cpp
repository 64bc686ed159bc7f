#include "kernels/ops/attnres.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/ops/norms.hpp"

namespace k3::ops {

void attnres_mix(const float* const* sources, int num_sources, const float* w, float eps, std::int64_t n,
                 float* out) noexcept {
  constexpr int max_sources = 64;
  float score[max_sources];
  const int S = std::min(num_sources, max_sources);
  for (int s = 0; s < S; ++s) {
    const float* v = sources[s];
    const float inv = 1.0f / std::sqrt(sum_squares(v, n) / static_cast<float>(n) + eps);
    score[s] = dot(v, w, n) * inv; // Σ (v·inv)·w = inv · Σ v·w
  }
  float mx = score[0];
  for (int s = 1; s < S; ++s) mx = std::max(mx, score[s]);
  float sum = 0;
  for (int s = 0; s < S; ++s) sum += score[s] = std::exp(score[s] - mx);
  for (int s = 0; s < S; ++s) score[s] /= sum;
  for (std::int64_t i = 0; i < n; ++i) {
    float o = 0;
    for (int s = 0; s < S; ++s) o += score[s] * sources[s][i];
    out[i] = o;
  }
}

void attnres_mix_batch(const float* const* sources, int num_sources, const float* w, float eps, std::int64_t tokens,
                       std::int64_t n, float* out) noexcept {
  constexpr int max_sources = 64;
  const float* row[max_sources];
  const int S = std::min(num_sources, max_sources);
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (int s = 0; s < S; ++s) row[s] = sources[s] + t * n;
    attnres_mix(row, S, w, eps, n, out + t * n);
  }
}

void attnres_fuse_weight(const float* norm_w, const float* proj_w, std::int64_t n, float* w) noexcept {
  for (std::int64_t i = 0; i < n; ++i) w[i] = norm_w[i] * proj_w[i];
}

} // namespace k3::ops
