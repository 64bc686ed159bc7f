#pragma once
// Mock expert-shard actor for the simulator: the shard_actor interface (experts(job) ->
// expert_reply, stats), but instead of running the experts it charges the cost model's time
// for the job's active experts and rows, one job after another: a job that arrives while the
// shard is busy waits in its mailbox (busy_until), exactly the queueing a hot shard causes. The
// reply carries no activations. Delays are delayed messages (virtual time under the test
// coordinator, real time otherwise).

#include <memory>

#include "actors/protocol.hpp"
#include "runtime/sim/cost_model.hpp"

namespace k3::actors {

[[nodiscard]] shard_actor spawn_sim_shard(caf::actor_system& sys, std::shared_ptr<const sim::cost_model> cm, int rank);

} // namespace k3::actors
