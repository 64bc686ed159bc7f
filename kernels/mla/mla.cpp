#include "kernels/mla/mla.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/parallel.hpp"

namespace k3::mla {
namespace {

// q̃ · c + q_rot · kr over one bf16 cache row.
__attribute__((target_clones("avx512f", "avx2", "default"))) float score_row(const float* __restrict qt,
                                                                              const bf16_t* __restrict row, int n) {
  float acc[16] = {};
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) {
      std::uint32_t b = static_cast<std::uint32_t>(row[i + j]) << 16;
      float f;
      __builtin_memcpy(&f, &b, 4);
      acc[j] += qt[i + j] * f;
    }
  for (int j = 0; i < n; ++i, ++j) acc[j] += qt[i] * bf16_to_f32(row[i]);
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

// acc = acc·alpha + p·c (latent part of a cache row).
__attribute__((target_clones("avx512f", "avx2", "default"))) void accumulate_row(float* __restrict acc,
                                                                                  const bf16_t* __restrict row,
                                                                                  float alpha, float p, int n) {
  for (int i = 0; i < n; ++i) {
    std::uint32_t b = static_cast<std::uint32_t>(row[i]) << 16;
    float f;
    __builtin_memcpy(&f, &b, 4);
    acc[i] = acc[i] * alpha + p * f;
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) float score_row(const float* __restrict qt,
                                                                              const float* __restrict row, int n) {
  float acc[16] = {};
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += qt[i + j] * row[i + j];
  for (int j = 0; i < n; ++i, ++j) acc[j] += qt[i] * row[i];
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void accumulate_row(float* __restrict acc,
                                                                                  const float* __restrict row,
                                                                                  float alpha, float p, int n) {
  for (int i = 0; i < n; ++i) acc[i] = acc[i] * alpha + p * row[i];
}

} // namespace

void cache_write(const cache_view& cache, const dims& d, std::int64_t pos0, std::int64_t T, const float* ckv,
                 std::int64_t ld_c, const float* krot, std::int64_t ld_r) {
  const int w = d.row_width();
  for (std::int64_t t = 0; t < T; ++t) {
    if (cache.fp32) {
      float* row = cache.row_f32(pos0 + t, w);
      std::copy_n(ckv + t * ld_c, d.latent, row);
      std::copy_n(krot + t * ld_r, d.rope, row + d.latent);
      continue;
    }
    bf16_t* row = cache.row(pos0 + t, w);
    f32_to_bf16(ckv + t * ld_c, row, d.latent);
    f32_to_bf16(krot + t * ld_r, row + d.latent, d.rope);
  }
}

void attention(const float* q_nope, const float* q_rot, const float* kv_b, const cache_view& cache, const dims& d,
               std::int64_t pos0, std::int64_t T, const float* gate, float* out) {
  const int H = d.heads, N = d.nope, R = d.rope, L = d.latent, V = d.v, W = d.row_width();
  const float scale = 1.0f / std::sqrt(static_cast<float>(N + R));
  parallel_for(T * H, [&](std::int64_t item) {
    const std::int64_t t = item / H;
    const int h = static_cast<int>(item % H);
    const float* wk = kv_b + static_cast<std::int64_t>(h) * (N + V) * L; // [N, L]
    const float* wv = wk + static_cast<std::int64_t>(N) * L;             // [V, L]
    thread_local std::vector<float> qt, acc;
    qt.assign(static_cast<std::size_t>(W), 0.0f);
    acc.assign(static_cast<std::size_t>(L), 0.0f);
    // Absorb W_UK into the query; append q_rot so one dot covers the whole cache row.
    const float* qn = q_nope + (t * H + h) * N;
    for (int n = 0; n < N; ++n) {
      const float a = qn[n];
      const float* wr = wk + static_cast<std::int64_t>(n) * L;
      for (int l = 0; l < L; ++l) qt[l] += a * wr[l];
    }
    const float* qr = q_rot + (t * H + h) * R;
    for (int r = 0; r < R; ++r) qt[L + r] = qr[r];
    // Online softmax over visible positions (max-rescaled, fp32).
    float m = -INFINITY, sum = 0.0f;
    const std::int64_t last = pos0 + t;
    auto visit = [&](const auto* row) {
      const float s = scale * score_row(qt.data(), row, W);
      if (s > m) {
        const float alpha = std::exp(m - s); // 0 on the first row (m = -inf)
        sum = sum * alpha + 1.0f;
        accumulate_row(acc.data(), row, alpha, 1.0f, L);
        m = s;
      } else {
        const float e = std::exp(s - m);
        sum += e;
        accumulate_row(acc.data(), row, 1.0f, e, L);
      }
    };
    for (std::int64_t p = 0; p <= last; ++p) {
      if (cache.fp32) visit(cache.row_f32(p, W));
      else visit(cache.row(p, W));
    }
    const float inv = 1.0f / sum;
    float* o = out + t * H * V + static_cast<std::int64_t>(h) * V;
    const float* gt = gate ? gate + t * H * V + static_cast<std::int64_t>(h) * V : nullptr;
    for (int j = 0; j < V; ++j) {
      const float* wr = wv + static_cast<std::int64_t>(j) * L;
      float s = 0;
      for (int l = 0; l < L; ++l) s += wr[l] * acc[l];
      s *= inv;
      o[j] = gt ? s / (1.0f + std::exp(-gt[j])) : s;
    }
  });
}

} // namespace k3::mla
