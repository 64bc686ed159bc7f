// bf16 dense GEMV/GEMM (attention and shared-expert projections) vs a streaming read, and
// oneDNN's bf16 matmul on the same matrices where the build found oneDNN.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "bench/bench_util.hpp"
#include "bench/kernel_bench.hpp"
#include "bench/peak_bench.hpp"
#include "kernels/common/bf16.hpp"
#include "kernels/common/cpu_features.hpp"
#include "kernels/common/parallel.hpp"
#include "kernels/dense/dense_gemm.hpp"
#include "kernels/dense/gemm_bf16_onednn.hpp"
#if K3_HAVE_ONEDNN
#include "bench/onednn_gemm.hpp"
#endif

namespace k3::bench {
namespace {

// One decode token's GEMVs on the K3-architecture test checkpoint of the README (hidden 1536,
// 7 KDA + 3 MLA layers, dense layer 0, 256 experts behind a 768-wide latent, 2 shared experts,
// vocab 16384): 132 bf16 matrices, 470 MB, in the model's order and grouped as it calls them
// (projections of one input in one gemm_bf16_multi), against a streaming read of the same
// bytes as one buffer. Small matrices (1–22 MB, k = 64…7168) are what decode actually streams.
// At 16 tokens (batched decode) the same calls are compute-bound: their GFLOP/s against the
// measured fp32 FMA peak is the dense share of a batch-16 step.
void decode_shapes_bench(double seconds) {
  using group = std::vector<std::pair<std::int64_t, std::int64_t>>; // (n, k) sharing one input
  std::vector<group> groups;
  for (int l = 0; l < 10; ++l) {
    if (l == 3 || l == 7 || l == 9) { // MLA
      groups.push_back({{320, 1536}, {320, 1536}, {2560, 1536}});
      groups.push_back({{3840, 320}});
      groups.push_back({{5120, 256}});
      groups.push_back({{1536, 2560}});
    } else { // KDA
      groups.push_back({{1280, 1536}, {1280, 1536}, {1280, 1536}, {64, 1536}, {20, 1536}, {1280, 1536}});
      groups.push_back({{1280, 64}});
      groups.push_back({{1536, 1280}});
    }
    if (l == 0) {
      groups.push_back({{7168, 1536}, {7168, 1536}});
      groups.push_back({{1536, 7168}});
    } else {
      groups.push_back({{256, 1536}, {768, 1536}, {1152, 1536}, {1152, 1536}});
      groups.push_back({{1536, 768}});
      groups.push_back({{1536, 1152}});
    }
  }
  groups.push_back({{16384, 1536}});
  std::int64_t total = 0, mats = 0;
  for (const group& g : groups)
    for (const auto& [n, k] : g) total += n * k, ++mats;
  // In huge pages, as the model's weight copy is (the file mapping's 4 KiB pages stream slower).
  huge_buffer wbuf(static_cast<std::size_t>(total) * sizeof(bf16_t));
  bf16_t* const w = wbuf.as<bf16_t>();
  parallel_for((total + 4095) / 4096, [&](std::int64_t b) {
    for (std::int64_t i = b * 4096; i < std::min(total, (b + 1) * 4096); ++i)
      w[i] = f32_to_bf16(0.01f * std::sin(0.001f * static_cast<float>(i % 7919)));
  });
  // Batch 1 (decode) and 16 (batched decode: 16 sequences' tokens share each call).
  constexpr int max_tokens = 16;
  constexpr std::int64_t ldy = 16384; // the widest output (the LM head)
  std::vector<float> x(static_cast<std::size_t>(max_tokens) * 7168), y(static_cast<std::size_t>(max_tokens * ldy));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>(std::cos(0.37 * static_cast<double>(i)));
  const double bytes = static_cast<double>(total) * 2;
  std::vector<std::pair<const std::uint8_t*, std::int64_t>> regions = {
      {reinterpret_cast<const std::uint8_t*>(w), static_cast<std::int64_t>(bytes)}};
  volatile std::uint64_t sink = 0;
  std::printf("\ndecode GEMVs of the README's test checkpoint: %lld matrices in %zu calls, %.0f MB (huge pages), %d threads\n",
              (long long)mats, groups.size(), bytes / 1e6, kernel_threads());
  const peaks pk = measure_peaks();
  table t({{"activations", 20}, {"tokens", 7}, {"GB/s weights", 13}, {"stream GB/s", 12}, {"ratio", 6},
           {"us/step", 9}, {"GFLOP/s", 8}, {"of fp32 peak", 12}});
  for (const int m : {1, max_tokens}) {
    for (const activations act : {activations::fp32, activations::fp32_bf16x2, activations::bf16}) {
      auto pass = [&] {
        std::int64_t off = 0;
        for (const group& g : groups) {
          std::vector<dense::bf16_output> outs;
          std::int64_t row = 0;
          for (const auto& [n, k] : g) {
            outs.push_back({w + off, n, y.data() + row, ldy, act});
            off += n * k;
            row = (row + n) % 8192; // outputs only need to be distinct within a call
          }
          dense::gemm_bf16_multi(x.data(), g.front().second, m, g.front().second, outs);
        }
      };
      pass();
      const auto [tk, ts] = time_pair(pass, [&] { sink = sink + stream_read(regions); }, 2 * seconds);
      const double gf = 2.0 * m * static_cast<double>(total) / tk / 1e9;
      t.row({act == activations::fp32 ? "fp32" : act == activations::bf16 ? "bf16 (rounded once)" : "bf16x2 (default)",
             std::to_string(m), fmt(bytes / tk / 1e9), fmt(bytes / ts / 1e9), fmt(ts / tk), fmt(tk * 1e6, 0), fmt(gf, 1),
             pk.fp32 > 0 ? fmt(gf / pk.fp32) : "-"});
    }
  }
  (void)sink;
}

} // namespace

int run_dense_bench(const kernel_bench_options& opts) {
  if (opts.only == "dense-decode") { // the decode GEMVs of the test checkpoint only
    decode_shapes_bench(opts.min_seconds);
    return 0;
  }
  // K3 shared-expert up/gate shape: 6144 x 7168 bf16 = 88 MB per matrix.
  const std::int64_t n = 6144, k = 7168;
  const double gib = opts.quick ? 0.25 : opts.working_set_gib;
  const std::int64_t mats = std::max<std::int64_t>(1, static_cast<std::int64_t>(gib * (1ll << 30) / (n * k * 2)));
  std::vector<bf16_t> w(static_cast<std::size_t>(mats * n * k));
  parallel_for(mats * n, [&](std::int64_t r) {
    for (std::int64_t i = 0; i < k; ++i)
      w[static_cast<std::size_t>(r * k + i)] = f32_to_bf16(0.01f * std::sin(0.001f * static_cast<float>(r + i)));
  });
  const double bytes = static_cast<double>(w.size()) * 2;
  std::printf("\nbf16 GEMM %lldx%lld, %lld matrices = %.2f GiB, %d threads, isa=%s\n", (long long)n, (long long)k,
              (long long)mats, bytes / (1 << 30), kernel_threads(), std::string(to_string(active_isa())).c_str());
  // Validate M = 3 (GEMV) and M = 100 (prefill: AMX tiles and their tails where present)
  // against fp64 on a few rows.
  for (const std::int64_t vm : {3, 20, 100}) {
    std::vector<float> x(static_cast<std::size_t>(vm * k)), y(static_cast<std::size_t>(vm * n));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.01 * static_cast<double>(i));
    dense::gemm_bf16(x.data(), k, vm, w.data(), n, k, y.data(), n);
    double worst = 0;
    for (std::int64_t t = 0; t < vm; t += vm > 3 ? 33 : 1)
      for (std::int64_t r = 0; r < n; r += 611) {
        double ref = 0, mag = 0;
        for (std::int64_t i = 0; i < k; ++i) {
          const double p = static_cast<double>(x[t * k + i]) * bf16_to_f32(w[static_cast<std::size_t>(r * k + i)]);
          ref += p;
          mag += std::fabs(p);
        }
        worst = nan_max(worst, std::fabs(y[t * n + r] - ref) / mag);
      }
    std::printf("validation M=%lld: worst |err|/Σ|x·w| = %.2e %s\n", (long long)vm, worst, worst < 1e-5 ? "ok" : "FAILED");
    if (!(worst < 1e-5)) return 1;
  }
  std::vector<std::pair<const std::uint8_t*, std::int64_t>> regions = {
      {reinterpret_cast<const std::uint8_t*>(w.data()), static_cast<std::int64_t>(bytes)}};
  volatile std::uint64_t sink = 0;
  auto stream_pass = [&] { sink = sink + stream_read(regions); };
  const peaks pk = measure_peaks();
  std::printf("measured peaks: fp32 FMA %.0f GFLOP/s, bf16 dot %s, AMX bf16 %s\n", pk.fp32,
              pk.bf16 > 0 ? (fmt(pk.bf16, 0) + " GFLOP/s (vdpbf16ps)").c_str() : "n/a (no AVX512-BF16)",
              pk.amx_bf16 > 0 ? (fmt(pk.amx_bf16, 0) + " GFLOP/s (TDPBF16PS)").c_str() : "n/a (no AMX)");
  table t({{"kernel", 20}, {"M", 5}, {"GB/s weights", 13}, {"stream GB/s", 12}, {"ratio", 6}, {"GFLOP/s", 8},
           {"of fp32 peak", 12}, {"of bf16 peak", 12}});
  // Each M with fp32 activations (the default numerics) and bf16 activations (the opt-in
  // --bf16-activations: rounded once, vdpbf16ps where the CPU has AVX512-BF16).
  const bool dot = bf16_dot_available();
  // From M = 2 each size runs twice where the CPU has AMX: on tiles (the default there) and
  // with AMX turned off (the GEMV / batch kernels, the k-blocked sgemm), in the same run.
  const bool amx = amx_bf16_available();
  // Prefill sizes without AMX run on oneDNN's bf16 matmul where the build has it and the CPU has
  // AVX512-BF16 (W in place; fp32 activations as three exact bf16 parts), else on sgemm.
  const bool onednn = dense::detail::onednn_available();
  struct bench_case {
    int m;
    activations act;
    bool amx;
  };
  std::vector<bench_case> cases;
  for (int m : {1, 4, 8, 16, 24, 32, 64, 128, 512})
    for (auto act : {activations::fp32, activations::bf16}) {
      if (m > 1 && amx) cases.push_back({m, act, true});
      if (m != 128 || amx) cases.push_back({m, act, false});
    }
  for (const bench_case& bc : cases) {
    {
      const int m = bc.m;
      const activations act = bc.act;
      const bool prev_amx = set_amx_override(bc.amx);
      std::vector<float> x(static_cast<std::size_t>(m * k)), y(static_cast<std::size_t>(m * n));
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.3 * static_cast<double>(i));
      auto pass = [&] {
        for (std::int64_t j = 0; j < mats; ++j)
          dense::gemm_bf16(x.data(), k, m, w.data() + j * n * k, n, k, y.data(), n, act);
      };
      pass();
      const auto [tk, ts] = time_pair(pass, stream_pass, 2 * opts.min_seconds);
      const double gk = bytes / tk / 1e9, gs = bytes / ts / 1e9;
      const double gf = 2.0 * m * n * k * mats / tk / 1e9;
      set_amx_override(prev_amx);
      const bool b = act == activations::bf16;
      const std::string name = bc.amx ? (b ? "AMX bf16-act" : "AMX fp32-act x3")
                               : m <= 64 ? (b ? (dot ? "GEMV bf16-act dot" : "GEMV bf16-act")
                                           : (m >= dense::detail::lanes_min_tokens() && active_isa() >= isa::avx2
                                                  ? "lanes fp32-act"
                                                  : "GEMV fp32-act"))
                               : onednn ? (b ? "oneDNN bf16-act" : "oneDNN fp32-act x3")
                                        : (b ? "sgemm bf16-act" : "sgemm fp32-act");
      // bf16 peak: the AMX tile rate for the AMX rows (x3 counts the useful flops, a third of
      // the tile work, as for oneDNN's x3 rows), vdpbf16ps otherwise.
      const double bpeak = bc.amx ? pk.amx_bf16 : pk.bf16;
      t.row({name, std::to_string(m), fmt(gk), fmt(gs), fmt(gk / gs), fmt(gf, 1), pk.fp32 > 0 ? fmt(gf / pk.fp32) : "-",
             bpeak > 0 ? fmt(gf / bpeak) : "-"});
    }
  }
#if K3_HAVE_ONEDNN
  // oneDNN's bf16 matmul on the same matrices (weights reordered once, outside the timing).
  std::printf("oneDNN bf16 matmul, dispatched ISA %s\n", onednn_gemm::isa());
  for (int m : {16, 64, 512}) {
    std::vector<float> x(static_cast<std::size_t>(m * k)), y(static_cast<std::size_t>(m * n));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.3 * static_cast<double>(i));
    std::vector<std::unique_ptr<onednn_gemm>> g;
    try {
      for (std::int64_t j = 0; j < mats; ++j) g.push_back(std::make_unique<onednn_gemm>(w.data() + j * n * k, n, k, m));
    } catch (const std::exception& e) { // e.g. no bf16 matmul below AVX-512 in Debian's oneDNN 2.7
      std::printf("oneDNN has no bf16 matmul on this CPU (%s): skipped\n", e.what());
      break;
    }
    g[0]->run(x.data(), y.data());
    double worst = 0;
    for (std::int64_t tk = 0; tk < m; tk += 7)
      for (std::int64_t r = 0; r < n; r += 611) {
        double ref = 0, mag = 0;
        for (std::int64_t i = 0; i < k; ++i) {
          const double pr = static_cast<double>(round_bf16(x[tk * k + i])) * bf16_to_f32(w[static_cast<std::size_t>(r * k + i)]);
          ref += pr;
          mag += std::fabs(pr);
        }
        worst = nan_max(worst, std::fabs(y[tk * n + r] - ref) / mag);
      }
    if (!(worst < 1e-5)) {
      std::printf("oneDNN validation FAILED at M=%d: %.2e\n", m, worst);
      return 1;
    }
    auto pass = [&] {
      for (std::int64_t j = 0; j < mats; ++j) g[static_cast<std::size_t>(j)]->run(x.data(), y.data());
    };
    pass();
    const auto [tk, ts] = time_pair(pass, stream_pass, 2 * opts.min_seconds);
    const double gk = bytes / tk / 1e9, gs = bytes / ts / 1e9;
    const double gf = 2.0 * m * n * k * mats / tk / 1e9;
    t.row({"oneDNN bf16 matmul", std::to_string(m), fmt(gk), fmt(gs), fmt(gk / gs), fmt(gf, 1),
           pk.fp32 > 0 ? fmt(gf / pk.fp32) : "-", pk.bf16 > 0 ? fmt(gf / pk.bf16) : "-"});
  }
#endif
  (void)sink;
  if (!opts.quick) decode_shapes_bench(opts.min_seconds);
  return 0;
}

} // namespace k3::bench
