#pragma once
// The Kimi K3 / Kimi Linear forward pass on one CUDA device: the device twin of model::step
// (runtime/model/model.hpp), layer for layer, on one CUDA stream.
//
//   weights      uploaded once from a loaded model::model (device_weights.hpp)
//   states       the sequence_states of a batch hold DEVICE pointers: KDA recurrent and conv
//                state slots and MLA cache blocks come from a kv_manager whose pools were
//                allocated on this device (kv_config::allocate = pool_allocator())
//   per step     one pinned staging buffer (token ids, head rows, state-pointer arrays, block
//                tables, positions) goes up in a single async copy; then only kernel launches
//                and cuBLAS calls on the stream — no host synchronisation inside the step (the
//                executor synchronises once, to read the sampled tokens)
//
// Numerics against the CPU model (what the [gpu] tests allow for): dense GEMMs take bf16
// activations (cuBLAS, fp32 sums); the router is fp32; the KDA scan, norms, gates and MLA
// softmax are fp32; the routed experts use the W4A16 tensor-core path for large batches. Logits
// agree with the CPU forward to ~1e-2 relative, greedy tokens almost always.
//
// Kernel choice per batch entry as on the CPU: consecutive single-token entries share one
// batched recurrent KDA call and one MLA decode call; longer entries run the chunked KDA
// prefill and the tiled MLA prefill on their own. Only the last row of each entry gets logits.
//
// Not thread-safe: one thread (the GPU-stream actor's) calls step().
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <span>
#include <vector>

#include "runtime/cuda/blas.hpp"
#include "runtime/cuda/device_weights.hpp"
#include "runtime/model/model.hpp"

namespace k3::gpu {

class nccl_comm;

/// A rank's KV pools mirror rank 0's: the scheduler's views point into rank 0's pools, and a
/// rank adds `delta` to any pointer in [lo, hi) (same layout, its own device memory).
struct pool_map {
  const char* lo = nullptr;
  const char* hi = nullptr;
  std::ptrdiff_t delta = 0;
};

struct cuda_model_options {
  int device = 0;
  int progress = -1; ///< weights upload bar: 1 always, 0 never, -1 on a tty
  /// Tensor parallelism: this rank's slice (device_weights.hpp) and the group's communicator
  /// (all-reduce after o_proj, the MLP down projection and the MoE partial sums). size 1: none.
  tp_slice tp;
  nccl_comm* comm = nullptr;
  std::shared_ptr<const std::vector<pool_map>> pools; ///< ranks > 0: where rank 0's pool pointers map
  /// Replay decode-only steps as CUDA graphs, one per (entries, block-table capacity): the
  /// first step of a shape runs eagerly, the second records, later ones replay (a step of a
  /// K3 layer is ~60 launches; a graph is one).
  bool decode_graphs = false;
};

/// Decode graphs are on unless the environment says K3_CUDA_GRAPHS=0 (a switch for debugging
/// a first run on new hardware).
[[nodiscard]] bool decode_graphs_enabled() noexcept;

class cuda_model {
public:
  /// Uploads the weights of `m` (which must outlive this object only for its config) to the
  /// device. Throws cuda_error, or std::invalid_argument for what the kernels do not support.
  cuda_model(const model::model& m, const cuda_model_options& o);
  ~cuda_model();
  cuda_model(const cuda_model&) = delete;
  cuda_model& operator=(const cuda_model&) = delete;

  [[nodiscard]] const model::model_config& config() const noexcept { return c_; }
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] std::int64_t weight_bytes() const noexcept { return w_->bytes; }

  /// Enqueues one batch; afterwards logits() holds [entries, vocab] (each entry's last token)
  /// once the stream reaches that point. Advances every entry's pos. Validates like
  /// model::step (std::invalid_argument / std::length_error, states untouched).
  /// CUDA graphs: with decode_graphs, decode-only steps replay recorded graphs (see the option).
  /// Independently, step() may run while stream() is being captured (cudaStreamCaptureModeRelaxed)
  /// after an eager step of the same batch shape sized the buffers; the graph then replays the
  /// whole step (staging upload included, read from the pinned buffer at launch time). pos is
  /// advanced at capture time only; replays leave it to the caller.
  /// `positions` (optional, one per entry) overrides seq->pos as each entry's start (tensor-
  /// parallel ranks read the plan's positions, not a pos another rank may already have
  /// advanced); `advance` = false leaves pos alone (every rank but the first).
  void step(std::span<const model::batch_entry> batch, std::span<const std::int64_t> positions = {}, bool advance = true);
  [[nodiscard]] const float* logits() const noexcept { return logits_; }
  /// Writable: the executor masks constrained rows in place before sampling.
  [[nodiscard]] float* logits() noexcept { return logits_; }
  /// Token rows routed to each expert, summed over MoE layers, up to the last synchronised step
  /// (call after the stream has finished the step: the executor does).
  void collect_expert_counts();
  [[nodiscard]] const std::vector<std::int64_t>& expert_tokens() const noexcept { return expert_totals_; }

  /// Enqueues a copy inside the KV pools on stream() (prefix-cache restores and checkpoints):
  /// the addresses are the lead's; a tensor-parallel rank maps them into its own pools.
  void copy_pool(void* dst, const void* src, std::size_t bytes);

  /// Pinned host memory for the prefix cache's host tier (kv_config::host_allocate) and a
  /// synchronous copy between it and the pools (kv_config::copy).
  [[nodiscard]] std::function<std::shared_ptr<void>(std::size_t)> host_tier_allocator() const;
  [[nodiscard]] std::function<void(void*, const void*, std::size_t)> pool_copier() const;

  /// Device memory for kv_config::allocate (pools on this device).
  [[nodiscard]] std::function<std::shared_ptr<void>(std::size_t)> pool_allocator() const;

private:
  struct staging;
  void kda_layer(const d_kda& w, int slot, const float* x, float* out);
  void mla_layer(const d_mla& w, int slot, const float* x, float* out);
  void mlp_layer(const d_mlp& w, const float* x, std::int64_t n, float* out);
  void moe_layer(const d_moe& w, int slot, const float* x, float* out);
  void all_reduce(float* buf, std::int64_t count); // no-op without tensor parallelism
  void enqueue(std::size_t staging_words);           // the step's stream work (what a graph records)
  template <class T>
  [[nodiscard]] T* local(T* p) const noexcept {
    if (!pools_) return p;
    const char* c = reinterpret_cast<const char*>(p);
    for (const auto& m : *pools_)
      if (c >= m.lo && c < m.hi) return reinterpret_cast<T*>(const_cast<char*>(c) + m.delta);
    return p;
  }

  model::model_config c_; ///< rank-local: kda_heads and mla_heads divided by the TP size
  int tp_size_ = 1;
  nccl_comm* comm_ = nullptr;
  std::shared_ptr<const std::vector<pool_map>> pools_;
  bool round_expert_outputs_ = true;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<device_weights> w_;
  std::unique_ptr<blas> blas_;
  std::unique_ptr<staging> st_;
  float* logits_ = nullptr;
  bool decode_graphs_ = false;
  std::uint64_t generation_ = 0; ///< bumped when any buffer a graph refers to moves
  struct recorded {
    cudaGraphExec_t exec = nullptr;
    std::uint64_t generation = 0;
  };
  std::map<std::pair<std::int64_t, std::int64_t>, recorded> graphs_;
  std::set<std::pair<std::int64_t, std::int64_t>> warmed_;
  std::vector<std::int64_t> expert_totals_;
};

} // namespace k3::gpu
