#pragma once
// GPU-stream actor: owns one execution stream and runs model steps on it strictly in order.
// CPU backend: the executor's kernels on the OpenMP pool, called from this actor's own thread
// (spawned detached, since a step blocks for its whole duration). A CUDA-stream backend plugs
// in as another step_executor behind the same interface. Completion is the reply message.
// Executor exceptions are already turned into step_result errors; nothing escapes.

#include <memory>

#include "actors/protocol.hpp"
#include "runtime/engine/executor.hpp"

namespace k3::actors {

/// Spawns a stream actor running `ex` (shared: a restarted actor reuses it). Detached (own
/// thread) unless `detached` is false — only for deterministic tests with zero-cost executors.
[[nodiscard]] stream_actor spawn_stream(caf::actor_system& sys, std::shared_ptr<engine::step_executor> ex,
                                        bool detached = true);

} // namespace k3::actors
