#pragma once
// Mock GPU-stream actor for the simulator: the same typed interface as the real stream actor
// (step(plan) -> step_result), but it runs no kernels. It asks a sim_executor (unpaced) for the
// step's tokens and modeled duration, and delivers the reply that much later with a delayed
// message to itself — so it never blocks a thread, and under CAF's test coordinator the delay
// is virtual time (tests drive the real scheduler actor through a simulated plan step by step).
// `k3 serve --simulate` uses it for real-time pacing.

#include <memory>

#include "actors/protocol.hpp"
#include "runtime/sim/sim_executor.hpp"

namespace k3::actors {

/// `ex` must be unpaced (the actor does the waiting). Scheduled by the actor system (not
/// detached): a step costs only the cost-model evaluation.
[[nodiscard]] stream_actor spawn_sim_stream(caf::actor_system& sys, std::shared_ptr<sim::sim_executor> ex);

} // namespace k3::actors
