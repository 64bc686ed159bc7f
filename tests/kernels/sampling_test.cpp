// Sampling: greedy, seeded determinism, the support of top-k / top-p / min-p, the sampled
// distribution, penalties and logprobs.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <set>

#include "kernels/sampling/sampler.hpp"

using namespace k3::sampling;

namespace {

std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

std::map<int, int> histogram(const params& p, const std::vector<float>& logits, int n, std::uint64_t seed) {
  sampler s(p, seed);
  std::map<int, int> h;
  for (int i = 0; i < n; ++i) {
    auto l = logits;
    ++h[s.sample(l).token];
  }
  return h;
}

} // namespace

TEST_CASE("greedy picks the argmax, lowest id on ties", "[sampling]") {
  params p;
  p.temperature = 0.0f;
  sampler s(p, 1);
  std::vector<float> l = {0.1f, 3.0f, -1.0f, 3.0f};
  CHECK(s.sample(l).token == 1);
}

TEST_CASE("the same seed gives the same tokens and another seed differs", "[sampling]") {
  params p;
  p.temperature = 0.8f;
  p.top_p = 0.95f;
  std::vector<float> base(1000);
  for (int i = 0; i < 1000; ++i) base[i] = std::sin(i * 0.37f) * 3.0f;
  auto run = [&](std::uint64_t seed) {
    sampler s(p, seed);
    std::vector<int> out;
    for (int i = 0; i < 50; ++i) {
      auto l = base;
      out.push_back(s.sample(l).token);
    }
    return out;
  };
  CHECK(run(42) == run(42));
  CHECK(run(42) != run(43));
}

TEST_CASE("top-k, top-p and min-p restrict the support exactly", "[sampling]") {
  const auto l = logits_of({0.5, 0.3, 0.15, 0.05});
  params k;
  k.top_k = 2;
  auto hk = histogram(k, l, 3000, 7);
  CHECK(hk.size() == 2);
  CHECK(hk.count(0) == 1);
  CHECK(hk.count(1) == 1);
  params tp;
  tp.top_p = 0.79f; // 0.5 + 0.3 ≥ 0.79: tokens {0, 1}
  auto hp = histogram(tp, l, 3000, 8);
  CHECK(hp.size() == 2);
  params tp2;
  tp2.top_p = 0.81f; // needs the third token
  CHECK(histogram(tp2, l, 3000, 9).size() == 3);
  params mp;
  mp.min_p = 0.4f; // keep p ≥ 0.4·0.5 = 0.2 -> {0, 1}
  auto hm = histogram(mp, l, 3000, 10);
  CHECK(hm.size() == 2);
  CHECK(hm.count(2) == 0);
}

TEST_CASE("draws follow the distribution (temperature 1) and sharpen with temperature", "[sampling]") {
  const std::vector<double> probs = {0.4, 0.3, 0.2, 0.1};
  const auto l = logits_of(probs);
  const int n = 40000;
  auto h = histogram(params{}, l, n, 11);
  for (int i = 0; i < 4; ++i) {
    const double f = double(h[i]) / n, sd = std::sqrt(probs[i] * (1 - probs[i]) / n);
    INFO("token " << i << " freq " << f);
    CHECK(std::fabs(f - probs[i]) < 5 * sd);
  }
  params cold;
  cold.temperature = 0.5f; // p ∝ p^2: 16:9:4:1
  auto hc = histogram(cold, l, n, 12);
  CHECK(double(hc[0]) / n == Approx(16.0 / 30).margin(0.02));
}

TEST_CASE("repetition, frequency and presence penalties", "[sampling]") {
  params p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  sampler s(p, 1);
  const std::int32_t prompt[] = {0};
  s.observe_prompt(prompt);
  std::vector<float> l = {2.0f, 1.5f, -1.0f};
  CHECK(s.sample(l).token == 1); // 2.0 / 2 = 1.0 < 1.5
  params f;
  f.temperature = 0.0f;
  f.frequency_penalty = 0.4f;
  sampler sf(f, 1);
  sf.accept(0);
  sf.accept(0);
  std::vector<float> l2 = {2.0f, 1.5f};
  CHECK(sf.sample(l2).token == 1); // 2.0 − 0.8 = 1.2
  params pr;
  pr.temperature = 0.0f;
  pr.presence_penalty = 0.6f;
  sampler sp(pr, 1);
  sp.accept(0);
  sp.accept(0);
  std::vector<float> l3 = {2.0f, 1.5f};
  CHECK(sp.sample(l3).token == 1); // 2.0 − 0.6 = 1.4
}

TEST_CASE("logprobs are the raw distribution's, top-N most likely first", "[sampling]") {
  params p;
  p.temperature = 0.0f;
  p.top_logprobs = 3;
  p.frequency_penalty = 1.0f;
  sampler s(p, 1);
  s.accept(0);
  std::vector<float> l = {2.0f, 1.5f, 0.5f, -3.0f};
  const auto raw = l;
  const auto r = s.sample(l);
  const std::int32_t ids[] = {0, 1, 2, 3};
  const auto lp = log_softmax_at(raw, ids);
  CHECK(r.token == 1);
  CHECK(r.logprob == Approx(lp[1]));
  REQUIRE(r.top.size() == 3);
  CHECK(r.top[0].id == 0);
  CHECK(r.top[0].logprob == Approx(lp[0]));
  CHECK(r.top[2].id == 2);
}

TEST_CASE("invalid parameters name the field", "[sampling]") {
  params p;
  p.top_p = 0.0f;
  CHECK(validate(p).value().find("top_p") != std::string::npos);
  p = {};
  p.temperature = -1;
  CHECK(validate(p).value().find("temperature") != std::string::npos);
  p = {};
  p.repetition_penalty = 0;
  CHECK(validate(p).value().find("repetition_penalty") != std::string::npos);
  CHECK_FALSE(validate(params{}).has_value());
}
