#pragma once
// The mock GPU stream, shared by `k3 sim` (unpaced, inside the discrete-event loop) and by
// `k3 serve --simulate PLAN` (paced, inside the real stream actor): a step_executor — the same
// interface the model executor and the CUDA executor implement — that runs no model. Each
// step takes as long as the cost model says the plan's GPUs would take for that batch (it
// waits on the stream's own thread until start + modeled time, so the server's real overhead
// is included, not added), then returns placeholder tokens — a fixed sentence encoded with the
// served tokenizer, cycled per request — so clients see K3-on-PLAN pacing: TTFT from the
// chunked prefill, TPOT from the batch the scheduler actually formed.

#include <chrono>
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
  /// Overrides the waiting (tests run the executor without wall-clock pacing).
  void set_paced(bool on) noexcept { paced_ = on; }

private:
  std::shared_ptr<const cost_model> cm_;
  std::vector<std::int32_t> tokens_;
  std::vector<seq_chunk> chunks_;
  step_cost last_;
  bool paced_ = true;
};

} // namespace k3::sim
