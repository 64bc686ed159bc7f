// [gpu] The forward-pass glue kernels (forward_ops.cuh, rms_norm_strided) and the MLA prefill
// kernel vs their CPU counterparts, odd shapes, seeded inputs, poisoned outputs. Skip cleanly
// without a GPU.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cstring>
#include <limits>
#include <random>

#include "kernels/common/bf16.hpp"
#include "kernels/cuda/forward_ops.cuh"
#include "kernels/cuda/mla_prefill.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/mla/mla.hpp"
#include "kernels/ops/activations.hpp"
#include "kernels/ops/attnres.hpp"
#include "kernels/ops/norms.hpp"
#include "kernels/sampling/sampler.hpp"
#include "tests/support/cuda_test_util.hpp"
#include "tests/support/test_util.hpp"

namespace {

using k3::test::to_device;
using k3::test::to_host;

using owned = k3::test::device_arena;

double rel(const std::vector<float>& a, const std::vector<float>& b) {
  return k3::test::rel_rmse(std::span<const float>(a), std::span<const float>(b));
}

std::vector<std::uint16_t> bits(const std::vector<k3::bf16_t>& v) {
  std::vector<std::uint16_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * 2);
  return out;
}

} // namespace

TEST_CASE("cuda forward glue kernels match the CPU steps", "[gpu][ops]") {
  if (k3::test::no_gpu()) return;
  k3::test::rng r(31337);
  owned o;
  SECTION("embed_rows and to_bf16 are bit-exact") {
    const int vocab = 37, cols = 70, rows = 9;
    const auto table_f = r.normals(std::size_t(vocab) * cols);
    std::vector<k3::bf16_t> table(table_f.size());
    k3::f32_to_bf16(table_f.data(), table.data(), static_cast<std::int64_t>(table.size()));
    std::vector<std::int32_t> ids(rows);
    for (auto& i : ids) i = r.below(vocab);
    float* out = o.poisoned<float>(std::size_t(rows) * cols);
    REQUIRE(k3::cuda::embed_rows(o.put(bits(table)), cols, o.put(ids), rows, out, nullptr).ok);
    const auto got = to_host(out, std::size_t(rows) * cols);
    for (int i = 0; i < rows; ++i)
      for (int c = 0; c < cols; ++c)
        REQUIRE(got[std::size_t(i) * cols + c] == k3::bf16_to_f32(table[std::size_t(ids[i]) * cols + c]));
    auto x = r.normals(1001, 3.f);
    x[5] = 0.f;
    x[6] = -0.f;
    std::vector<k3::bf16_t> want(x.size());
    k3::f32_to_bf16(x.data(), want.data(), static_cast<std::int64_t>(x.size()));
    std::uint16_t* y = o.poisoned<std::uint16_t>(x.size());
    REQUIRE(k3::cuda::to_bf16(o.put(x), static_cast<long long>(x.size()), y, nullptr).ok);
    CHECK(to_host(y, x.size()) == bits(want));
  }
  SECTION("glu (SiTU and SiLU), add_into, split_heads, gather, argmax") {
    const std::size_t n = 777;
    const auto g = r.normals(n, 3.f), u = r.normals(n, 20.f);
    std::vector<float> want(n);
    for (const bool situ : {true, false}) {
      if (situ) k3::ops::situ_glu(g.data(), u.data(), static_cast<std::int64_t>(n), {4.f, 25.f}, want.data());
      else k3::ops::silu_glu(g.data(), u.data(), static_cast<std::int64_t>(n), want.data());
      float* out = o.poisoned<float>(n);
      REQUIRE(k3::cuda::glu(o.put(g), o.put(u), static_cast<long long>(n), {situ, 4.f, 25.f}, out, nullptr).ok);
      CHECK(rel(to_host(out, n), want) < 1e-6);
    }
    float* dg = o.put(g);
    REQUIRE(k3::cuda::add_into(dg, o.put(u), static_cast<long long>(n), nullptr).ok);
    const auto sum = to_host(dg, n);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(sum[i] == g[i] + u[i]);
    const int rows = 7, nope = 5, rope = 3;
    const auto q = r.normals(std::size_t(rows) * (nope + rope));
    float* qn = o.poisoned<float>(std::size_t(rows) * nope);
    float* qr = o.poisoned<float>(std::size_t(rows) * rope);
    REQUIRE(k3::cuda::split_heads(o.put(q), rows, nope, rope, qn, qr, nullptr).ok);
    const auto hn = to_host(qn, std::size_t(rows) * nope), hr = to_host(qr, std::size_t(rows) * rope);
    for (int i = 0; i < rows; ++i) {
      for (int c = 0; c < nope; ++c) REQUIRE(hn[std::size_t(i) * nope + c] == q[std::size_t(i) * (nope + rope) + c]);
      for (int c = 0; c < rope; ++c) REQUIRE(hr[std::size_t(i) * rope + c] == q[std::size_t(i) * (nope + rope) + nope + c]);
    }
    const int vocab = 1000;
    auto logits = r.normals(std::size_t(rows) * vocab);
    logits[3 * vocab + 17] = 50.f; // ties resolve to the lower index
    logits[3 * vocab + 900] = 50.f;
    std::int32_t* ids = o.poisoned<std::int32_t>(rows);
    float* lp = o.poisoned<float>(rows);
    REQUIRE(k3::cuda::argmax_rows(o.put(logits), rows, vocab, ids, lp, nullptr).ok);
    const auto got = to_host(ids, rows);
    const auto got_lp = to_host(lp, rows);
    for (int i = 0; i < rows; ++i) {
      const auto* row = logits.data() + std::size_t(i) * vocab;
      const auto best = static_cast<std::int32_t>(std::max_element(row, row + vocab) - row);
      REQUIRE(got[i] == best);
      const std::vector<std::int32_t> pick = {best};
      const auto want_lp = k3::sampling::log_softmax_at(std::span<const float>(row, vocab), pick);
      CHECK(std::abs(got_lp[i] - want_lp[0]) < 1e-4);
    }
    CHECK(got[3] == 17);
    const std::vector<std::int32_t> pick = {6, 0, 3};
    float* gathered = o.poisoned<float>(pick.size() * vocab);
    REQUIRE(k3::cuda::gather_rows(o.put(logits), vocab, o.put(pick), 3, gathered, nullptr).ok);
    const auto gh = to_host(gathered, pick.size() * vocab);
    CHECK(std::memcmp(gh.data() + vocab, logits.data(), vocab * 4) == 0);
  }
  SECTION("apply_token_bitmask equals the host mask on the chosen rows, others untouched") {
    const int rows = 4, vocab = 200; // not a multiple of 64: the last word is partial
    const int words = (vocab + 63) / 64;
    const auto logits = r.normals(std::size_t(rows) * vocab);
    const std::vector<std::int32_t> pick = {2, 0};
    std::vector<std::uint64_t> masks(pick.size() * words);
    std::mt19937_64 bits(5);
    for (auto& w : masks) w = bits() & bits(); // ~1/4 of the ids allowed
    float* dl = o.put(logits);
    REQUIRE(k3::cuda::apply_token_bitmask(dl, vocab, o.put(masks), words, o.put(pick), 2, nullptr).ok);
    const auto got = to_host(dl, logits.size());
    std::vector<float> want = logits;
    for (std::size_t k = 0; k < pick.size(); ++k)
      for (int v = 0; v < vocab; ++v)
        if (!((masks[k * words + std::size_t(v / 64)] >> (v % 64)) & 1))
          want[std::size_t(pick[k]) * vocab + std::size_t(v)] = -std::numeric_limits<float>::infinity();
    REQUIRE(std::memcmp(got.data(), want.data(), want.size() * 4) == 0);
  }
  SECTION("rms_norm_strided over the latent part of cache rows") {
    const int rows = 5, n = 48, ld = 64;
    const auto x = r.normals(std::size_t(rows) * ld), w = r.normals(n);
    std::vector<float> want = x;
    for (int i = 0; i < rows; ++i)
      k3::ops::rms_norm(x.data() + std::size_t(i) * ld, w.data(), 1e-6f, 1, n, want.data() + std::size_t(i) * ld);
    float* dx = o.put(x);
    REQUIRE(k3::cuda::rms_norm_strided(dx, ld, o.put(w), 1e-6f, rows, n, dx, ld, nullptr).ok);
    CHECK(rel(to_host(dx, x.size()), want) < 1e-6);
  }
  SECTION("attnres_mix with banked blocks and a row selection") {
    const int T = 6, n = 96, nb = 3;
    std::vector<std::vector<float>> src;
    for (int s = 0; s <= nb; ++s) src.push_back(r.normals(std::size_t(T) * n));
    const auto w = r.normals(n, 0.2f);
    std::vector<const float*> ptrs;
    for (const auto& s : src) ptrs.push_back(s.data());
    std::vector<float> want(std::size_t(T) * n);
    k3::ops::attnres_mix_batch(ptrs.data(), nb + 1, w.data(), 1e-5f, T, n, want.data());
    std::vector<float> bank;
    for (int s = 0; s < nb; ++s) bank.insert(bank.end(), src[s].begin(), src[s].end());
    float* out = o.poisoned<float>(std::size_t(T) * n);
    float* dbank = o.put(bank);
    float* dcur = o.put(src[nb]);
    const float* dw = o.put(w);
    REQUIRE(k3::cuda::attnres_mix(dbank, std::int64_t(T) * n, nb, dcur, dw, 1e-5f, nullptr, T, n, out, nullptr).ok);
    CHECK(rel(to_host(out, want.size()), want) < 1e-5);
    const std::vector<std::int32_t> pick = {5, 2};
    float* out2 = o.poisoned<float>(pick.size() * n);
    REQUIRE(k3::cuda::attnres_mix(dbank, std::int64_t(T) * n, nb, dcur, dw, 1e-5f, o.put(pick), 2, n, out2, nullptr).ok);
    const auto g2 = to_host(out2, pick.size() * n);
    std::vector<float> w2(want.begin() + 5 * n, want.begin() + 6 * n);
    w2.insert(w2.end(), want.begin() + 2 * n, want.begin() + 3 * n);
    CHECK(rel(g2, w2) < 1e-5);
  }
}

TEST_CASE("cuda mla cache write and prefill match the CPU cache and attention", "[gpu][mla]") {
  if (k3::test::no_gpu()) return;
  k3::test::rng r(2024);
  struct shape {
    int heads, nope, rope, latent, v, block;
    std::int64_t pos0, T;
    bool gated;
  };
  for (const auto& s : {shape{3, 128, 64, 512, 128, 64, 0, 37, true}, shape{2, 32, 16, 64, 48, 7, 20, 50, false},
                        shape{1, 16, 8, 32, 24, 16, 100, 1, true}}) {
    INFO("heads=" << s.heads << " latent=" << s.latent << " block=" << s.block << " pos0=" << s.pos0 << " T=" << s.T);
    owned o;
    const k3::mla::dims d{s.heads, s.nope, s.rope, s.latent, s.v};
    const int W = d.row_width();
    const std::int64_t total = s.pos0 + s.T, nb = (total + s.block - 1) / s.block;
    std::vector<std::vector<k3::bf16_t>> blocks(static_cast<std::size_t>(nb), std::vector<k3::bf16_t>(std::size_t(s.block) * W));
    std::vector<k3::bf16_t*> ptrs;
    for (auto& b : blocks) ptrs.push_back(b.data());
    const k3::mla::cache_view cv{ptrs.data(), s.block, false};
    const auto rows = r.normals(std::size_t(total) * W); // [c_kv | k_rot] rows, fp32
    k3::mla::cache_write(cv, d, 0, total, rows.data(), W, rows.data() + s.latent, W);
    const auto kv_b = r.normals(std::size_t(s.heads) * (s.nope + s.v) * s.latent, 0.05f);
    const auto qn = r.normals(std::size_t(s.T) * s.heads * s.nope), qr = r.normals(std::size_t(s.T) * s.heads * s.rope);
    const auto gate = r.normals(std::size_t(s.T) * s.heads * s.v);
    std::vector<float> want(std::size_t(s.T) * s.heads * s.v);
    k3::mla::attention(qn.data(), qr.data(), kv_b.data(), cv, d, s.pos0, s.T, s.gated ? gate.data() : nullptr, want.data());

    // Device cache: blocks holding two layers' rows; this test's layer is the second one
    // (layer_offset = one layer's rows), the first stays poisoned.
    const std::int64_t layer_offset = std::int64_t(s.block) * W;
    std::vector<const std::uint16_t*> dblocks;
    for (std::int64_t b = 0; b < nb; ++b) dblocks.push_back(o.poisoned<std::uint16_t>(std::size_t(2 * s.block) * W));
    const std::uint16_t* const* table = o.put(dblocks);
    std::vector<const std::uint16_t* const*> tok_tables(static_cast<std::size_t>(total), table);
    std::vector<std::int64_t> tok_pos(static_cast<std::size_t>(total));
    for (std::int64_t p = 0; p < total; ++p) tok_pos[static_cast<std::size_t>(p)] = p;
    auto st = k3::cuda::mla_cache_write(o.put(rows), W, W, o.put(tok_tables), o.put(tok_pos), s.block, layer_offset,
                                        static_cast<int>(total), nullptr);
    INFO(st.message);
    REQUIRE(st.ok);
    for (std::int64_t b = 0; b < nb; ++b) { // the cache is bit-identical to the CPU's
      const auto got = to_host(dblocks[static_cast<std::size_t>(b)] + layer_offset, std::size_t(s.block) * W);
      const auto want_b = bits(blocks[static_cast<std::size_t>(b)]);
      const std::size_t used = std::size_t(std::min<std::int64_t>(s.block, total - b * s.block)) * W;
      REQUIRE(std::memcmp(got.data(), want_b.data(), used * 2) == 0);
    }
    float* out = o.poisoned<float>(want.size());
    const k3::cuda::mla_dims cd{s.heads, s.nope, s.rope, s.latent, s.v};
    st = k3::cuda::mla_prefill(o.put(qn), o.put(qr), o.put(kv_b), table, s.block, layer_offset, s.pos0, static_cast<int>(s.T), cd,
                               s.gated ? o.put(gate) : nullptr, out, nullptr);
    INFO(st.message);
    REQUIRE(st.ok);
    CHECK(rel(to_host(out, want.size()), want) < 1e-5);
  }
}
