#include "kernels/kda/kda_ref.hpp"

#include <cmath>

namespace k3::kda {

void recurrent_ref(const float* q, const float* k, const float* v, const float* g, const float* beta, std::int64_t T,
                   const dims& d, std::vector<double>& state, std::vector<double>& o) {
  const int H = d.heads, K = d.dk, V = d.dv;
  state.resize(static_cast<std::size_t>(H) * K * V, 0.0);
  o.assign(static_cast<std::size_t>(T) * H * V, 0.0);
  std::vector<double> kS(V);
  for (std::int64_t t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      double* S = state.data() + static_cast<std::size_t>(h) * K * V;
      const float* qt = q + (t * H + h) * K;
      const float* kt = k + (t * H + h) * K;
      const float* gt = g + (t * H + h) * K;
      const float* vt = v + (t * H + h) * V;
      const double b = beta[t * H + h];
      for (int i = 0; i < K; ++i)
        for (int j = 0; j < V; ++j) S[i * V + j] *= std::exp(static_cast<double>(gt[i])); // 1. decay rows
      for (int j = 0; j < V; ++j) {
        double s = 0;
        for (int i = 0; i < K; ++i) s += S[i * V + j] * kt[i];
        kS[j] = s;
      }
      for (int i = 0; i < K; ++i)
        for (int j = 0; j < V; ++j) S[i * V + j] += b * kt[i] * (vt[j] - kS[j]); // 2. delta correction
      for (int j = 0; j < V; ++j) {
        double s = 0;
        for (int i = 0; i < K; ++i) s += S[i * V + j] * qt[i]; // 3. readout
        o[(t * H + h) * V + j] = s;
      }
    }
}

void decay_gate_ref(const float* graw, std::int64_t T, int H, int dk, const float* A_log, const float* dt_bias,
                    const gate_params& p, std::vector<double>& g) {
  g.resize(static_cast<std::size_t>(T) * H * dk);
  for (std::int64_t t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h)
      for (int c = 0; c < dk; ++c) {
        const std::size_t i = static_cast<std::size_t>((t * H + h) * dk + c);
        const double x = static_cast<double>(graw[i]) + dt_bias[h * dk + c];
        const double a = std::exp(static_cast<double>(A_log[h]));
        if (p.kind == gate_kind::softplus) g[i] = -a * std::log1p(std::exp(x));
        else g[i] = p.lower_bound / (1.0 + std::exp(-a * x));
      }
}

void short_conv_ref(const float* x, std::int64_t T, std::int64_t C, const float* w, int K,
                    std::vector<double>& state, std::vector<double>& y) {
  state.resize(static_cast<std::size_t>(C) * (K - 1), 0.0);
  y.assign(static_cast<std::size_t>(T * C), 0.0);
  for (std::int64_t c = 0; c < C; ++c) {
    std::vector<double> hist(state.begin() + c * (K - 1), state.begin() + (c + 1) * (K - 1));
    for (std::int64_t t = 0; t < T; ++t) {
      hist.push_back(x[t * C + c]);
      double s = 0;
      for (int j = 0; j < K; ++j) s += w[c * K + j] * hist[hist.size() - K + j];
      y[t * C + c] = s / (1.0 + std::exp(-s));
    }
    for (int j = 0; j < K - 1; ++j) state[c * (K - 1) + j] = hist[hist.size() - (K - 1) + j];
  }
}

} // namespace k3::kda
