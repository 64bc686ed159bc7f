// Absorbed MLA over a paged bf16 latent cache vs the explicit (non-absorbed) fp64 formula:
// per head k = [W_UK c | k_rot], v = W_UV c, softmax(q·k·scale) v, K3 sigmoid gate.
#include <catch2/catch.hpp>

#include <cmath>
#include <span>
#include <vector>

#include <omp.h>

#include "kernels/common/bf16.hpp"
#include "kernels/mla/mla.hpp"
#include "tests/support/test_util.hpp"

using namespace k3;

namespace {

struct paged_cache {
  std::vector<std::vector<bf16_t>> storage;
  std::vector<bf16_t*> blocks;
  mla::cache_view view;
  /// fp32: rows hold floats (the exact-numerics mode), blocks twice the size.
  paged_cache(std::int64_t capacity, int block_size, int width, bool fp32 = false) {
    const std::int64_t n = (capacity + block_size - 1) / block_size;
    // Blocks allocated out of order in memory, as a pool would hand them out.
    for (std::int64_t i = 0; i < n; ++i) storage.emplace_back(static_cast<std::size_t>(block_size) * width * (fp32 ? 2 : 1));
    for (std::int64_t i = n - 1; i >= 0; --i) blocks.push_back(storage[static_cast<std::size_t>(i)].data());
    view = {blocks.data(), block_size, fp32};
  }
};

std::vector<double> reference(const std::vector<float>& qn, const std::vector<float>& qr, const std::vector<float>& kvb,
                              const mla::cache_view& c, const mla::dims& d, std::int64_t pos0, std::int64_t T,
                              const float* gate) {
  const int H = d.heads, N = d.nope, R = d.rope, L = d.latent, V = d.v, W = d.row_width();
  std::vector<double> out(T * H * V);
  for (std::int64_t t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      const std::int64_t P = pos0 + t + 1;
      std::vector<double> s(P);
      std::vector<std::vector<double>> vv(P, std::vector<double>(V));
      double mx = -1e300;
      for (std::int64_t p = 0; p < P; ++p) {
        const bf16_t* row = c.row(p, W);
        double dot = 0;
        for (int n = 0; n < N; ++n) {
          double kn = 0; // explicit k_nope = W_UK c
          for (int l = 0; l < L; ++l) kn += double(kvb[(h * (N + V) + n) * L + l]) * bf16_to_f32(row[l]);
          dot += qn[(t * H + h) * N + n] * kn;
        }
        for (int r = 0; r < R; ++r) dot += double(qr[(t * H + h) * R + r]) * bf16_to_f32(row[L + r]);
        s[p] = dot / std::sqrt(double(N + R));
        mx = std::max(mx, s[p]);
        for (int j = 0; j < V; ++j) {
          double x = 0;
          for (int l = 0; l < L; ++l) x += double(kvb[(h * (N + V) + N + j) * L + l]) * bf16_to_f32(row[l]);
          vv[p][j] = x;
        }
      }
      double z = 0;
      for (auto& x : s) z += x = std::exp(x - mx);
      for (int j = 0; j < V; ++j) {
        double o = 0;
        for (std::int64_t p = 0; p < P; ++p) o += s[p] / z * vv[p][j];
        if (gate) o /= 1.0 + std::exp(-double(gate[t * H * V + h * V + j]));
        out[(t * H + h) * V + j] = o;
      }
    }
  return out;
}

/// max |got − ref| / max |ref|, NaN in got giving NaN (so any bound fails).
double rel_max_diff(const std::vector<float>& got, const std::vector<float>& ref) {
  double scale = 1e-30;
  for (const float r : ref) scale = std::max(scale, std::fabs(double(r)));
  return test::max_abs_diff(std::span<const float>(got), std::span<const float>(ref)) / scale;
}

} // namespace

TEST_CASE("mla absorbed attention matches the explicit fp64 formula (prefill after a cached prefix)", "[mla]") {
  const std::uint64_t seed = 61;
  INFO("seed=" << seed);
  test::rng r(seed);
  const mla::dims d{3, 16, 8, 32, 12};
  const std::int64_t pos0 = 11, T = 9;
  paged_cache cache(pos0 + T, 7, d.row_width());
  auto ckv = r.normals((pos0 + T) * d.latent), kr = r.normals((pos0 + T) * d.rope);
  mla::cache_write(cache.view, d, 0, pos0 + T, ckv.data(), d.latent, kr.data(), d.rope);
  auto qn = r.normals(T * d.heads * d.nope), qr = r.normals(T * d.heads * d.rope);
  auto kvb = r.normals(d.heads * (d.nope + d.v) * d.latent, 0.2f);
  auto gate = r.normals(T * d.heads * d.v);
  for (const float* g : {static_cast<const float*>(nullptr), static_cast<const float*>(gate.data())}) {
    const auto ref = reference(qn, qr, kvb, cache.view, d, pos0, T, g);
    for (const isa path : test::isa_paths()) { // AVX-512: queries in the lanes; others: the generic tiles
      scoped_isa pin(path);
      std::vector<float> out(T * d.heads * d.v);
      mla::attention(qn.data(), qr.data(), kvb.data(), cache.view, d, pos0, T, g, out.data());
      INFO("gated=" << (g != nullptr) << " isa " << to_string(path));
      CHECK(test::rel_rmse(std::span<const float>(out), std::span<const double>(ref)) < 1e-5);
    }
  }
}

TEST_CASE("mla: one prefill equals token-by-token decode exactly", "[mla]") {
  test::rng r(62);
  const mla::dims d{2, 8, 4, 16, 8};
  const std::int64_t T = 13;
  paged_cache cache(T, 4, d.row_width());
  auto ckv = r.normals(T * d.latent), kr = r.normals(T * d.rope);
  auto qn = r.normals(T * d.heads * d.nope), qr = r.normals(T * d.heads * d.rope);
  auto kvb = r.normals(d.heads * (d.nope + d.v) * d.latent);
  mla::cache_write(cache.view, d, 0, T, ckv.data(), d.latent, kr.data(), d.rope);
  paged_cache c2(T, 4, d.row_width());
  for (std::int64_t t = 0; t < T; ++t)
    mla::cache_write(c2.view, d, t, 1, ckv.data() + t * d.latent, d.latent, kr.data() + t * d.rope, d.rope);
  // The contract (mla.hpp): bit for bit on the AVX-512 path (queries in the lanes, fixed sum
  // orders); the generic tiles (AVX2, scalar) group queries differently in prefill and decode
  // and agree to fp32 rounding.
  for (const isa path : test::isa_paths()) {
    scoped_isa pin(path);
    INFO("isa " << to_string(path));
    std::vector<float> all(T * d.heads * d.v), step(T * d.heads * d.v);
    mla::attention(qn.data(), qr.data(), kvb.data(), cache.view, d, 0, T, nullptr, all.data());
    for (std::int64_t t = 0; t < T; ++t)
      mla::attention(qn.data() + t * d.heads * d.nope, qr.data() + t * d.heads * d.rope, kvb.data(), c2.view, d, t, 1,
                     nullptr, step.data() + t * d.heads * d.v);
    if (path == isa::avx512) {
      CHECK(all == step);
    } else {
      double worst = 0;
      for (std::size_t i = 0; i < all.size(); ++i)
        worst = test::nan_max(worst, std::abs(double(all[i]) - step[i]) / std::max(1.0, std::abs(double(all[i]))));
      CHECK(worst <= 1e-6);
    }
  }
}

TEST_CASE("mla: the first token attends only to itself", "[mla]") {
  test::rng r(63);
  const mla::dims d{1, 4, 2, 8, 3};
  paged_cache cache(1, 1, d.row_width());
  auto ckv = r.normals(d.latent), kr = r.normals(d.rope), qn = r.normals(d.nope), qr = r.normals(d.rope);
  auto kvb = r.normals((d.nope + d.v) * d.latent);
  mla::cache_write(cache.view, d, 0, 1, ckv.data(), d.latent, kr.data(), d.rope);
  std::vector<float> out(d.v);
  mla::attention(qn.data(), qr.data(), kvb.data(), cache.view, d, 0, 1, nullptr, out.data());
  for (int j = 0; j < d.v; ++j) {
    double x = 0;
    for (int l = 0; l < d.latent; ++l) x += double(kvb[(d.nope + j) * d.latent + l]) * round_bf16(ckv[l]);
    CHECK(out[j] == Approx(x).epsilon(1e-5));
  }
}


TEST_CASE("mla: the tiled kernel equals the row-wise kernel over many tiles, odd shapes, bf16 and fp32 rows", "[mla]") {
  test::rng r(64);
  struct shape {
    mla::dims d;
    std::int64_t pos0, T;
    int block;
    bool fp32, gated;
  };
  const std::vector<shape> shapes = {
      {{3, 8, 4, 40, 5}, 0, 150, 16, false, true},   // three tiles inside one prefill
      {{1, 16, 8, 33, 7}, 130, 9, 7, false, false},  // a chunk after a cached prefix, blocks cross tiles
      {{4, 8, 8, 64, 8}, 200, 1, 64, true, true},    // decode, fp32 rows read in place
      {{2, 4, 4, 24, 3}, 61, 70, 20, true, false},   // fp32 rows copied (blocks not tile-aligned)
      {{5, 8, 2, 17, 4}, 0, 3, 5, false, true},      // fewer tokens than a group
      // Query rows per item (4 tokens × heads) spanning 2, 3 and 4 lane vectors on AVX-512,
      // latent sizes with a tail past the first 64 columns.
      {{5, 4, 4, 20, 3}, 10, 8, 8, false, true},
      {{9, 8, 4, 100, 6}, 40, 30, 16, false, true},
      {{16, 8, 4, 130, 5}, 0, 70, 32, false, false},
  };
  for (const auto& s : shapes) {
    const auto& d = s.d;
    const std::int64_t P = s.pos0 + s.T;
    auto ckv = r.normals(P * d.latent), kr = r.normals(P * d.rope);
    auto qn = r.normals(s.T * d.heads * d.nope), qr = r.normals(s.T * d.heads * d.rope);
    auto kvb = r.normals(d.heads * (d.nope + d.v) * d.latent), gate = r.normals(s.T * d.heads * d.v);
    paged_cache cache(P, s.block, d.row_width(), s.fp32);
    const auto& view = cache.view;
    mla::cache_write(view, d, 0, P, ckv.data(), d.latent, kr.data(), d.rope);
    std::vector<float> tiled(s.T * d.heads * d.v), rowwise(tiled.size());
    const float* g = s.gated ? gate.data() : nullptr;
    mla::attention_rowwise(qn.data(), qr.data(), kvb.data(), view, d, s.pos0, s.T, g, rowwise.data());
    for (const isa path : test::isa_paths()) {
      scoped_isa pin(path);
      mla::attention(qn.data(), qr.data(), kvb.data(), view, d, s.pos0, s.T, g, tiled.data());
      // Relative to the largest output (both are fp32 with different summation orders; against
      // fp64 the tiled kernel's error is the smaller of the two).
      INFO("heads " << d.heads << " latent " << d.latent << " pos0 " << s.pos0 << " T " << s.T << " fp32 " << s.fp32
                    << " isa " << to_string(path));
      CHECK(rel_max_diff(tiled, rowwise) < 1e-5);
    }
  }
}

TEST_CASE("mla: one prefill over several tiles equals chunked prefill and token-by-token decode", "[mla]") {
  test::rng r(65);
  const mla::dims d{3, 8, 4, 24, 6};
  const std::int64_t T = 140;
  auto ckv = r.normals(T * d.latent), kr = r.normals(T * d.rope);
  // Rows of huge magnitude: a query that must not see them gives them weight exactly 0 (a
  // masked weight, not an underflow: e^-87 · 1e30 would still show), or the prefill could not
  // equal the decode, which never has them in its tiles.
  for (const std::int64_t p : {std::int64_t{5}, std::int64_t{66}, std::int64_t{131}})
    for (int l = 0; l < d.latent; ++l) ckv[p * d.latent + l] *= 1e30f;
  auto qn = r.normals(T * d.heads * d.nope), qr = r.normals(T * d.heads * d.rope);
  auto kvb = r.normals(d.heads * (d.nope + d.v) * d.latent);
  for (const isa path : test::isa_paths()) {
    scoped_isa pin(path);
    INFO("isa " << to_string(path));
    paged_cache cache(T, 16, d.row_width()), c2(T, 16, d.row_width());
    mla::cache_write(cache.view, d, 0, T, ckv.data(), d.latent, kr.data(), d.rope);
    std::vector<float> all(T * d.heads * d.v), step(T * d.heads * d.v), chunked(T * d.heads * d.v);
    mla::attention(qn.data(), qr.data(), kvb.data(), cache.view, d, 0, T, nullptr, all.data());
    for (std::int64_t t = 0; t < T; ++t) {
      mla::cache_write(c2.view, d, t, 1, ckv.data() + t * d.latent, d.latent, kr.data() + t * d.rope, d.rope);
      mla::attention(qn.data() + t * d.heads * d.nope, qr.data() + t * d.heads * d.rope, kvb.data(), c2.view, d, t, 1,
                     nullptr, step.data() + t * d.heads * d.v);
    }
    for (std::int64_t t0 = 0; t0 < T; t0 += 37) { // chunks of 37 (groups of 4 and a remainder)
      const std::int64_t n = std::min<std::int64_t>(37, T - t0);
      mla::attention(qn.data() + t0 * d.heads * d.nope, qr.data() + t0 * d.heads * d.rope, kvb.data(), cache.view, d, t0,
                     n, nullptr, chunked.data() + t0 * d.heads * d.v);
    }
    if (path == isa::avx512) {
      // Queries in the lanes: every sum runs in a fixed order per query, whatever shares its item.
      CHECK(all == step);
      CHECK(all == chunked);
      continue;
    }
    // The generic path's weighted row sums are small GEMMs whose summation order may depend on
    // how many query rows share a call: equal to fp32 rounding, not bit for bit.
    // Relative to each token's largest output (the huge rows make some tokens' outputs huge).
    auto worst = [&](const std::vector<float>& b) {
      double rel = 0;
      const std::int64_t n = d.heads * d.v;
      for (std::int64_t t = 0; t < T; ++t) {
        double diff = 0, scale = 1e-30;
        for (std::int64_t i = t * n; i < (t + 1) * n; ++i) {
          const double e = std::fabs(double(all[i]) - b[i]);
          if (!(e <= diff)) diff = e; // NaN propagates
          scale = std::max(scale, std::fabs(double(all[i])));
        }
        if (!(diff / scale <= rel)) rel = diff / scale;
      }
      return rel;
    };
    CHECK(worst(step) < 1e-6);
    CHECK(worst(chunked) < 1e-6);
  }
}

TEST_CASE("mla: past 1024 positions the spans fold in order: prefill, chunks and decode agree at any thread count", "[mla]") {
  test::rng r(66);
  const mla::dims d{3, 8, 4, 24, 6};
  const std::int64_t P = 5200; // six softmax spans of 1024 positions on the AVX-512 path (decode: in waves)
  auto ckv = r.normals(P * d.latent), kr = r.normals(P * d.rope);
  auto qn = r.normals(P * d.heads * d.nope), qr = r.normals(P * d.heads * d.rope);
  auto kvb = r.normals(d.heads * (d.nope + d.v) * d.latent, 0.3f);
  paged_cache cache(P, 64, d.row_width());
  mla::cache_write(cache.view, d, 0, P, ckv.data(), d.latent, kr.data(), d.rope);
  const std::int64_t n = d.heads * d.v;
  const int threads = omp_get_max_threads();
  // The last 9 tokens as a 9-token chunk, then one at a time, at 1–4 threads (fewer token
  // groups than threads: the spans run in parallel and are folded afterwards).
  const std::int64_t t0 = P - 9;
  auto run = [&](std::int64_t pos0, std::int64_t T, std::vector<float>& out) {
    mla::attention(qn.data() + pos0 * d.heads * d.nope, qr.data() + pos0 * d.heads * d.rope, kvb.data(), cache.view, d, pos0,
                   T, nullptr, out.data() + (pos0 - t0) * n);
  };
  std::vector<float> rowwise(9 * n);
  mla::attention_rowwise(qn.data() + t0 * d.heads * d.nope, qr.data() + t0 * d.heads * d.rope, kvb.data(), cache.view, d, t0, 9,
                         nullptr, rowwise.data());
  for (const isa path : test::isa_paths()) {
    scoped_isa pin(path);
    std::vector<float> first(9 * n);
    for (int nt = 1; nt <= 4; ++nt) {
      omp_set_num_threads(nt);
      std::vector<float> chunk(9 * n), step(9 * n);
      run(t0, 9, chunk);
      for (std::int64_t t = t0; t < P; ++t) run(t, 1, step);
      INFO("isa " << to_string(path) << " threads " << nt);
      CHECK(rel_max_diff(chunk, rowwise) < 1e-5);
      if (path != isa::avx512) continue; // the generic path agrees to fp32 rounding only
      CHECK(chunk == step);
      if (nt == 1) first = chunk;
      CHECK(chunk == first);
    }
    omp_set_num_threads(threads);
  }
}

TEST_CASE("mla: a batched decode step gives each sequence the bits of its decode alone", "[mla]") {
  // Sequences at positions inside one tile, at tile and span edges and past several spans, each
  // with its own paged cache; 1 to 13 sequences (fewer than the threads, one 4-token group, a
  // ragged last group), heads that split evenly or not, bf16 and fp32 caches, with and without
  // the output gate, at 1–4 threads.
  test::rng r(67);
  const int threads = omp_get_max_threads();
  const std::vector<std::int64_t> all_pos{0, 1, 63, 64, 1023, 1024, 2100, 5, 700, 3071, 130, 9, 2};
  for (const mla::dims d : {mla::dims{3, 8, 4, 24, 6}, mla::dims{5, 16, 8, 32, 16}})
    for (const bool fp32 : {false, true})
      for (const std::int64_t N : {1, 2, 5, 13}) {
        std::vector<paged_cache> caches;
        std::vector<mla::cache_view> views;
        std::vector<std::int64_t> pos(all_pos.begin(), all_pos.begin() + N);
        for (std::int64_t i = 0; i < N; ++i) {
          const std::int64_t P = pos[static_cast<std::size_t>(i)] + 1;
          caches.emplace_back(P, 64, d.row_width(), fp32);
          auto ckv = r.normals(P * d.latent), kr = r.normals(P * d.rope);
          mla::cache_write(caches.back().view, d, 0, P, ckv.data(), d.latent, kr.data(), d.rope);
        }
        for (auto& c : caches) views.push_back(c.view);
        const std::int64_t n = d.heads * d.v;
        auto qn = r.normals(N * d.heads * d.nope), qr = r.normals(N * d.heads * d.rope);
        auto kvb = r.normals(d.heads * (d.nope + d.v) * d.latent, 0.3f);
        auto gate = r.normals(N * n);
        for (const bool gated : {false, true})
          for (const isa path : test::isa_paths()) {
            scoped_isa pin(path);
            for (int nt = 1; nt <= 4; ++nt) {
              omp_set_num_threads(nt);
              INFO("heads " << d.heads << " fp32 " << fp32 << " N " << N << " gated " << gated << " isa "
                            << to_string(path) << " threads " << nt);
              std::vector<float> batched(N * n, -7.0f), alone(N * n, -9.0f), rowwise(N * n);
              mla::attention_decode(qn.data(), qr.data(), kvb.data(), views.data(), pos.data(), N, d,
                                    gated ? gate.data() : nullptr, batched.data());
              for (std::int64_t i = 0; i < N; ++i) {
                const auto p = pos[static_cast<std::size_t>(i)];
                const float* g = gated ? gate.data() + i * n : nullptr;
                mla::attention(qn.data() + i * d.heads * d.nope, qr.data() + i * d.heads * d.rope, kvb.data(),
                               views[static_cast<std::size_t>(i)], d, p, 1, g, alone.data() + i * n);
                mla::attention_rowwise(qn.data() + i * d.heads * d.nope, qr.data() + i * d.heads * d.rope, kvb.data(),
                                       views[static_cast<std::size_t>(i)], d, p, 1, g, rowwise.data() + i * n);
              }
              CHECK(batched == alone);
              CHECK(rel_max_diff(batched, rowwise) < 1e-5);
            }
            omp_set_num_threads(threads);
          }
      }
}

TEST_CASE("mla: the vectorized exp is within 3e-7 of exp and gives exact zeros far below", "[mla]") {
  std::vector<float> x;
  for (float v = -87.0f; v <= 0.0f; v += 0.0137f) x.push_back(v);
  for (float v : {-1e-8f, 1e-8f, 0.5f, 10.0f, 80.0f}) x.push_back(v);
  auto y = x;
  mla::exp_inplace(y.data(), static_cast<int>(y.size()));
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(double(x[i]));
    const double e = std::fabs(double(y[i]) - want) / want;
    if (!(e <= worst)) worst = e;
  }
  CHECK(worst < 3e-7);
  std::vector<float> low = {-87.5f, -100.0f, -INFINITY};
  mla::exp_inplace(low.data(), 3);
  CHECK(low == std::vector<float>{0.0f, 0.0f, 0.0f});
}
