// MXFP4 expert GEMV/GEMM bandwidth vs a streaming read of the same bytes.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "bench/bench_util.hpp"
#include "bench/kernel_bench.hpp"
#include "kernels/common/cpu_features.hpp"
#include "kernels/common/parallel.hpp"
#include "kernels/mxfp4/mxfp4_gemm.hpp"
#include "kernels/mxfp4/mxfp4_q8.hpp"
#include "kernels/mxfp4/mxfp4_ref.hpp"

namespace k3::bench {
namespace {

constexpr std::int64_t hidden = 3584; // K3 routed_expert_hidden_size (latent)
constexpr std::int64_t inter = 3072;  // K3 moe_intermediate_size
constexpr int experts_per_layer = 16; // top-16

struct expert {
  mxfp4::matrix_view w1, w3, w2;
};

// Fills the arena in parallel with xorshift bytes; scales in a realistic band around 2^0.
void fill(std::uint8_t* p, std::int64_t n, bool scales) {
  constexpr std::int64_t chunk = 1 << 20;
  parallel_for((n + chunk - 1) / chunk, [&](std::int64_t c) {
    std::uint64_t s = 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(c + 1);
    const std::int64_t end = std::min(n, (c + 1) * chunk);
    for (std::int64_t i = c * chunk; i < end; ++i) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      p[i] = scales ? static_cast<std::uint8_t>(120 + (s >> 59)) : static_cast<std::uint8_t>(s >> 32);
    }
  });
}

// n experts of w1, w3 (rows_in × cols_in) and w2 (cols_in × rows_in), laid out expert after expert in
// one packed and one scale buffer filled with random bytes.
struct expert_arena {
  std::vector<std::uint8_t> packed, scales;
  std::vector<expert> ex;
  expert_arena(std::int64_t n, std::int64_t rows_in, std::int64_t cols_in)
      : packed(static_cast<std::size_t>(n * 3 * rows_in * cols_in / 2)),
        scales(static_cast<std::size_t>(n * 3 * rows_in * cols_in / 32)), ex(static_cast<std::size_t>(n)) {
    fill(packed.data(), static_cast<std::int64_t>(packed.size()), false);
    fill(scales.data(), static_cast<std::int64_t>(scales.size()), true);
    const std::uint8_t* p = packed.data();
    const std::uint8_t* s = scales.data();
    auto take = [&](std::int64_t rows, std::int64_t cols) {
      mxfp4::matrix_view v{p, s, rows, cols};
      p += rows * cols / 2;
      s += rows * cols / 32;
      return v;
    };
    for (auto& e : ex) {
      e.w1 = take(rows_in, cols_in);
      e.w3 = take(rows_in, cols_in);
      e.w2 = take(cols_in, rows_in);
    }
  }
  [[nodiscard]] std::int64_t packed_bytes() const { return static_cast<std::int64_t>(packed.size()); }
  [[nodiscard]] std::int64_t scale_bytes() const { return static_cast<std::int64_t>(scales.size()); }
  [[nodiscard]] std::vector<std::pair<const std::uint8_t*, std::int64_t>> regions() const {
    return {{packed.data(), packed_bytes()}, {scales.data(), scale_bytes()}};
  }
};

// The routed experts of the README's test checkpoint (latent 768 → inter 576, 9 MoE layers of
// 256 experts) as its decode steps call them: batch 1 (8 experts of one token per layer) and
// batch 16 (128 token-expert pairs per layer over ~98 distinct experts, 1-3 tokens each, the
// spread `k3 bench model` sees), w1, w3 then w2 per layer as run_experts does, vs a streaming
// read of the same bytes. Enough layers are laid out to exceed the last-level cache.
void model_shapes(double gib, double seconds) {
  constexpr std::int64_t X = 768, I = 576;
  const std::int64_t per_expert = 2 * mxfp4::matrix_view{nullptr, nullptr, I, X}.bytes()
                                  + mxfp4::matrix_view{nullptr, nullptr, X, I}.bytes();
  // Token counts of one batch-16 layer: 128 pairs over 98 experts.
  std::vector<int> b16(98, 1);
  for (int i = 0; i < 22; ++i) b16[static_cast<std::size_t>(i * 4)] = 2;
  for (int i = 0; i < 4; ++i) b16[static_cast<std::size_t>(i * 4 + 2)] = 3;
  struct pattern {
    const char* name;
    std::vector<int> tokens; // per expert of a layer
  };
  const pattern patterns[] = {{"batch 1 (8 x 1 token)", std::vector<int>(8, 1)}, {"batch 16 (98 experts, 1-3)", b16}};
  for (const pattern& pat : patterns) {
    const auto per_layer = static_cast<std::int64_t>(pat.tokens.size());
    const std::int64_t layers = std::max<std::int64_t>(
        2, static_cast<std::int64_t>(gib * (1ll << 30) / static_cast<double>(per_layer * per_expert)));
    const expert_arena arena(layers * per_layer, I, X);
    const std::vector<expert>& ex = arena.ex;
    std::int64_t rows = 0;
    for (int n : pat.tokens) rows += n;
    std::vector<float> x(static_cast<std::size_t>(rows * X)), h(static_cast<std::size_t>(rows * I)),
        y1(static_cast<std::size_t>(rows * I)), y3(y1.size()), y2(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.11 * static_cast<double>(i));
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = std::sin(0.07 * static_cast<double>(i));
    const double bytes = static_cast<double>(arena.packed_bytes() + arena.scale_bytes());
    const auto regions = arena.regions();
    volatile std::uint64_t sink = 0;
    std::printf("\nexperts of the README's test checkpoint (w1/w3 %lldx%lld, w2 %lldx%lld), %s per layer, "
                "%lld layers = %.0f MB, %d threads\n",
                (long long)I, (long long)X, (long long)X, (long long)I, pat.name, (long long)layers, bytes / 1e6,
                kernel_threads());
    table t({{"activations", 12}, {"GB/s weights", 13}, {"stream GB/s", 12}, {"ratio", 6}, {"us/layer", 9}});
    for (const auto act : {mxfp4::activations::fp32, mxfp4::activations::bf16, mxfp4::activations::int8}) {
      if (act == mxfp4::activations::bf16 && !bf16_dot_available()) continue;
      if (act == mxfp4::activations::int8 && !int8_dot_available() && active_isa() != isa::avx2) continue;
      std::vector<mxfp4::expert_segment> s1, s3, s2;
      auto pass = [&] {
        for (std::int64_t l = 0; l < layers; ++l) {
          s1.clear();
          s3.clear();
          s2.clear();
          std::int64_t r = 0;
          for (std::int64_t j = 0; j < per_layer; ++j) {
            const auto& e = ex[static_cast<std::size_t>(l * per_layer + j)];
            const std::int64_t n = pat.tokens[static_cast<std::size_t>(j)];
            s1.push_back({e.w1, r, r + n});
            s3.push_back({e.w3, r, r + n});
            s2.push_back({e.w2, r, r + n});
            r += n;
          }
          mxfp4::grouped_gemm(x.data(), X, s1, y1.data(), I, act);
          mxfp4::grouped_gemm(x.data(), X, s3, y3.data(), I, act);
          mxfp4::grouped_gemm(h.data(), I, s2, y2.data(), X, act);
        }
      };
      pass();
      const auto [tk, ts] = time_pair(pass, [&] { sink = sink + stream_read(regions); }, 2 * seconds);
      const char* label = act == mxfp4::activations::fp32 ? "fp32" : act == mxfp4::activations::bf16 ? "bf16" : "int8";
      t.row({label, fmt(bytes / tk / 1e9), fmt(bytes / ts / 1e9), fmt(ts / tk), fmt(tk * 1e6 / static_cast<double>(layers), 1)});
    }
    (void)sink;
  }
}

} // namespace

int run_mxfp4_bench(const kernel_bench_options& opts) {
  const double gib = opts.quick ? 0.25 : opts.working_set_gib;
  const std::int64_t per_expert = 2 * mxfp4::matrix_view{nullptr, nullptr, inter, hidden}.bytes()
                                  + mxfp4::matrix_view{nullptr, nullptr, hidden, inter}.bytes();
  std::int64_t n_experts = static_cast<std::int64_t>(std::ceil(gib * (1ll << 30) / per_expert));
  n_experts = (n_experts + experts_per_layer - 1) / experts_per_layer * experts_per_layer;
  const expert_arena arena(n_experts, inter, hidden);
  const std::vector<expert>& ex = arena.ex;
  const std::int64_t packed_bytes = arena.packed_bytes(), scale_bytes = arena.scale_bytes();
  const double total_bytes = static_cast<double>(packed_bytes + scale_bytes);
  std::printf("\nMXFP4 expert GEMM, K3 shapes (w1/w3 %lldx%lld, w2 %lldx%lld), %lld experts = %.2f GiB, "
              "%d threads, isa=%s\n",
              (long long)inter, (long long)hidden, (long long)hidden, (long long)inter, (long long)n_experts,
              total_bytes / (1 << 30), kernel_threads(), std::string(to_string(active_isa())).c_str());

  // Validate one expert at M = 16 against the fp64 reference before timing.
  {
    std::vector<float> x(16 * hidden), y(16 * inter);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * static_cast<double>(i));
    mxfp4::gemm(x.data(), hidden, 16, ex[0].w1, y.data(), inter);
    const auto ref = mxfp4::gemm_ref(x.data(), hidden, 16, ex[0].w1);
    double num = 0, den = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      num += (y[i] - ref[i]) * (y[i] - ref[i]);
      den += ref[i] * ref[i];
    }
    const double rel = std::sqrt(num / den);
    std::printf("validation: M=16 vs fp64 reference rel-RMSE %.2e %s\n", rel, rel < 1e-6 ? "ok" : "FAILED");
    if (!(rel < 1e-6)) return 1;
    // The VNNI tile kernel (M = 16) and the AVX2 few-token kernel (M = 4) must reproduce the
    // int8 definition exactly.
    if (int8_dot_available() || active_isa() == isa::avx2) {
      const std::int64_t mq = int8_dot_available() ? 16 : mxfp4::detail::q8_avx2_max_tokens;
      std::vector<float> yq(static_cast<std::size_t>(mq * inter)), want(yq.size());
      mxfp4::gemm(x.data(), hidden, mq, ex[0].w1, yq.data(), inter, mxfp4::activations::int8);
      mxfp4::q8_reference(x.data(), hidden, mq, ex[0].w1, 0, inter, want.data(), inter);
      double qn = 0;
      double qd = 0;
      for (std::size_t i = 0; i < yq.size(); ++i) qn += (yq[i] - ref[i]) * (yq[i] - ref[i]), qd += ref[i] * ref[i];
      const bool exact = std::memcmp(yq.data(), want.data(), yq.size() * sizeof(float)) == 0;
      std::printf("validation: int8 activations M=%lld %s the int8 reference; vs fp64 of the fp32 input rel-RMSE %.2e\n",
                  static_cast<long long>(mq), exact ? "equals" : "DIFFERS FROM", std::sqrt(qn / qd));
      if (!exact) return 1;
    }
  }

  const auto regions = arena.regions();
  volatile std::uint64_t sink = 0;
  auto stream_pass = [&] { sink = sink + stream_read(regions); };

  // M = 1 is decode; 4, 8, 16 and 64 tokens per expert are batched decode and prefill (the fp32
  // batch kernel takes 7+ tokens with the tokens in the lanes). int8 rows: the opt-in int8
  // activations on AVX512-VNNI (tiles of 16 tokens from 5 tokens per expert, below that the
  // few-token kernel), or on AVX2 (the integer kernel up to 4 tokens, then the fp32 kernel on
  // the rounded activations).
  table t({{"kernel", 26}, {"M", 4}, {"GB/s weights", 13}, {"stream GB/s", 12}, {"ratio", 6}, {"tok-GEMV/s", 11},
           {"GFLOP/s", 8}});
  for (const auto& [m, act] : {std::pair{1, mxfp4::activations::fp32}, std::pair{4, mxfp4::activations::fp32},
                                std::pair{8, mxfp4::activations::fp32}, std::pair{16, mxfp4::activations::fp32},
                                std::pair{64, mxfp4::activations::fp32}, std::pair{1, mxfp4::activations::bf16},
                                std::pair{4, mxfp4::activations::bf16}, std::pair{16, mxfp4::activations::bf16},
                                std::pair{64, mxfp4::activations::bf16}, std::pair{1, mxfp4::activations::int8},
                                std::pair{4, mxfp4::activations::int8}, std::pair{8, mxfp4::activations::int8},
                                std::pair{16, mxfp4::activations::int8}, std::pair{64, mxfp4::activations::int8}}) {
    if (act == mxfp4::activations::bf16 && !bf16_dot_available()) continue; // no AVX512-BF16 here
    if (act == mxfp4::activations::int8 && !int8_dot_available() && active_isa() != isa::avx2) continue; // no int8 kernel here
    const std::int64_t rows = static_cast<std::int64_t>(experts_per_layer) * m;
    std::vector<float> x(static_cast<std::size_t>(rows * hidden)), h(static_cast<std::size_t>(rows * inter)),
        y1(static_cast<std::size_t>(rows * inter)), y3(y1.size()), y2(static_cast<std::size_t>(rows * hidden));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.11 * static_cast<double>(i));
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = std::sin(0.07 * static_cast<double>(i));
    // One pass = every layer of 16 experts: grouped w1, w3, then w2 (as a decode step does).
    auto pass = [&] {
      std::vector<mxfp4::expert_segment> s1, s3, s2;
      for (std::int64_t l = 0; l < n_experts / experts_per_layer; ++l) {
        s1.clear();
        s3.clear();
        s2.clear();
        for (int j = 0; j < experts_per_layer; ++j) {
          const auto& e = ex[static_cast<std::size_t>(l * experts_per_layer + j)];
          s1.push_back({e.w1, j * m, (j + 1) * m});
          s3.push_back({e.w3, j * m, (j + 1) * m});
          s2.push_back({e.w2, j * m, (j + 1) * m});
        }
        mxfp4::grouped_gemm(x.data(), hidden, s1, y1.data(), inter, act);
        mxfp4::grouped_gemm(x.data(), hidden, s3, y3.data(), inter, act);
        mxfp4::grouped_gemm(h.data(), inter, s2, y2.data(), hidden, act);
      }
    };
    pass(); // warm-up (page faults, thread pool)
    stream_pass();
    const auto [tk, ts] = time_pair(pass, stream_pass, 2 * opts.min_seconds);
    const double gk = total_bytes / tk / 1e9, gs = total_bytes / ts / 1e9;
    const double gemvs = static_cast<double>(n_experts) * 3 * m / tk;
    const double flops = 2.0 * static_cast<double>(n_experts) * 3 * static_cast<double>(inter * hidden) * m;
    const char* label = act == mxfp4::activations::bf16   ? "grouped, bf16 activations"
                        : act == mxfp4::activations::int8 ? "grouped, int8 activations"
                                                          : "grouped w1+w3+w2, 16/layer";
    t.row({label, std::to_string(m), fmt(gk),
           fmt(gs), fmt(gk / gs), fmt(gemvs, 0), fmt(flops / tk / 1e9, 1)});
  }
  (void)sink;
  model_shapes(gib, opts.min_seconds);
  return 0;
}

} // namespace k3::bench
