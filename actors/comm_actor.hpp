#pragma once
// GPU communicator actors (CUDA builds with NCCL): one comm_actor per GPU rank (protocol.hpp),
// and the bootstrap that forms a communicator through actor messages — the unique id is made
// by rank 0's actor and sent to every rank, each of which joins on its own thread (NCCL's
// init blocks until all ranks have joined, so the actors are detached).
#include <chrono>
#include <string>
#include <vector>

#include "actors/protocol.hpp"

namespace k3::actors {

/// A detached comm actor for CUDA device `device`; it joins a communicator on comm_init.
[[nodiscard]] comm_actor spawn_comm(caf::actor_system& sys, int device);

/// Forms one communicator over `ranks` (rank i = ranks[i]): comm_id from ranks[0], then
/// comm_init to every rank at once, then waits for all. "" on success, else the first error
/// (naming the rank), including a timeout.
[[nodiscard]] std::string nccl_bootstrap(caf::actor_system& sys, const std::vector<comm_actor>& ranks,
                                         std::chrono::milliseconds timeout);

} // namespace k3::actors
