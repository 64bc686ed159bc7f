#include "runtime/engine/executor.hpp"

#include <cstring>
#include <exception>
#include <future>
#include <limits>

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

void run_copies(std::span<const state_copy> copies) {
  for (const auto& c : copies) std::memcpy(c.dst, c.src, c.bytes);
}

void apply_token_mask(std::span<float> logits, std::span<const std::uint64_t> mask) {
  const std::size_t n = logits.size();
  for (std::size_t w = 0; w * 64 < n; ++w) {
    const std::uint64_t word = w < mask.size() ? mask[w] : 0;
    if (word == ~std::uint64_t{0}) continue;
    const std::size_t end = std::min(n, (w + 1) * 64);
    for (std::size_t i = w * 64; i < end; ++i)
      if (!((word >> (i - w * 64)) & 1)) logits[i] = -std::numeric_limits<float>::infinity();
  }
}

std::vector<std::vector<std::uint64_t>> compute_masks(const batch_plan& plan) {
  std::vector<std::vector<std::uint64_t>> masks(plan.entries.size());
  for (std::size_t i = 0; i < plan.entries.size(); ++i) {
    const auto& e = plan.entries[i];
    if (!e.sample || !e.matcher) continue;
    masks[i].resize(e.matcher->grammar_of().vocab().words());
    e.matcher->fill_mask(masks[i], e.budget);
  }
  return masks;
}

step_result model_executor::run(const batch_plan& plan) {
  step_result r;
  r.step = plan.step;
  // Token masks of constrained requests are computed on a helper thread while the forward pass
  // runs (each depends only on tokens the scheduler already folded in).
  bool constrained = false;
  for (const auto& e : plan.entries) constrained = constrained || (e.sample && e.matcher);
  std::future<std::vector<std::vector<std::uint64_t>>> masks;
  if (constrained) masks = std::async(std::launch::async, [&plan] { return compute_masks(plan); });
  try {
    entries_.clear();
    for (const auto& e : plan.entries) {
      model::batch_entry be{e.state, e.tokens, false, {}};
      if (e.media) be.embeds = e.media->spans;
      entries_.push_back(be);
    }
    run_copies(plan.copies_before); // KDA state restored from prefix-cache checkpoints
    const auto out = m_.step(entries_);
    run_copies(plan.copies_after);  // checkpoints of the states this step left at block boundaries
    // Publish the per-expert totals (the model's own counters are only safe on this thread).
    if (num_experts_ > 0) {
      const auto& per_layer = m_.expert_tokens();
      for (std::size_t e = 0; e < num_experts_; ++e) {
        std::int64_t sum = 0;
        for (const auto& layer : per_layer) sum += layer[e];
        expert_totals_[e].store(sum, std::memory_order_relaxed);
      }
    }
    const auto mask = constrained ? masks.get() : std::vector<std::vector<std::uint64_t>>{};
    for (std::size_t i = 0; i < plan.entries.size(); ++i) {
      if (!plan.entries[i].sample) continue;
      const auto row = out.last(i);
      row_.assign(row.begin(), row.end());
      // The grammar's mask comes before penalties, temperature and the top-k/top-p/min-p cuts.
      if (!mask.empty() && !mask[i].empty()) apply_token_mask(row_, mask[i]);
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
