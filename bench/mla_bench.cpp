// MLA attention over the paged bf16 latent cache at K3's per-head sizes (nope 128, rope 64,
// latent 512, v 128), same inputs, timed in turn in one run: the row-wise kernel, the tiled
// kernel's generic path (4 × 4 score blocks, what non-AVX-512 CPUs run) and, where AVX-512 is
// active, its queries-in-the-lanes path (what mla::attention runs there); then a batched decode
// step of 16 sequences, one call per sequence against mla::attention_decode.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "bench/bench_util.hpp"
#include "bench/kernel_bench.hpp"
#include "kernels/common/cpu_features.hpp"
#include "kernels/common/parallel.hpp"
#include "kernels/mla/mla.hpp"

namespace k3::bench {

int run_mla_bench(const kernel_bench_options& opts) {
  const mla::dims d{opts.quick ? 4 : 16, 128, 64, 512, 128};
  const std::int64_t ctx = opts.quick ? 1024 : 4096;
  const int B = 64, W = d.row_width();
  std::mt19937_64 gen(23);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  auto normals = [&](std::size_t n, float s) {
    std::vector<float> v(n);
    for (auto& x : v) x = s * n01(gen);
    return v;
  };
  std::vector<std::vector<bf16_t>> storage;
  std::vector<bf16_t*> blocks;
  for (std::int64_t b = 0; b < (ctx + B - 1) / B; ++b) storage.emplace_back(static_cast<std::size_t>(B) * W);
  for (auto it = storage.rbegin(); it != storage.rend(); ++it) blocks.push_back(it->data()); // pool order
  const mla::cache_view cv{blocks.data(), B};
  const auto ckv = normals(ctx * d.latent, 1.0f), kr = normals(ctx * d.rope, 1.0f);
  mla::cache_write(cv, d, 0, ctx, ckv.data(), d.latent, kr.data(), d.rope);
  const auto kvb = normals(static_cast<std::size_t>(d.heads) * (d.nope + d.v) * d.latent, 0.05f);
  std::printf("\nMLA attention, %d heads (nope 128, rope 64, latent 512, v 128), bf16 cache, %lld-token context, %d threads\n",
              d.heads, static_cast<long long>(ctx), kernel_threads());
  const bool lanes = active_isa() == isa::avx512;
  table t({{"case", 22}, {"row-wise tok/s", 15}, {"4x4 tiles tok/s", 16}, {"lanes tok/s", 12}, {"tiled / row", 12},
           {"lanes / 4x4", 12}, {"rel diff", 9}});
  int rc = 0;
  for (const std::int64_t T : {std::int64_t{512}, std::int64_t{1}}) {
    const std::int64_t pos0 = ctx - T;
    const auto qn = normals(T * d.heads * d.nope, 1.0f), qr = normals(T * d.heads * d.rope, 1.0f);
    std::vector<float> a(T * d.heads * d.v), b(a.size()), c(a.size());
    auto run_row = [&] { mla::attention_rowwise(qn.data(), qr.data(), kvb.data(), cv, d, pos0, T, nullptr, a.data()); };
    auto run_generic = [&] {
      scoped_isa pin(std::min(active_isa(), isa::avx2)); // the generic tiles
      mla::attention(qn.data(), qr.data(), kvb.data(), cv, d, pos0, T, nullptr, b.data());
    };
    auto run_lanes = [&] { mla::attention(qn.data(), qr.data(), kvb.data(), cv, d, pos0, T, nullptr, c.data()); };
    run_row();
    run_generic();
    run_lanes();
    // Both tiled paths against the row-wise kernel (fp32, different summation orders).
    double diff = 0, scale = 1e-30;
    for (std::size_t i = 0; i < a.size(); ++i) {
      diff = nan_max(diff, std::fabs(double(a[i]) - b[i]));
      diff = nan_max(diff, std::fabs(double(a[i]) - c[i]));
      scale = std::max(scale, std::fabs(double(a[i])));
    }
    if (!(diff / scale < 1e-4)) rc = 1;
    std::vector<std::function<void()>> runs{run_row, run_generic};
    if (lanes) runs.emplace_back(run_lanes);
    const auto tm = time_alternating(runs, 3 * opts.min_seconds);
    const double tl = lanes ? tm[2] : tm[1];
    t.row({T == 1 ? "decode (1 token)" : "prefill 512 of " + std::to_string(ctx), fmt(double(T) / tm[0], 1),
           fmt(double(T) / tm[1], 1), lanes ? fmt(double(T) / tm[2], 1) : "-", fmt(tm[0] / tl), lanes ? fmt(tm[1] / tm[2]) : "-",
           fmt(diff / scale, 7)});
  }
  if (rc) std::printf("validation FAILED: tiled MLA differs from the row-wise kernel\n");

  // A batched decode step: 16 sequences, one token each, each with its own cache; one call per
  // sequence (what a step did before) against one attention_decode call, same bits required.
  constexpr int S = 16;
  std::printf("\nMLA batched decode, %d sequences with their own caches, K3 head sizes, %d heads, %d threads\n", S, d.heads,
              kernel_threads());
  table tb({{"context", 9}, {"alone tok/s", 12}, {"batched tok/s", 14}, {"batched / alone", 16}, {"same bits", 10}});
  for (const std::int64_t len : {std::int64_t{256}, opts.quick ? std::int64_t{1024} : std::int64_t{4096}}) {
    std::vector<std::vector<std::vector<bf16_t>>> seq_storage(S);
    std::vector<std::vector<bf16_t*>> seq_blocks(S);
    std::vector<mla::cache_view> views;
    std::vector<std::int64_t> pos(S, len - 1);
    for (int i = 0; i < S; ++i) {
      for (std::int64_t b = 0; b < (len + B - 1) / B; ++b) seq_storage[i].emplace_back(static_cast<std::size_t>(B) * W);
      for (auto& blk : seq_storage[i]) seq_blocks[i].push_back(blk.data());
      views.push_back({seq_blocks[i].data(), B});
      const auto c = normals(len * d.latent, 1.0f), r = normals(len * d.rope, 1.0f);
      mla::cache_write(views.back(), d, 0, len, c.data(), d.latent, r.data(), d.rope);
    }
    const auto qn = normals(S * d.heads * d.nope, 1.0f), qr = normals(S * d.heads * d.rope, 1.0f);
    const auto gate = normals(static_cast<std::size_t>(S) * d.heads * d.v, 1.0f);
    const std::int64_t n = d.heads * d.v;
    std::vector<float> alone(S * n), batched(S * n);
    auto run_alone = [&] {
      for (int i = 0; i < S; ++i)
        mla::attention(qn.data() + i * d.heads * d.nope, qr.data() + i * d.heads * d.rope, kvb.data(), views[i], d, len - 1, 1,
                       gate.data() + i * n, alone.data() + i * n);
    };
    auto run_batched = [&] {
      mla::attention_decode(qn.data(), qr.data(), kvb.data(), views.data(), pos.data(), S, d, gate.data(), batched.data());
    };
    run_alone();
    run_batched();
    const bool same = alone == batched;
    if (!same) rc = 1;
    const auto tm = time_alternating({run_alone, run_batched}, 3 * opts.min_seconds);
    tb.row({std::to_string(len), fmt(S / tm[0], 0), fmt(S / tm[1], 0), fmt(tm[0] / tm[1]), same ? "yes" : "NO"});
  }
  if (rc) std::printf("validation FAILED\n");
  return rc;
}

} // namespace k3::bench
