// KDA elementwise pieces (conv, gates, β, q/k preparation) and the recurrent scan.
#include "kernels/kda/kda.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/common/cpu_features.hpp"
#include "kernels/common/parallel.hpp"
#include "kernels/ops/norms.hpp"

namespace k3::kda {
namespace {

// One head, one token: S ← diag(e^g) S; u = β (v − Sᵀk); S ← S + k uᵀ; o = Sᵀ q.
// Two passes over S (decay + Sᵀk, then update + readout); rows are contiguous dv floats, so
// the j loops vectorise. target_clones compiles AVX-512, AVX2 and baseline bodies.
__attribute__((target_clones("avx512f", "avx2", "default"))) void step_head(float* __restrict S,
                                                                             const float* __restrict q,
                                                                             const float* __restrict k,
                                                                             const float* __restrict v,
                                                                             const float* __restrict g, float beta,
                                                                             int dk, int dv, float* __restrict o,
                                                                             float* __restrict u) {
  for (int j = 0; j < dv; ++j) u[j] = 0.0f;
  for (int i = 0; i < dk; ++i) {
    const float a = std::exp(g[i]);
    const float ki = k[i];
    float* Si = S + static_cast<std::int64_t>(i) * dv;
    for (int j = 0; j < dv; ++j) {
      Si[j] *= a;
      u[j] += Si[j] * ki;
    }
  }
  for (int j = 0; j < dv; ++j) {
    u[j] = beta * (v[j] - u[j]);
    o[j] = 0.0f;
  }
  for (int i = 0; i < dk; ++i) {
    const float ki = k[i], qi = q[i];
    float* Si = S + static_cast<std::int64_t>(i) * dv;
    for (int j = 0; j < dv; ++j) {
      Si[j] += ki * u[j];
      o[j] += Si[j] * qi;
    }
  }
}

} // namespace

void short_conv(const float* x, std::int64_t T, std::int64_t C, const float* w, int K, float* state, float* y) {
  if (K < 1 || K > 16) throw std::invalid_argument("kda::short_conv: kernel size " + std::to_string(K) + " not in [1, 16]");
  // Per channel a sliding window over [state | x]; work channel-major so the window stays in
  // registers and y may alias x (each x[t, c] is read before y[t, c] is written).
  const std::int64_t blocks = (C + 255) / 256;
  if (active_isa() == isa::avx512) {
    parallel_for_work(blocks, T * C * K, [&](std::int64_t blk) {
      detail::short_conv_avx512(x, T, C, w, K, state, y, blk * 256, std::min(C, (blk + 1) * 256));
    });
    return;
  }
  if (active_isa() == isa::avx2) {
    parallel_for_work(blocks, T * C * K, [&](std::int64_t blk) {
      detail::short_conv_avx2(x, T, C, w, K, state, y, blk * 256, std::min(C, (blk + 1) * 256));
    });
    return;
  }
  auto conv_block = [&](std::int64_t blk) {
    float hist[16];
    for (std::int64_t c = blk * 256; c < std::min(C, (blk + 1) * 256); ++c) {
      const float* wc = w + c * K;
      float* st = state + c * (K - 1);
      for (int j = 0; j < K - 1; ++j) hist[j] = st[j];
      for (std::int64_t t = 0; t < T; ++t) {
        hist[K - 1] = x[t * C + c];
        float s = 0.0f;
        for (int j = 0; j < K; ++j) s += wc[j] * hist[j];
        for (int j = 0; j < K - 1; ++j) hist[j] = hist[j + 1];
        y[t * C + c] = s / (1.0f + std::exp(-s));
      }
      for (int j = 0; j < K - 1; ++j) st[j] = hist[j];
    }
  };
  parallel_for_work(blocks, T * C * K, conv_block);
}

void decay_gate(const float* graw, std::int64_t T, int H, int dk, const float* A_log, const float* dt_bias,
                const gate_params& p, float* g) {
  // One exp (softplus: and a log1p) per value, ~20 operations: a batch of decode tokens is
  // worth a fork/join, one token is not. Each (token, head) row is computed the same either way.
  parallel_for_work(T * H, T * H * dk * 20, [&](std::int64_t i) {
    const std::int64_t t = i / H;
    const int h = static_cast<int>(i % H);
    const float a = std::exp(A_log[h]);
    const float* gr = graw + (t * H + h) * dk;
    const float* bias = dt_bias + h * dk;
    float* out = g + (t * H + h) * dk;
    if (p.kind == gate_kind::softplus) {
      for (int c = 0; c < dk; ++c) {
        const float x = gr[c] + bias[c];
        // softplus(x) = max(x, 0) + log1p(exp(-|x|)): no overflow for large |x|.
        out[c] = -a * (std::fmax(x, 0.0f) + std::log1p(std::exp(-std::fabs(x))));
      }
    } else {
      for (int c = 0; c < dk; ++c) out[c] = p.lower_bound / (1.0f + std::exp(-a * (gr[c] + bias[c])));
    }
  });
}

void beta_sigmoid(float* b, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) b[i] = 1.0f / (1.0f + std::exp(-b[i]));
}

void prepare_qk(float* q, float* k, std::int64_t T, int H, int dk) {
  ops::l2_norm(q, 1e-6f, T * H, dk, q);
  ops::l2_norm(k, 1e-6f, T * H, dk, k);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  for (std::int64_t i = 0; i < T * H * dk; ++i) q[i] *= scale;
}

void recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta, std::int64_t T,
               const dims& d, float* state, float* o) {
  const int H = d.heads, K = d.dk, V = d.dv;
  parallel_for_work(H, T * H * K * V, [&](std::int64_t h) {
    std::vector<float> u(static_cast<std::size_t>(V));
    float* S = state + h * K * V;
    for (std::int64_t t = 0; t < T; ++t)
      step_head(S, q + (t * H + h) * K, k + (t * H + h) * K, v + (t * H + h) * V, g + (t * H + h) * K,
                beta[t * H + h], K, V, o + (t * H + h) * V, u.data());
  });
}

void recurrent_batch(const float* q, const float* k, const float* v, const float* g, const float* beta,
                     std::int64_t N, const dims& d, float* const* states, float* o) {
  const int H = d.heads, K = d.dk, V = d.dv;
  parallel_for_work(N * H, N * H * K * V, [&](std::int64_t i) {
    thread_local std::vector<float> u;
    u.resize(static_cast<std::size_t>(V));
    const std::int64_t n = i / H, h = i % H;
    step_head(states[n] + h * K * V, q + i * K, k + i * K, v + i * V, g + i * K, beta[i], K, V, o + i * V, u.data());
  });
}

} // namespace k3::kda
