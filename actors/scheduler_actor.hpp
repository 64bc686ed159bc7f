#pragma once
// Scheduler actor: the thin shell around engine::scheduler and engine::kv_manager (the KV
// policy object is owned here because every scheduling decision allocates inline; its figures
// are part of stats()). It admits requests (the bounded queue answers errc::queue_full at
// once), runs the step loop — schedule → stream actor → apply → one token event per request —
// with exactly one step in flight, monitors request actors (a vanished client is a
// cancellation), and supervises the stream actor: a failed step becomes an error event for
// the requests in it, the stream actor is respawned, and the loop continues; it never hangs.

#include <functional>
#include <memory>

#include "actors/protocol.hpp"
#include "runtime/engine/kv_manager.hpp"
#include "runtime/engine/scheduler.hpp"

namespace k3::actors {

struct scheduler_actor_config {
  engine::scheduler_config scheduler;
  engine::kv_config kv;
  /// Spawns (and on failure re-spawns) the stream actor.
  std::function<stream_actor()> make_stream;
  /// Extra figures (expert shards) merged into stats(); may be empty.
  std::function<void(engine_stats&)> add_stats;
};

/// Throws std::invalid_argument (from the KV sizing) before spawning anything.
[[nodiscard]] scheduler_actor spawn_scheduler(caf::actor_system& sys, const model::model_config& model_cfg,
                                              scheduler_actor_config cfg, std::string* sizing_note = nullptr);

} // namespace k3::actors
