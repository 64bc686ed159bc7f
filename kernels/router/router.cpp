#include "kernels/router/router.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/common/parallel.hpp"

namespace k3::router {
namespace {

void validate(const params& p) {
  auto fail = [](const std::string& m) { throw std::invalid_argument("router: " + m); };
  if (p.num_experts <= 0) fail("num_experts must be positive");
  if (p.top_k <= 0 || p.top_k > p.num_experts)
    fail("num_experts_per_token=" + std::to_string(p.top_k) + " must be in [1, num_experts]");
  if (p.num_groups <= 0 || p.num_experts % p.num_groups != 0)
    fail("num_expert_group=" + std::to_string(p.num_groups) + " must divide num_experts");
  if (p.topk_group <= 0 || p.topk_group > p.num_groups) fail("topk_group must be in [1, num_expert_group]");
  if (p.top_k > p.topk_group * (p.num_experts / p.num_groups)) fail("top_k exceeds the experts in kept groups");
}

// Strict weak order: higher score first, then lower id.
inline bool better(float a, int ia, float b, int ib) { return a > b || (a == b && ia < ib); }

} // namespace

void route(const float* logits, std::int64_t T, const float* bias, const params& p, std::int32_t* ids,
           float* weights) {
  validate(p);
  const int E = p.num_experts, k = p.top_k, G = p.num_groups, per = E / G;
  // Tokens are routed independently, so a batch's tokens go over the pool (a 16-token decode
  // step ran them serially on the calling thread while the other waited: ~1% of the step on
  // the test checkpoint); each token's result is the same wherever it runs.
  parallel_for_work(T, T * E * 24, [&](std::int64_t t) {
    thread_local std::vector<float> s, choice, gscore;
    thread_local std::vector<int> order, gorder;
    thread_local std::vector<char> keep;
    s.resize(static_cast<std::size_t>(E));
    choice.resize(static_cast<std::size_t>(E));
    order.resize(static_cast<std::size_t>(E));
    keep.resize(static_cast<std::size_t>(E));
    gorder.resize(static_cast<std::size_t>(G));
    gscore.resize(static_cast<std::size_t>(G));
    const float* lt = logits + t * E;
    for (int e = 0; e < E; ++e) {
      s[e] = 1.0f / (1.0f + std::exp(-lt[e]));
      choice[e] = s[e] + (bias ? bias[e] : 0.0f);
    }
    std::fill(keep.begin(), keep.end(), 1);
    if (G > 1 && p.topk_group < G) {
      for (int g = 0; g < G; ++g) {
        float m1 = -INFINITY, m2 = -INFINITY;
        for (int e = g * per; e < (g + 1) * per; ++e) {
          if (choice[e] > m1) {
            m2 = m1;
            m1 = choice[e];
          } else if (choice[e] > m2) {
            m2 = choice[e];
          }
        }
        gscore[g] = per >= 2 ? m1 + m2 : m1;
      }
      std::iota(gorder.begin(), gorder.end(), 0);
      std::partial_sort(gorder.begin(), gorder.begin() + p.topk_group, gorder.end(),
                        [&](int a, int b) { return better(gscore[a], a, gscore[b], b); });
      std::fill(keep.begin(), keep.end(), 0);
      for (int i = 0; i < p.topk_group; ++i)
        std::fill(keep.begin() + gorder[i] * per, keep.begin() + (gorder[i] + 1) * per, 1);
    }
    int n = 0;
    for (int e = 0; e < E; ++e)
      if (keep[e]) order[n++] = e;
    std::partial_sort(order.begin(), order.begin() + k, order.begin() + n,
                      [&](int a, int b) { return better(choice[a], a, choice[b], b); });
    float sum = 0;
    for (int j = 0; j < k; ++j) {
      ids[t * k + j] = order[j];
      weights[t * k + j] = s[order[j]]; // unbiased score
      sum += s[order[j]];
    }
    const float norm = p.renormalize ? 1.0f / (sum + 1e-20f) : 1.0f;
    for (int j = 0; j < k; ++j) weights[t * k + j] *= norm * p.scaling;
  });
}

moe_plan plan(const std::int32_t* ids, std::int64_t T, int k, int num_experts) {
  moe_plan pl;
  const std::int64_t n = T * k;
  pl.offsets.assign(static_cast<std::size_t>(num_experts) + 1, 0);
  for (std::int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= num_experts)
      throw std::invalid_argument("router::plan: expert id " + std::to_string(ids[i]) + " out of range");
    ++pl.offsets[static_cast<std::size_t>(ids[i]) + 1];
  }
  std::partial_sum(pl.offsets.begin(), pl.offsets.end(), pl.offsets.begin());
  std::vector<std::int64_t> cursor(pl.offsets.begin(), pl.offsets.end() - 1);
  pl.token.resize(static_cast<std::size_t>(n));
  pl.slot.resize(static_cast<std::size_t>(n));
  pl.row_of.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = cursor[static_cast<std::size_t>(ids[i])]++;
    pl.token[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(i / k);
    pl.slot[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(i % k);
    pl.row_of[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(r);
  }
  return pl;
}

} // namespace k3::router
