// Router vs a brute-force per-token loop; bias used for selection only; grouped top-k;
// the expert permutation for grouped GEMMs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/router/router.hpp"
#include "tests/support/test_util.hpp"

using namespace k3;

namespace {

void brute(const float* logits, const float* bias, const router::params& p, std::vector<int>& ids,
           std::vector<double>& w) {
  const int E = p.num_experts, G = p.num_groups, per = E / G;
  std::vector<double> s(E), c(E);
  for (int e = 0; e < E; ++e) {
    s[e] = 1.0 / (1.0 + std::exp(-double(logits[e])));
    c[e] = s[e] + (bias ? bias[e] : 0.0);
  }
  std::vector<int> groups(G);
  std::iota(groups.begin(), groups.end(), 0);
  std::vector<double> gs(G);
  for (int g = 0; g < G; ++g) {
    std::vector<double> v(c.begin() + g * per, c.begin() + (g + 1) * per);
    std::sort(v.rbegin(), v.rend());
    gs[g] = v[0] + (per > 1 ? v[1] : 0.0);
  }
  std::stable_sort(groups.begin(), groups.end(), [&](int a, int b) { return gs[a] > gs[b]; });
  std::vector<int> cand;
  for (int e = 0; e < E; ++e)
    if (G == 1 || std::find(groups.begin(), groups.begin() + p.topk_group, e / per) != groups.begin() + p.topk_group)
      cand.push_back(e);
  std::stable_sort(cand.begin(), cand.end(), [&](int a, int b) { return c[a] > c[b]; });
  ids.assign(cand.begin(), cand.begin() + p.top_k);
  w.clear();
  double sum = 0;
  for (int e : ids) sum += s[e];
  for (int e : ids) w.push_back((p.renormalize ? s[e] / (sum + 1e-20) : s[e]) * p.scaling);
}

} // namespace

TEST_CASE("router matches a brute-force loop (ungrouped and grouped)", "[router]") {
  const std::uint64_t seed = 71;
  INFO("seed=" << seed);
  test::rng r(seed);
  const router::params cases[] = {{256, 8, 1, 1, true, 2.446f}, {896, 16, 1, 1, true, 1.0f},
                                  {64, 6, 8, 3, true, 1.0f},    {33, 5, 1, 1, false, 1.5f}};
  for (const auto& p : cases) {
    const std::int64_t T = 7;
    auto logits = r.normals(T * p.num_experts, 2.0f);
    auto bias = r.normals(p.num_experts, 0.3f);
    std::vector<std::int32_t> ids(T * p.top_k);
    std::vector<float> w(T * p.top_k);
    router::route(logits.data(), T, bias.data(), p, ids.data(), w.data());
    for (std::int64_t t = 0; t < T; ++t) {
      std::vector<int> bi;
      std::vector<double> bw;
      brute(logits.data() + t * p.num_experts, bias.data(), p, bi, bw);
      INFO("E=" << p.num_experts << " k=" << p.top_k << " groups=" << p.num_groups << " t=" << t);
      for (int j = 0; j < p.top_k; ++j) {
        REQUIRE(ids[t * p.top_k + j] == bi[j]);
        REQUIRE(w[t * p.top_k + j] == Approx(bw[j]).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("router: the correction bias chooses but does not weigh", "[router]") {
  // Expert 0 has the highest logit; a large bias on expert 3 selects it instead of expert 1,
  // yet its weight comes from its own (unbiased) sigmoid score.
  const router::params p{4, 2, 1, 1, false, 1.0f};
  const float logits[4] = {3.0f, 2.0f, 0.0f, -1.0f};
  const float bias[4] = {0.0f, 0.0f, 0.0f, 5.0f};
  std::int32_t ids[2];
  float w[2];
  router::route(logits, 1, bias, p, ids, w);
  CHECK(ids[0] == 3);
  CHECK(ids[1] == 0);
  CHECK(w[0] == Approx(1.0 / (1.0 + std::exp(1.0))));
  CHECK(w[1] == Approx(1.0 / (1.0 + std::exp(-3.0))));
}

TEST_CASE("router rejects inconsistent parameters naming the field", "[router]") {
  float l[4] = {};
  std::int32_t ids[8];
  float w[8];
  CHECK_THROWS_WITH(router::route(l, 1, nullptr, {4, 5, 1, 1, true, 1}, ids, w), Catch::Contains("num_experts_per_token"));
  CHECK_THROWS_WITH(router::route(l, 1, nullptr, {4, 1, 3, 1, true, 1}, ids, w), Catch::Contains("num_expert_group"));
}

TEST_CASE("moe plan sorts assignments by expert and inverts", "[router]") {
  test::rng r(72);
  const int E = 10, k = 3;
  const std::int64_t T = 17;
  std::vector<std::int32_t> ids(T * k);
  for (std::int64_t t = 0; t < T; ++t) {
    std::vector<int> all(E);
    std::iota(all.begin(), all.end(), 0);
    for (int j = 0; j < k; ++j) {
      std::swap(all[j], all[j + r.below(E - j)]);
      ids[t * k + j] = all[j];
    }
  }
  const auto pl = router::plan(ids.data(), T, k, E);
  REQUIRE(pl.offsets.front() == 0);
  REQUIRE(pl.offsets.back() == T * k);
  for (int e = 0; e < E; ++e)
    for (std::int64_t row = pl.offsets[e]; row < pl.offsets[e + 1]; ++row) {
      REQUIRE(ids[pl.token[row] * k + pl.slot[row]] == e);
      REQUIRE(pl.row_of[pl.token[row] * k + pl.slot[row]] == row);
      if (row > pl.offsets[e]) REQUIRE(pl.token[row] > pl.token[row - 1]); // stable in t
    }
  ids[4] = E;
  CHECK_THROWS_AS(router::plan(ids.data(), T, k, E), std::invalid_argument);
}
