#pragma once
// KV-cache manager policy: two pools sized from one memory budget (spec model.md §13).
//
//   KDA slots   fixed per sequence: for every KDA layer the fp32 recurrent state [H, dk, dv]
//               and conv state [3, P, K−1]. One slot per running sequence.
//   MLA blocks  paged latent rows: block b holds block_size rows of [c_kv | k_rot] for EVERY
//               MLA layer (one block id, one row range, all layers), bf16.
//
//   budget = num_slots · slot_bytes + num_blocks · block_bytes
//
// Sizing: with max_num_seqs = 0 the manager derives the largest number of sequences that can
// all reach max_model_len (slots = that, blocks = slots · ceil(max_model_len / block_size)) and
// reports it; with max_num_seqs set it takes that many slots and gives the rest to blocks. Too
// small a budget for even one sequence at max_model_len is an error naming both numbers.
//
// A sequence's blocks grow with its tokens (allocate() covers `tokens` rows); allocation can
// fail normally (the scheduler preempts). release() returns the slot and all blocks. Each
// allocation hands out a model::sequence_state view whose pointers go into the pools; a fresh
// slot is not cleared here: model::step zeroes the state of a sequence at position 0 (on the
// stream thread, off the scheduler's critical path). Plain class, single-threaded (owned by the
// scheduler actor).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/common/bf16.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/model.hpp"

namespace k3::engine {

struct kv_config {
  std::int64_t memory_bytes = 1ll << 30; ///< total for both pools
  int block_size = 64;                   ///< MLA rows per block
  std::int64_t max_model_len = 8192;     ///< longest sequence (prompt + output) admitted
  int max_num_seqs = 0;                  ///< 0: derive from the budget
  bool fp32_cache = false;               ///< exact_fp32 models keep fp32 rows
  /// Budget cost of one KDA slot / one MLA block; 0: this process's real sizes. The simulator
  /// sets a GPU's share (state sharded by TP heads and PP stages, latent replicated per TP rank).
  std::int64_t slot_bytes = 0;
  std::int64_t block_bytes = 0;
  /// false: accounting only, no pool memory (the simulator and mock devices: views carry no
  /// pointers, so only executors that never touch state may run on them).
  bool backed = true;
  /// Where the pools live when backed: returns `bytes` of storage (owned by the shared_ptr's
  /// deleter) or throws. Empty: host memory. The CUDA executor passes device memory, so the
  /// views hand out device pointers the GPU kernels use directly; nothing here dereferences
  /// pool memory.
  std::function<std::shared_ptr<void>(std::size_t bytes)> allocate = {};
};

struct kv_usage {
  int num_slots = 0, used_slots = 0;
  std::int64_t num_blocks = 0, used_blocks = 0;
  std::int64_t slot_bytes = 0, block_bytes = 0;
};

class kv_manager {
public:
  using seq_id = std::uint64_t;

  /// Throws std::invalid_argument if the budget cannot hold one sequence at max_model_len.
  kv_manager(const model::model_config& c, const kv_config& k);

  /// Bytes of one KDA slot and of one MLA block.
  [[nodiscard]] static std::int64_t slot_bytes(const model::model_config& c);
  [[nodiscard]] static std::int64_t block_bytes(const model::model_config& c, int block_size, bool fp32);

  [[nodiscard]] bool has(seq_id id) const { return seqs_.count(id) != 0; }
  /// Blocks still needed for `id` (or a new sequence) to cover `tokens` rows.
  [[nodiscard]] std::int64_t blocks_needed(seq_id id, std::int64_t tokens) const;
  [[nodiscard]] bool can_allocate(seq_id id, std::int64_t tokens) const;
  /// Ensures `id` holds a slot and blocks for `tokens` rows; returns its state view, or nullptr
  /// (nothing changed) when the pools cannot satisfy it.
  model::sequence_state* allocate(seq_id id, std::int64_t tokens);
  [[nodiscard]] model::sequence_state* state(seq_id id);
  /// Returns the slot and every block of `id` (no-op if it holds none).
  void release(seq_id id);

  [[nodiscard]] kv_usage usage() const;
  [[nodiscard]] int max_num_seqs() const noexcept { return num_slots_; }
  [[nodiscard]] const std::string& sizing_note() const noexcept { return note_; }
  [[nodiscard]] const kv_config& config() const noexcept { return k_; }

private:
  struct seq {
    int slot = -1;
    std::vector<std::int32_t> blocks;
    model::sequence_state view;
  };
  void point(seq& s);

  model::model_config c_;
  kv_config k_;
  std::int64_t sb_ = 0, bb_ = 0; // budget cost of a slot / a block
  int num_slots_ = 0;
  std::int64_t num_blocks_ = 0;
  int num_kda_ = 0, num_mla_ = 0;
  std::size_t kda_floats_ = 0, conv_floats_ = 0, block_elems_ = 0;
  // Uninitialised on purpose: pages are touched only when a sequence uses them (state is zeroed
  // by model::step at position 0, cache rows are written before they are read), so a large
  // budget costs nothing at start-up.
  std::shared_ptr<void> slot_mem_, block_mem_; // storage (host new[] or kv_config::allocate)
  float* slots_ = nullptr;                     // [slot][kda layer][state | conv]
  bf16_t* blocks_ = nullptr;                   // [block][mla layer][block_size · row_width] (×2 if fp32)
  std::vector<int> free_slots_;
  std::vector<std::int32_t> free_blocks_;
  std::unordered_map<seq_id, seq> seqs_;
  std::string note_;
};

} // namespace k3::engine
