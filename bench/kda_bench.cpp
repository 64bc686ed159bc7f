// KDA prefill: chunked (WY) vs token-by-token recurrent, same inputs, same run.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "bench/bench_util.hpp"
#include "bench/kernel_bench.hpp"
#include "kernels/common/parallel.hpp"
#include "kernels/kda/kda.hpp"

namespace k3::bench {
namespace {

struct kda_inputs {
  std::vector<float> q, k, v, g, beta;
};

kda_inputs make(std::int64_t T, const kda::dims& d, const kda::gate_params& gp, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  auto normals = [&](std::size_t n, float s = 1.0f) {
    std::vector<float> v(n);
    for (auto& x : v) x = s * n01(gen);
    return v;
  };
  const int H = d.heads, K = d.dk, V = d.dv;
  kda_inputs in;
  in.q = normals(T * H * K);
  in.k = normals(T * H * K);
  in.v = normals(T * H * V);
  kda::prepare_qk(in.q.data(), in.k.data(), T, H, K);
  auto graw = normals(T * H * K), dt = normals(H * K, 0.5f);
  std::vector<float> A_log(H);
  for (int h = 0; h < H; ++h) A_log[h] = std::log(1.0f + static_cast<float>(h % 16));
  in.g.resize(graw.size());
  kda::decay_gate(graw.data(), T, H, K, A_log.data(), dt.data(), gp, in.g.data());
  in.beta = normals(T * H);
  kda::beta_sigmoid(in.beta.data(), T * H);
  return in;
}

} // namespace

int run_kda_bench(const kernel_bench_options& opts) {
  const std::int64_t T = opts.quick ? 1024 : opts.kda_tokens;
  const kda::dims d{opts.quick ? 4 : opts.kda_heads, 128, 128};
  std::printf("\nKDA prefill, T=%lld, H=%d, dk=dv=128, fp32 state, %d threads (heads in parallel)\n",
              static_cast<long long>(T), d.heads, kernel_threads());
  table t({{"gate", 12}, {"chunk", 6}, {"recurrent tok/s", 16}, {"chunked tok/s", 14}, {"speed-up", 9}, {"rel-RMSE", 9}});
  int rc = 0;
  for (const auto& [name, gp] : {std::pair{"lower_bound", kda::gate_params{kda::gate_kind::lower_bound, -5.0f}},
                                 std::pair{"softplus", kda::gate_params{kda::gate_kind::softplus, 0.0f}}}) {
    const auto in = make(T, d, gp, 17);
    const std::size_t sn = static_cast<std::size_t>(d.heads) * d.dk * d.dv;
    std::vector<float> S(sn), o_r(T * d.heads * d.dv), o_c(o_r.size());
    auto run_rec = [&] {
      std::fill(S.begin(), S.end(), 0.0f);
      kda::recurrent(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), T, d, S.data(), o_r.data());
    };
    for (int chunk : {16, 32, 64}) {
      auto run_chk = [&] {
        std::fill(S.begin(), S.end(), 0.0f);
        kda::chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), T, d, S.data(), o_c.data(),
                     chunk);
      };
      run_rec();
      run_chk();
      double num = 0, den = 0;
      for (std::size_t i = 0; i < o_r.size(); ++i) {
        num += double(o_c[i] - o_r[i]) * (o_c[i] - o_r[i]);
        den += double(o_r[i]) * o_r[i];
      }
      const double rel = std::sqrt(num / den);
      if (!(rel < 1e-3)) rc = 1;
      const auto [tr, tc] = time_pair(run_rec, run_chk, 2 * opts.min_seconds);
      t.row({name, std::to_string(chunk), fmt(T / tr, 0), fmt(T / tc, 0), fmt(tr / tc), fmt(rel, 7)});
    }
  }
  if (rc) std::printf("validation FAILED: chunked output differs from recurrent\n");
  return rc;
}

} // namespace k3::bench
