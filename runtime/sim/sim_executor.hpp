#pragma once
// The mock GPU stream's step: a step_executor — the interface the model executor implements —
// that runs no model. It returns placeholder tokens (a fixed sentence encoded with the served
// tokenizer, cycled per request) and records how long the plan's GPUs would take for the batch
// (cost model). It never waits: the discrete-event loop of `k3 sim` advances virtual time by
// last_step_seconds(), and the mock stream actor (actors/sim_stream_actor.hpp) of `k3 serve
// --simulate` and `k3 sim --engine actors` delays its reply by it — so clients see K3-on-PLAN
// pacing: TTFT from the chunked prefill, TPOT from the batch the scheduler actually formed.

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/engine/executor.hpp"
#include "runtime/sim/cost_model.hpp"

namespace k3::sim {

class sim_executor final : public engine::step_executor {
public:
  /// `tokens`: placeholder ids to cycle through (must be non-empty and contain no stop id).
  sim_executor(std::shared_ptr<const cost_model> cm, std::vector<std::int32_t> tokens);
  [[nodiscard]] engine::step_result run(const engine::batch_plan& plan) override;

  /// Modeled seconds of the last step, and where they went.
  [[nodiscard]] double last_step_seconds() const noexcept { return last_.total; }
  [[nodiscard]] const step_cost& last_cost() const noexcept { return last_; }
  [[nodiscard]] const std::shared_ptr<const cost_model>& model() const noexcept { return cm_; }

private:
  std::shared_ptr<const cost_model> cm_;
  std::vector<std::int32_t> tokens_;
  std::vector<seq_chunk> chunks_;
  step_cost last_;
};

} // namespace k3::sim
