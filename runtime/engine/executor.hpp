#pragma once
// Step executors: run one batch_plan and return one token per sampled entry. The GPU-stream
// actor owns one and calls it for every step, in order.
//
//   model_executor  the real forward pass (model::step) + per-request sampling of the last
//                   logits row of each sampled entry (vLLM samples on the worker, too)
//   null_executor   zero-cost steps (tokens from a fixed formula): measures the runtime's own
//                   scheduling and messaging overhead, and drives policy tests
//
// Exceptions from the model become step_result::error = internal with the message, never an
// escape across an actor boundary.

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/engine/scheduler.hpp"
#include "runtime/model/model.hpp"

namespace k3::engine {

/// Runs a plan's pool copies on host memory (the CPU pools).
void run_copies(std::span<const state_copy> copies);
/// Sets the logits of tokens a grammar mask (bitset over ids) does not allow to −inf.
void apply_token_mask(std::span<float> logits, std::span<const std::uint64_t> mask);
/// The grammar masks of a plan's constrained sampled entries (empty vectors elsewhere).
[[nodiscard]] std::vector<std::vector<std::uint64_t>> compute_masks(const batch_plan& plan);

class step_executor {
public:
  virtual ~step_executor() = default;
  [[nodiscard]] virtual step_result run(const batch_plan& plan) = 0;
};

class model_executor final : public step_executor {
public:
  explicit model_executor(model::model& m);
  [[nodiscard]] step_result run(const batch_plan& plan) override;
  /// Token rows routed to each expert so far, summed over MoE layers: a snapshot the stream
  /// thread publishes after every step, safe to read from any thread (the /metrics counters
  /// `k3 sim --routing counts:` reads). Empty for a dense model.
  [[nodiscard]] std::vector<std::int64_t> expert_tokens() const;

private:
  model::model& m_;
  std::size_t num_experts_ = 0;
  std::unique_ptr<std::atomic<std::int64_t>[]> expert_totals_;
  std::vector<model::batch_entry> entries_;
  std::vector<float> row_;
};

class null_executor final : public step_executor {
public:
  explicit null_executor(int vocab) : vocab_(vocab) {}
  [[nodiscard]] step_result run(const batch_plan& plan) override;

private:
  int vocab_;
};

} // namespace k3::engine
