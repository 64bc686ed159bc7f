#include "kernels/sampling/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace k3::sampling {
namespace {

struct lse {
  float max;
  double log_sum;
};

lse log_sum_exp(std::span<const float> x) {
  const float m = *std::max_element(x.begin(), x.end());
  double s = 0;
  for (float v : x) s += std::exp(static_cast<double>(v - m));
  return {m, std::log(s)};
}

inline bool prob_order(float pa, std::int32_t a, float pb, std::int32_t b) { return pa > pb || (pa == pb && a < b); }

} // namespace

std::optional<std::string> validate(const params& p) {
  if (!(p.temperature >= 0.0f) || p.temperature > 100.0f) return "temperature must be in [0, 100]";
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return "top_p must be in (0, 1]";
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return "min_p must be in [0, 1]";
  if (p.top_k < -1) return "top_k must be -1, 0 (off) or positive";
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) return "presence_penalty must be in [-2, 2]";
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) return "frequency_penalty must be in [-2, 2]";
  if (!(p.repetition_penalty > 0.0f && p.repetition_penalty <= 10.0f)) return "repetition_penalty must be in (0, 10]";
  if (p.top_logprobs < 0 || p.top_logprobs > 20) return "top_logprobs must be in [0, 20]";
  return std::nullopt;
}

sampler::sampler(const params& p, std::uint64_t seed) : p_(p), rng_(seed) {}

void sampler::observe_prompt(std::span<const std::int32_t> tokens) {
  if (p_.repetition_penalty != 1.0f) seen_.insert(tokens.begin(), tokens.end());
}

void sampler::accept(std::int32_t token) {
  if (p_.repetition_penalty != 1.0f) seen_.insert(token);
  if (p_.frequency_penalty != 0.0f || p_.presence_penalty != 0.0f) ++counts_[token];
}

void sampler::apply_penalties(std::span<float> logits) const {
  const auto n = static_cast<std::int32_t>(logits.size());
  if (p_.repetition_penalty != 1.0f)
    for (std::int32_t t : seen_) {
      if (t < 0 || t >= n) continue;
      float& l = logits[static_cast<std::size_t>(t)];
      l = l > 0 ? l / p_.repetition_penalty : l * p_.repetition_penalty;
    }
  for (const auto& [t, c] : counts_) {
    if (t < 0 || t >= n) continue;
    logits[static_cast<std::size_t>(t)] -= p_.frequency_penalty * static_cast<float>(c) + p_.presence_penalty;
  }
}

result sampler::sample(std::span<float> logits) {
  result r;
  const std::size_t V = logits.size();
  // Raw log-probabilities first (before penalties and temperature touch the logits).
  const lse raw = log_sum_exp(logits);
  auto raw_lp = [&](std::int32_t id) {
    return static_cast<float>(static_cast<double>(logits[static_cast<std::size_t>(id)] - raw.max) - raw.log_sum);
  };
  if (p_.top_logprobs > 0) {
    const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(p_.top_logprobs), V);
    cand_.resize(V);
    std::iota(cand_.begin(), cand_.end(), 0);
    std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(n), cand_.end(),
                      [&](std::int32_t a, std::int32_t b) {
                        return prob_order(logits[static_cast<std::size_t>(a)], a, logits[static_cast<std::size_t>(b)], b);
                      });
    for (std::size_t i = 0; i < n; ++i) r.top.push_back({cand_[i], raw_lp(cand_[i])});
  }
  std::vector<float> raw_copy; // the chosen token's raw logprob needs the unpenalised value
  const bool penalised = p_.repetition_penalty != 1.0f || !counts_.empty();
  if (penalised) {
    raw_copy.assign(logits.begin(), logits.end());
    apply_penalties(logits);
  }
  auto finish = [&](std::int32_t tok) {
    r.token = tok;
    const float l = penalised ? raw_copy[static_cast<std::size_t>(tok)] : logits[static_cast<std::size_t>(tok)];
    r.logprob = static_cast<float>(static_cast<double>(l - raw.max) - raw.log_sum);
    return r;
  };

  if (p_.temperature == 0.0f || p_.top_k == 1) {
    std::int32_t best = 0;
    for (std::size_t i = 1; i < V; ++i)
      if (logits[i] > logits[static_cast<std::size_t>(best)]) best = static_cast<std::int32_t>(i);
    return finish(best);
  }

  // Candidates: top-k (or all), as probabilities at temperature T.
  const float inv_t = 1.0f / p_.temperature;
  cand_.resize(V);
  std::iota(cand_.begin(), cand_.end(), 0);
  auto by_logit = [&](std::int32_t a, std::int32_t b) {
    return prob_order(logits[static_cast<std::size_t>(a)], a, logits[static_cast<std::size_t>(b)], b);
  };
  std::size_t n = V;
  if (p_.top_k > 0 && static_cast<std::size_t>(p_.top_k) < V) {
    n = static_cast<std::size_t>(p_.top_k);
    std::nth_element(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(n - 1), cand_.end(), by_logit);
    cand_.resize(n);
  }
  float mx = -INFINITY;
  for (std::size_t i = 0; i < n; ++i) mx = std::max(mx, logits[static_cast<std::size_t>(cand_[i])]);
  prob_.resize(n);
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    prob_[i] = std::exp((logits[static_cast<std::size_t>(cand_[i])] - mx) * inv_t);
    total += prob_[i];
  }
  // min-p: drop tokens below min_p × the most likely token's probability (max prob ∝ 1).
  auto keep_if = [&](auto pred) {
    std::size_t w = 0;
    total = 0;
    for (std::size_t i = 0; i < cand_.size(); ++i)
      if (pred(i)) {
        cand_[w] = cand_[i];
        prob_[w] = prob_[i];
        total += prob_[w];
        ++w;
      }
    cand_.resize(w);
    prob_.resize(w);
  };
  if (p_.min_p > 0.0f) keep_if([&](std::size_t i) { return prob_[i] >= p_.min_p; });
  if (p_.top_p < 1.0f) {
    // Order by probability; partial sort of a prefix suffices unless the head is flat.
    std::vector<std::size_t> idx(cand_.size());
    std::iota(idx.begin(), idx.end(), 0);
    auto by_prob = [&](std::size_t a, std::size_t b) { return prob_order(prob_[a], cand_[a], prob_[b], cand_[b]); };
    std::size_t head = std::min<std::size_t>(idx.size(), 1024);
    std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(head), idx.end(), by_prob);
    const double target = p_.top_p * total;
    double cum = 0;
    std::size_t keep = 0;
    for (; keep < head && cum < target; ++keep) cum += prob_[idx[keep]];
    if (cum < target && head < idx.size()) {
      std::sort(idx.begin() + static_cast<std::ptrdiff_t>(head), idx.end(), by_prob);
      for (; keep < idx.size() && cum < target; ++keep) cum += prob_[idx[keep]];
    }
    std::vector<std::int32_t> c2(keep);
    std::vector<float> p2(keep);
    for (std::size_t i = 0; i < keep; ++i) {
      c2[i] = cand_[idx[i]];
      p2[i] = prob_[idx[i]];
    }
    cand_.swap(c2);
    prob_.swap(p2);
    total = cum;
  } else {
    // Deterministic order for the draw independent of how nth_element left the candidates.
    std::vector<std::size_t> idx(cand_.size());
    std::iota(idx.begin(), idx.end(), 0);
    if (cand_.size() < V) {
      std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return cand_[a] < cand_[b]; });
      std::vector<std::int32_t> c2(idx.size());
      std::vector<float> p2(idx.size());
      for (std::size_t i = 0; i < idx.size(); ++i) {
        c2[i] = cand_[idx[i]];
        p2[i] = prob_[idx[i]];
      }
      cand_.swap(c2);
      prob_.swap(p2);
    }
  }
  const double u = rng_.uniform() * total;
  double cum = 0;
  for (std::size_t i = 0; i < cand_.size(); ++i) {
    cum += prob_[i];
    if (u < cum) return finish(cand_[i]);
  }
  return finish(cand_.back()); // u rounded up to total
}

std::vector<float> log_softmax_at(std::span<const float> logits, std::span<const std::int32_t> ids) {
  const lse z = log_sum_exp(logits);
  std::vector<float> out;
  out.reserve(ids.size());
  for (std::int32_t id : ids)
    out.push_back(static_cast<float>(static_cast<double>(logits[static_cast<std::size_t>(id)] - z.max) - z.log_sum));
  return out;
}

} // namespace k3::sampling
