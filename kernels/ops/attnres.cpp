#include "kernels/ops/attnres.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/parallel.hpp"
#include "kernels/ops/norms.hpp"

namespace k3::ops {

void attnres_mix(const float* const* sources, int num_sources, const float* w, float eps, std::int64_t n,
                 float* out) noexcept {
  if (num_sources <= 0) { // an empty mix (the contract asks for S ≥ 1): zeros, never garbage
    std::fill(out, out + n, 0.0f);
    return;
  }
  // Scores on the stack up to 64 sources (K3: 93 layers in blocks of a few), on the heap past
  // that: a checkpoint with tiny blocks must not lose its oldest sources.
  constexpr int stack_sources = 64;
  float stack_score[stack_sources];
  std::vector<float> heap_score;
  const int S = num_sources;
  if (S > stack_sources) heap_score.resize(static_cast<std::size_t>(S));
  float* score = S > stack_sources ? heap_score.data() : stack_score;
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
  const int S = std::max(num_sources, 0);
  // Tokens are independent: a batch's mixes (~(S + 1)·n·3 operations each: the norms and dots,
  // then the weighted sum) share the pool once they are worth a fork/join. Each token's mix is
  // the same computation either way.
  parallel_for_work(tokens, tokens * (S + 1) * n * 3, [&](std::int64_t t) {
    constexpr int stack_sources = 64;
    const float* stack_row[stack_sources];
    std::vector<const float*> heap_row;
    if (S > stack_sources) heap_row.resize(static_cast<std::size_t>(S));
    const float** row = S > stack_sources ? heap_row.data() : stack_row;
    for (int s = 0; s < S; ++s) row[s] = sources[s] + t * n;
    attnres_mix(row, S, w, eps, n, out + t * n);
  });
}

void attnres_fuse_weight(const float* norm_w, const float* proj_w, std::int64_t n, float* w) noexcept {
  for (std::int64_t i = 0; i < n; ++i) w[i] = norm_w[i] * proj_w[i];
}

} // namespace k3::ops
