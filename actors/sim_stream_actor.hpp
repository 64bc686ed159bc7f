#pragma once
// Mock GPU-stream actor for the simulator: the same typed interface as the real stream actor
// (step(plan) -> step_result), but it runs no kernels. It asks a sim_executor for the
// step's tokens and modeled duration, and delivers the reply that much later with a delayed
// message to itself — so it never blocks a thread, and under CAF's test coordinator the delay
// is virtual time (tests and `k3 sim --engine actors` drive the real scheduler actor through a
// simulated plan). `k3 serve --simulate` uses it for real-time pacing.
//
// With expert-shard actors (mock or not) the routed experts are not priced analytically: each
// MoE layer of the step sends every shard its job — active experts and rows drawn around the
// routing model's expectation (seeded normal noise, so a batch-1 step sees random imbalance)
// — and the layer ends when the last shard replies. Shards shared by several replicas queue
// each other's jobs; the non-expert rest of the step is spread evenly over the layers.

#include <cstdint>
#include <memory>
#include <vector>

#include "actors/protocol.hpp"
#include "runtime/sim/sim_executor.hpp"

namespace k3::actors {

/// Scheduled by the actor system (not detached): a step costs only the cost-model evaluation;
/// the wait is a delayed reply.
[[nodiscard]] stream_actor spawn_sim_stream(caf::actor_system& sys, std::shared_ptr<sim::sim_executor> ex,
                                            std::vector<shard_actor> shards = {}, std::uint64_t seed = 1);

} // namespace k3::actors
