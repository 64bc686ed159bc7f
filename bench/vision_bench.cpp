#include "bench/vision_bench.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

#include "kernels/dense/dense_gemm.hpp"
#include "runtime/model/make_model.hpp"
#include "runtime/vision/preprocess.hpp"
#include "runtime/vision/vision_model.hpp"

namespace k3::bench {
namespace {

using clk = std::chrono::steady_clock;
double secs(clk::time_point a) { return std::chrono::duration<double>(clk::now() - a).count(); }

// The dense bf16 GEMM alone at the tower's widest shape (M patches × 4096 × 1024): the rate the
// tower's linear layers could reach on this machine.
double gemm_gflops(std::int64_t M) {
  const std::int64_t N = 4096, K = 1024;
  std::vector<float> x(static_cast<std::size_t>(M * K), 0.01f), y(static_cast<std::size_t>(M * N));
  std::vector<bf16_t> w(static_cast<std::size_t>(N * K), f32_to_bf16(0.02f));
  dense::gemm_bf16(x.data(), K, M, w.data(), N, K, y.data(), N); // warm
  int reps = 0;
  const auto t0 = clk::now();
  do {
    dense::gemm_bf16(x.data(), K, M, w.data(), N, K, y.data(), N);
    ++reps;
  } while (secs(t0) < 1.0);
  return 2.0 * static_cast<double>(M * N * K) * reps / secs(t0) / 1e9;
}

} // namespace

int run_vision_benchmark(const vision_bench_options& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  std::string dir = o.model_dir;
  if (dir.empty()) {
    dir = o.cache_dir;
    if (!std::filesystem::exists(dir + "/preprocessor_config.json")) {
      model::make_model_options m; // K3's tower and projector; a minimal text model of K3's width
      m.vision = true, m.vit_hidden = 1024, m.vit_heads = 12, m.vit_qkv = 1536, m.vit_inter = 4096, m.vit_layers = 27;
      m.hidden = 7168, m.layers = 2, m.progress = true;
      std::fprintf(stderr, "k3 bench vision: writing K3's vision tower (27 × 1024, 12 heads × 128) to %s\n", dir.c_str());
      model::make_model(m, dir);
    }
  }
  const auto vm = vision::vision_model::load(dir);
  if (!vm) {
    std::fprintf(stderr, "k3 bench vision: %s has no vision_config\n", dir.c_str());
    return 1;
  }
  const auto& c = vm->config;
  std::printf("k3 bench vision: tower %d layers × %d, %d heads × %d, MLP %d, projector → %d; %.0f MB bf16; %d threads\n",
              c.layers, c.hidden, c.heads, c.head_dim(), c.inter, c.text_hidden, static_cast<double>(vm->net->bytes()) / 1e6,
              omp_get_max_threads());
  std::printf("| image | patches | tokens | preprocess ms | tower s (mean of %d) | patches/s | GFLOP | GFLOP/s | dense bf16 GEMM GFLOP/s | tower / GEMM |\n",
              o.repetitions);
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  std::mt19937 rng(1);
  for (const auto& s : o.sizes) {
    const auto xpos = s.find('x');
    if (xpos == std::string::npos) {
      std::fprintf(stderr, "k3 bench vision: size '%s' is not WxH\n", s.c_str());
      return 1;
    }
    const int W = std::stoi(s.substr(0, xpos)), H = std::stoi(s.substr(xpos + 1));
    vision::image img;
    img.width = W, img.height = H, img.mode = vision::pixel_mode::RGB;
    img.px.resize(static_cast<std::size_t>(W) * H * 3);
    for (auto& b : img.px) b = static_cast<std::uint8_t>(rng() & 0xff);
    auto t0 = clk::now();
    const auto px = vision::preprocess(img, c.proc);
    const double pre_ms = secs(t0) * 1e3;
    const std::int64_t L = static_cast<std::int64_t>(px.grid_h) * px.grid_w;
    double total = 0;
    std::vector<float> out;
    for (int r = 0; r < o.repetitions; ++r) {
      t0 = clk::now();
      out = vm->net->encode({&px, 1});
      total += secs(t0);
    }
    const double t = total / o.repetitions, flops = vm->net->flops(L);
    bool finite = std::all_of(out.begin(), out.end(), [](float v) { return std::isfinite(v); });
    const double g = gemm_gflops(std::min<std::int64_t>(L, 4096));
    std::printf("| %dx%d | %lld | %lld | %.1f | %.3f | %.0f | %.0f | %.1f | %.1f | %.2f |%s\n", W, H, static_cast<long long>(L),
                static_cast<long long>(L / 4), pre_ms, t, static_cast<double>(L) / t, flops / 1e9, flops / t / 1e9, g,
                flops / t / 1e9 / g, finite ? "" : " (non-finite output!)");
    std::fflush(stdout);
  }
  return 0;
}

} // namespace k3::bench
