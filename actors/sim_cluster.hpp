#pragma once
// `k3 sim --engine actors`: the production actors in virtual time. One actor system on CAF's
// test coordinator (deterministic, single-threaded, time only moves when the loop fires the
// next delayed message); per attention replica the real scheduler actor (engine::scheduler +
// engine::kv_manager inside) with a mock stream actor; with expert parallelism one mock
// expert-shard actor per EP rank, shared by every replica, so replicas queue behind each
// other at a hot shard; a request actor per request, as in the server. Arrivals are delayed
// messages of a traffic-source actor.
//
// Slower than the plain discrete-event run (every layer of every step is messages), so meant
// for checking the actor protocol's timing and shard contention at moderate sizes.

#include <memory>

#include "runtime/sim/simulator.hpp"

namespace k3::actors {

[[nodiscard]] sim::sim_result simulate_actors(std::shared_ptr<const sim::cost_model> cm, const sim::memory_plan& mp,
                                              const sim::workload_spec& w, const sim::sim_options& o);

} // namespace k3::actors
