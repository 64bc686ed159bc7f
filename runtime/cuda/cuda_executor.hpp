#pragma once
// The CUDA step executor: the GPU-stream actor's backend on one CUDA stream, behind the same
// engine::step_executor interface as the CPU model_executor (actors/stream_actor.hpp spawns
// either). run() enqueues the whole forward pass on the stream (cuda_model), then samples:
//
//   greedy rows without penalties or top-logprobs   arg-max and its raw log-probability on
//                                                   the device; only ids and floats come back
//   temperature / top-k / top-p / min-p rows        sampled on the device (kernels/cuda/
//   without penalties or top-logprobs               sampling.cuh) with the uniform the request's
//                                                   sampler draws, so its random stream is kept
//   every other row                                 its logits row is copied to pinned host
//                                                   memory and sampled by the request's own
//                                                   sampler (identical semantics to the CPU)
//
// Grammar-constrained rows (structured outputs) are masked first: the masks are filled on the
// host while the forward kernels run, copied up, and applied to the logits on the device
// (apply_token_bitmask, −inf for disallowed ids), so they then take whichever path above their
// sampling parameters pick.
//
// and waits for the stream once (cudaStreamSynchronize on the actor's own thread: the step's
// reply message is the completion signal). CUDA and validation errors become
// step_result::error = internal with the message (the scheduler fails the step's requests;
// the actor stays up), never an exception across the actor boundary.
//
// KV: the scheduler's kv_manager must allocate its pools through pool_allocator() (device
// memory on this GPU); kv_budget() sizes them from --gpu-memory-utilization the vLLM way.
#include <atomic>
#include <memory>
#include <vector>

#include "kernels/cuda/sampling.cuh"
#include "runtime/cuda/cuda_model.hpp"
#include "runtime/engine/executor.hpp"

namespace k3::gpu {

class cuda_executor final : public engine::step_executor {
public:
  cuda_executor(const model::model& m, const cuda_model_options& o);
  /// Marks this executor as rank 0 of a tensor-parallel group (positions from the plan).
  void set_tp_lead() noexcept { tp_lead_only_ = true; }
  [[nodiscard]] engine::step_result run(const engine::batch_plan& plan) override;
  /// One tensor-parallel rank's share of a step: the same forward pass at the plan's positions
  /// (entry.position); only the lead rank samples and advances positions, the others return
  /// no tokens (their logits equal the lead's after the final all-reduce).
  [[nodiscard]] engine::step_result run_rank(const engine::batch_plan& plan, bool lead);

  /// Per-expert routed token totals (all MoE layers), safe from any thread.
  [[nodiscard]] std::vector<std::int64_t> expert_tokens() const;
  [[nodiscard]] std::function<std::shared_ptr<void>(std::size_t)> pool_allocator() const { return m_.pool_allocator(); }
  [[nodiscard]] std::function<std::shared_ptr<void>(std::size_t)> host_tier_allocator() const { return m_.host_tier_allocator(); }
  [[nodiscard]] std::function<void(void*, const void*, std::size_t)> pool_copier() const { return m_.pool_copier(); }
  /// KV bytes for a utilisation share: util · total − (total − free now) − reserve, i.e. what
  /// is left of this process's share of the card after the weights (already resident) and
  /// whatever else uses the device, less `reserve` for activations. Throws if ≤ 0.
  [[nodiscard]] std::int64_t kv_budget(double gpu_memory_utilization, std::int64_t reserve) const;
  [[nodiscard]] cuda_model& model() noexcept { return m_; }

private:
  cuda_model m_;
  std::vector<model::batch_entry> entries_;
  std::vector<std::int64_t> positions_;
  bool tp_lead_only_ = false; ///< part of a TP group: positions come from the plan
  std::shared_ptr<void> ids_dev_, ids_host_; // argmax ids + logprobs [rows] (device / pinned)
  std::shared_ptr<void> rows_host_;          // pinned logits rows for host sampling
  std::size_t ids_cap_ = 0, rows_cap_ = 0, mask_cap_ = 0;
  std::shared_ptr<void> mask_host_, mask_dev_; // token bitmasks [rows, words] then the row ids
  std::unique_ptr<cuda::sample_workspace> sample_ws_; // device sampling (temperature / top-k / top-p / min-p)
  std::shared_ptr<void> sample_mem_, samp_host_, samp_dev_;
  std::vector<float> row_;
  std::unique_ptr<std::atomic<std::int64_t>[]> totals_;
  std::size_t num_experts_ = 0;
};

} // namespace k3::gpu
