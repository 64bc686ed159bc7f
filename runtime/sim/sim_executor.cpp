#include "runtime/sim/sim_executor.hpp"

#include <stdexcept>

namespace k3::sim {

sim_executor::sim_executor(std::shared_ptr<const cost_model> cm, std::vector<std::int32_t> tokens)
    : cm_(std::move(cm)), tokens_(std::move(tokens)) {
  if (!cm_) throw std::invalid_argument("sim_executor: no cost model");
  if (tokens_.empty()) throw std::invalid_argument("sim_executor: no placeholder tokens");
}

engine::step_result sim_executor::run(const engine::batch_plan& plan) {
  engine::step_result r;
  r.step = plan.step;
  chunks_.clear();
  r.tokens.reserve(plan.entries.size());
  for (const auto& e : plan.entries) {
    chunks_.push_back({static_cast<std::int64_t>(e.tokens.size()), e.position, e.sample});
    if (!e.sample) continue;
    // Output position of this token within its request cycles through the sentence.
    const auto i = static_cast<std::size_t>(e.position + static_cast<std::int64_t>(e.tokens.size()) + static_cast<std::int64_t>(e.id));
    r.tokens.push_back(tokens_[i % tokens_.size()]);
    r.logprobs.push_back(0.0f); // placeholder tokens are certain
  }
  last_ = cm_->step(chunks_);
  return r;
}

} // namespace k3::sim
