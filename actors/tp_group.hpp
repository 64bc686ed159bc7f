#pragma once
// A tensor-parallel group on one multi-GPU node (CUDA builds with NCCL): one GPU-stream actor
// per rank (detached: each owns its GPU, its CUDA stream and its cuda_executor with the rank's
// weight slice), formed through actor messages — rank 0's actor makes the NCCL unique id, every
// rank receives it in a comm_init message and joins, then uploads its slice.
//
// tp_executor is the step_executor the scheduler's stream actor runs: each step goes to every
// rank at once (the same plan: ranks compute the same batch on their heads / experts / units,
// all-reducing partial sums), and rank 0's sampled tokens are the step's result.
//
// KV: pool_allocator() allocates every pool on every rank's GPU with the same size; the
// scheduler's views point into rank 0's pools and the other ranks map them (pool_map). The
// scheduler must size its slots with the rank-local KDA heads (heads / tp): engine.cpp does.
//
// Limitation: a device fault on one rank in the middle of a step leaves the others waiting in a
// collective (NCCL offers no recovery short of aborting the communicator); validation errors
// are raised identically on every rank before any collective, so they never hang.
#include <memory>
#include <vector>

#include "actors/protocol.hpp"
#include "runtime/cuda/cuda_executor.hpp"

namespace k3::actors {

using tp_rank_actor = caf::typed_actor<caf::replies_to<comm_id_atom>::with<nccl_id>,
                                       caf::replies_to<comm_init_atom, nccl_id, std::int32_t, std::int32_t>::with<std::string>,
                                       caf::replies_to<step_atom, plan_ptr>::with<engine::step_result>>;

class tp_executor final : public engine::step_executor {
public:
  /// Spawns `tp` rank actors on devices first_device … first_device + tp − 1 and forms the
  /// group (blocking: NCCL init and the weight uploads). Throws naming the failing rank.
  tp_executor(caf::actor_system& sys, std::shared_ptr<const model::model> m, int tp, int first_device);
  ~tp_executor() override;

  [[nodiscard]] engine::step_result run(const engine::batch_plan& plan) override;
  [[nodiscard]] std::function<std::shared_ptr<void>(std::size_t)> pool_allocator();
  /// The smallest per-rank KV budget (cuda_executor::kv_budget on each GPU).
  [[nodiscard]] std::int64_t kv_budget(double gpu_memory_utilization, std::int64_t reserve) const;
  [[nodiscard]] std::vector<std::int64_t> expert_tokens() const;

  struct rank_slot; // shared with the rank actor

private:
  caf::actor_system& sys_;
  std::vector<tp_rank_actor> ranks_;
  std::vector<std::shared_ptr<rank_slot>> slots_;
};

} // namespace k3::actors
