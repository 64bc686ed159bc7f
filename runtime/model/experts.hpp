#pragma once
// Routed-expert computation of one MoE layer, separable from the rest of the step so that
// expert-shard actors (in this process or another) can run it for the experts they own.
//
// Rows are token copies already sorted by expert: rows [offsets[i], offsets[i+1]) of x (width
// = the expert input width: latent for K3, hidden for Kimi Linear) go through expert
// experts[i]; y receives the expert outputs (same rows, same width), not yet weighted.
// Results per row depend only on the row, the expert and the number of rows of that expert in
// the call (the MXFP4 kernel tiles tokens), so splitting the same segments over shards gives
// bit-identical outputs.
//
// A dispatcher, when installed on the model (model::set_expert_dispatcher), replaces the local
// call inside the step; it is invoked from the thread running the step and must fill y.

#include <cstdint>
#include <span>

#include "runtime/model/config.hpp"
#include "runtime/model/weights.hpp"

namespace k3::model {

/// Computes the listed experts' outputs. Thread-compatible (uses thread-local scratch).
void run_experts(const model_config& c, const moe_weights& w, std::span<const std::int32_t> experts,
                 std::span<const std::int64_t> offsets, const float* x, float* y);

class expert_dispatcher {
public:
  virtual ~expert_dispatcher() = default;
  /// Same contract as run_experts for MoE layer ordinal `moe_layer`. Throws on failure (the
  /// step then fails as a whole).
  virtual void run(int moe_layer, std::span<const std::int32_t> experts, std::span<const std::int64_t> offsets,
                   const float* x, std::int64_t width, float* y) = 0;
};

} // namespace k3::model
