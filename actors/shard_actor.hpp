#pragma once
// Expert-shard actors and the dispatcher that feeds them.
//
// A shard actor owns the routed experts [first, last] of every MoE layer and computes
// expert_jobs for them (runtime/model/experts.hpp: bit-identical to the local computation).
// It runs detached (its own thread: a job is a blocking GEMM), so a hot shard's jobs queue in
// its own mailbox while the other shards work. Shards in another process (`k3 shard`) are the
// same actor published through CAF's io middleman.
//
// The dispatcher is installed on the model (model::set_expert_dispatcher) and called from the
// stream actor's thread inside each step: per MoE layer it cuts the expert-sorted rows into
// one job per shard, sends them all, and waits for every reply (scoped actor). Redundant
// experts (EPLB-style): every `rebalance_every` layer calls the `num_redundant` experts with
// the most routed rows so far get a replica on the shard with the least load, and each
// expert's rows in a call go to whichever of its replicas has the fewest rows assigned in that
// call. A segment is never split, so outputs stay bit-identical with or without replicas.
// Figures (jobs, rows, deepest queue in rows per shard, rows per expert) are kept under a
// mutex for the scheduler's stats().

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "actors/protocol.hpp"
#include "runtime/model/experts.hpp"
#include "runtime/model/model.hpp"

namespace k3::actors {

/// Spawns a detached shard owning experts [first, last] of `m` (kept alive by the actor).
/// `serve_any`: it may also serve replicas of other experts (true when it holds the whole
/// model, as in-process shards do).
[[nodiscard]] shard_actor spawn_shard(caf::actor_system& sys, std::shared_ptr<const model::model> m, int first,
                                      int last, bool serve_any);

struct shard_ref {
  shard_actor actor;
  int first = 0, last = 0;    ///< expert range it owns
  bool serve_any = false;     ///< can host replicas of any expert
  /// Re-spawns the shard after it died (in-process shards); empty for remote ones, whose
  /// failure keeps failing the steps that need them until the process is back.
  std::function<shard_actor()> respawn;
};

class shard_dispatcher final : public model::expert_dispatcher {
public:
  shard_dispatcher(caf::actor_system& sys, std::vector<shard_ref> shards, int num_experts, int num_redundant,
                   int rebalance_every = 8);
  void run(int moe_layer, std::span<const std::int32_t> experts, std::span<const std::int64_t> offsets,
           const float* x, std::int64_t width, float* y) override;
  /// Adds the shard figures to s.
  void add_stats(engine_stats& s) const;
  [[nodiscard]] std::vector<int> replicas_of(int expert) const;
  [[nodiscard]] shard_actor shard(std::size_t i) const;
  [[nodiscard]] std::int64_t restarts() const;

private:
  void rebalance();

  caf::actor_system& sys_;
  std::vector<shard_ref> shards_;
  int num_experts_, num_redundant_, rebalance_every_;
  std::vector<int> owner_;                    // expert -> owning shard
  std::vector<std::vector<int>> replicas_;    // expert -> extra shards
  std::unique_ptr<caf::scoped_actor> self_;   // created on the calling (stream) thread
  std::int64_t calls_ = 0;
  mutable std::mutex mu_;
  std::vector<std::int64_t> jobs_, rows_, max_queue_, expert_rows_;
  std::int64_t restarts_ = 0;
};

/// Splits experts [0, E) into n contiguous ranges (sizes differ by at most one).
[[nodiscard]] std::vector<std::pair<int, int>> partition_experts(int num_experts, int n);

} // namespace k3::actors
