#include "runtime/engine/executor.hpp"

#include <exception>

namespace k3::engine {

model_executor::model_executor(model::model& m) : m_(m) {
  const auto& per_layer = m_.expert_tokens();
  num_experts_ = per_layer.empty() ? 0 : per_layer.front().size();
  expert_totals_ = std::make_unique<std::atomic<std::int64_t>[]>(num_experts_);
  for (std::size_t e = 0; e < num_experts_; ++e) expert_totals_[e].store(0, std::memory_order_relaxed);
}

std::vector<std::int64_t> model_executor::expert_tokens() const {
  std::vector<std::int64_t> out(num_experts_);
  for (std::size_t e = 0; e < num_experts_; ++e) out[e] = expert_totals_[e].load(std::memory_order_relaxed);
  return out;
}

step_result model_executor::run(const batch_plan& plan) {
  step_result r;
  r.step = plan.step;
  try {
    entries_.clear();
    for (const auto& e : plan.entries) entries_.push_back({e.state, e.tokens, false});
    const auto out = m_.step(entries_);
    // Publish the per-expert totals (the model's own counters are only safe on this thread).
    if (num_experts_ > 0) {
      const auto& per_layer = m_.expert_tokens();
      for (std::size_t e = 0; e < num_experts_; ++e) {
        std::int64_t sum = 0;
        for (const auto& layer : per_layer) sum += layer[e];
        expert_totals_[e].store(sum, std::memory_order_relaxed);
      }
    }
    for (std::size_t i = 0; i < plan.entries.size(); ++i) {
      if (!plan.entries[i].sample) continue;
      const auto row = out.last(i);
      row_.assign(row.begin(), row.end());
      auto res = plan.entries[i].sampler->sample(row_);
      r.tokens.push_back(res.token);
      r.logprobs.push_back(res.logprob);
      r.tops.push_back(std::move(res.top));
    }
  } catch (const std::exception& ex) {
    r.tokens.clear();
    r.error = errc::internal;
    r.message = ex.what();
  }
  return r;
}

step_result null_executor::run(const batch_plan& plan) {
  step_result r;
  r.step = plan.step;
  for (const auto& e : plan.entries) {
    if (!e.sample) continue;
    e.state->pos += static_cast<std::int64_t>(e.tokens.size());
    r.tokens.push_back(static_cast<std::int32_t>((e.id * 7919 + static_cast<std::uint64_t>(e.state->pos)) % static_cast<std::uint64_t>(vocab_)));
  }
  for (const auto& e : plan.entries)
    if (!e.sample) e.state->pos += static_cast<std::int64_t>(e.tokens.size());
  return r;
}

} // namespace k3::engine
