#pragma once
// KV-cache manager policy: running sequences' state and the prefix cache, from one memory
// budget (spec model.md §13).
//
//   KDA slots   fixed per running sequence: for every KDA layer the fp32 recurrent state
//               [H, dk, dv] and conv state [3, P, K−1], one contiguous region per slot.
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
// Prefix cache (kv_config::prefix_caching). Blocks are refcounted. A full block whose rows are
// computed is registered under the chained hash of the tokens up to its end (hash of the
// previous block's hash and its own tokens), and stays cached when no sequence holds it: such
// blocks sit in one LRU and are evicted only when a free block is needed. KDA state cannot be
// rebuilt from rows, so a hit also needs a *checkpoint*: a copy of a sequence's whole KDA slot
// taken when its state stood exactly at a block boundary. Checkpoints are stored in MLA blocks
// of the same pool (ceil(slot_bytes / block_bytes) blocks each) and share the LRU: one pool,
// one free list, one eviction order. They are taken at
//   - the last block boundary before the end of every prompt (the turn boundary the next turn
//     of a session reuses), and every `checkpoint_interval` tokens of a long prefill (the
//     scheduler ends a chunk exactly there);
//   - branch points: where a new prompt leaves a cached chain of rows that has no checkpoint
//     at its end (another sequence computed the same prefix, e.g. a shared system prompt),
//     so the third sequence with that prefix restores it instead of recomputing;
//   - the last block boundary a sequence crossed (a rolling checkpoint, rewritten every block
//     of decode), registered when the sequence is released (finish, cancel, preemption), so
//     the next turn can also reuse the generated part.
// lookup() is two-stage: the longest chain of cached blocks, then the longest boundary within
// it that has a checkpoint. The result is a prefix_hit, which owns nothing yet and can only be
// consumed by allocate(): it takes the references on the blocks and the checkpoint together
// and emits the copy that restores the state — a restore is never half done.
//
// Second tier (kv_config::host_tier_bytes): an evicted cached block or checkpoint is first
// copied to host memory (its own LRU); lookup continues through host entries, and allocate()
// brings a hit's host blocks and checkpoint back into the pool before anything else — pinned
// together, all or nothing, under the same hashes.
//
// Copies are data, not work: plan_checkpoint() and allocate() append state_copy segments
// (destination, source, bytes inside the pools) that the executor runs before (restores) or
// after (checkpoints) the step's forward pass, on the memory the pools live in.
//
// A sequence's blocks grow with its tokens (allocate() covers `tokens` rows); allocation can
// fail normally (the scheduler preempts). release() registers what the sequence computed, then
// returns its slot and drops its block references. Each allocation hands out a
// model::sequence_state view whose pointers go into the pools; a fresh slot is not cleared
// here: model::step zeroes the state of a sequence at position 0. Plain class,
// single-threaded (owned by the scheduler actor).

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/common/bf16.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/model.hpp"

namespace k3::engine {

struct kv_config {
  std::int64_t memory_bytes = 1ll << 30; ///< total for both pools
  int block_size = 64;                   ///< MLA rows per block (also the prefix cache's hash block)
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
  /// Keep computed blocks and KDA checkpoints for reuse by later requests.
  bool prefix_caching = false;
  /// Tokens between KDA checkpoints inside one long prefill (a multiple of block_size);
  /// 0: derived (a checkpoint costs no more than the MLA rows of its interval); < 0: none.
  std::int64_t checkpoint_interval = 0;
  /// Largest share of the blocks checkpoints may hold (the rest stays for rows).
  double checkpoint_share = 0.5;
  /// Second tier (prefix caching, backed pools): bytes of host memory that receive evicted
  /// cached blocks and checkpoints, and give them back on a hit. 0: none.
  std::int64_t host_tier_bytes = 0;
  /// Host storage for the second tier (pinned memory on CUDA); empty: new[].
  std::function<std::shared_ptr<void>(std::size_t bytes)> host_allocate = {};
  /// Synchronous copy between pool and tier memory (cudaMemcpy on CUDA); empty: memcpy.
  std::function<void(void* dst, const void* src, std::size_t bytes)> copy = {};
};

struct kv_usage {
  int num_slots = 0, used_slots = 0;
  std::int64_t num_blocks = 0, used_blocks = 0; ///< used: held by sequences or checkpoints, or cached
  std::int64_t slot_bytes = 0, block_bytes = 0;
  std::int64_t cached_blocks = 0;       ///< registered row blocks (held or not)
  std::int64_t evictable_blocks = 0;    ///< blocks no sequence holds, evicted on demand
  std::int64_t checkpoints = 0, checkpoint_blocks = 0;
  std::int64_t host_blocks = 0, host_used_blocks = 0;   ///< second tier (block-sized units)
  std::int64_t host_writes = 0, host_reads = 0;         ///< entries written out / brought back
};

/// One copy inside the pools (device or host memory, as the pools are).
struct state_copy {
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
};

/// What a lookup found: a prefix of `tokens()` whose rows and KDA state can be restored. Owns
/// nothing and is consumed by kv_manager::allocate (the only way to use it).
class prefix_hit {
public:
  prefix_hit() = default;
  prefix_hit(prefix_hit&&) noexcept = default;
  prefix_hit& operator=(prefix_hit&&) noexcept = default;
  prefix_hit(const prefix_hit&) = delete;
  prefix_hit& operator=(const prefix_hit&) = delete;
  [[nodiscard]] std::int64_t tokens() const noexcept { return tokens_; }
  [[nodiscard]] bool empty() const noexcept { return tokens_ == 0; }
  /// How far cached rows reach (≥ tokens()): beyond tokens() another sequence computed the
  /// same prefix but no checkpoint stands there — a branch point worth checkpointing.
  [[nodiscard]] std::int64_t rows() const noexcept { return rows_; }

private:
  friend class kv_manager;
  std::vector<std::int32_t> blocks_; // device block, or -1: in the host tier (under its hash)
  std::vector<std::uint64_t> hashes_; // chain hash of each block
  std::uint64_t checkpoint_ = 0;
  bool has_checkpoint_ = false;
  bool checkpoint_host_ = false;      // the checkpoint is in the host tier
  std::int64_t tokens_ = 0;
  std::int64_t rows_ = 0;
};

class kv_manager {
public:
  using seq_id = std::uint64_t;

  /// Throws std::invalid_argument if the budget cannot hold one sequence at max_model_len.
  kv_manager(const model::model_config& c, const kv_config& k);

  /// Bytes of one KDA slot and of one MLA block.
  [[nodiscard]] static std::int64_t slot_bytes(const model::model_config& c);
  [[nodiscard]] static std::int64_t block_bytes(const model::model_config& c, int block_size, bool fp32);
  /// The prefix cache's chained block hash.
  [[nodiscard]] static std::uint64_t chain_hash(std::uint64_t prev, std::span<const std::int32_t> block_tokens) noexcept;

  [[nodiscard]] bool has(seq_id id) const { return seqs_.count(id) != 0; }
  /// A new sequence could get a KDA slot.
  [[nodiscard]] bool has_free_slot() const noexcept { return !free_slots_.empty(); }
  /// Blocks still needed for `id` (or a new sequence) to cover `tokens` rows.
  [[nodiscard]] std::int64_t blocks_needed(seq_id id, std::int64_t tokens) const;
  [[nodiscard]] bool can_allocate(seq_id id, std::int64_t tokens) const;
  /// Ensures `id` holds a slot and blocks for `tokens` rows; returns its state view, or nullptr
  /// (nothing changed) when the pools cannot satisfy it. For a new sequence, `hit` (from
  /// lookup(), consumed) starts it at hit->tokens(): its blocks are shared and the copies that
  /// restore its KDA state are appended to `restore` (to run before the step).
  model::sequence_state* allocate(seq_id id, std::int64_t tokens, prefix_hit* hit = nullptr, std::vector<state_copy>* restore = nullptr);
  [[nodiscard]] model::sequence_state* state(seq_id id);
  /// Registers what `id` has computed (`tokens[0, computed)`), keeps its last boundary
  /// checkpoint for reuse (prefix caching), then returns its slot and drops its blocks.
  void release(seq_id id, std::span<const std::int32_t> tokens = {}, std::int64_t computed = 0);

  // ---- prefix cache ----
  [[nodiscard]] bool caching() const noexcept { return caching_; }
  /// The longest cached prefix of `tokens` usable by a new sequence (at most size − 1 tokens:
  /// one token is always computed, for its logits).
  [[nodiscard]] prefix_hit lookup(std::span<const std::int32_t> tokens);
  /// After the coming step, `id`'s state stands at `boundary` (a multiple of block_size):
  /// copy it into a checkpoint (copies appended to `after`). `keep`: registered as soon as the
  /// step is done (turn boundaries, intervals); otherwise it replaces the sequence's rolling
  /// checkpoint. False (nothing planned) when the checkpoints' share of the pool is full or
  /// taking the blocks would leave fewer than `reserve` available for the running sequences.
  bool plan_checkpoint(seq_id id, std::int64_t boundary, bool keep, std::vector<state_copy>& after, std::int64_t reserve = 0);
  /// The step ran: `tokens[0, computed)` of `id` are in its rows and state. Registers full
  /// blocks, commits planned checkpoints, drops the references a restore held.
  void step_done(seq_id id, std::span<const std::int32_t> tokens, std::int64_t computed);
  /// Tokens between interval checkpoints (0: none), as configured or derived.
  [[nodiscard]] std::int64_t checkpoint_interval() const noexcept { return interval_; }
  /// Blocks one checkpoint takes.
  [[nodiscard]] std::int64_t checkpoint_blocks() const noexcept { return ckpt_blocks_; }

  [[nodiscard]] kv_usage usage() const;
  [[nodiscard]] int max_num_seqs() const noexcept { return num_slots_; }
  [[nodiscard]] const std::string& sizing_note() const noexcept { return note_; }
  [[nodiscard]] const kv_config& config() const noexcept { return k_; }
  /// Consistency of every count (tests; O(pool)): empty when sound, else what is wrong.
  [[nodiscard]] std::string audit() const;

private:
  struct pending_checkpoint {
    std::vector<std::int32_t> blocks;
    std::int64_t boundary = 0;
    bool keep = false;
  };
  struct seq {
    int slot = -1;
    std::vector<std::int32_t> blocks;
    model::sequence_state view;
    std::vector<std::uint64_t> chain;            // hashes of its full computed blocks
    std::optional<pending_checkpoint> pending;   // planned this step
    std::optional<pending_checkpoint> rolling;   // its last boundary (registered at release)
    std::optional<std::uint64_t> restoring;      // checkpoint held until the restore has run
  };
  struct block_meta {
    std::int32_t ref = 0;    // sequences holding it (checkpoint storage: 1, owned by the checkpoint)
    std::uint64_t hash = 0;  // registered under this hash (cached == true)
    bool cached = false;
    bool in_lru = false;
    std::list<std::pair<bool, std::uint64_t>>::iterator lru;
  };
  struct checkpoint {
    std::vector<std::int32_t> blocks;
    std::int32_t ref = 0;
    bool in_lru = false;
    std::list<std::pair<bool, std::uint64_t>>::iterator lru;
    std::list<std::uint64_t>::iterator ckpt_lru; // its place among the LRU's checkpoints
  };

  void point(seq& s);
  std::int32_t take_block();                 // free list, else evict the least recently used
  void unref_block(std::int32_t b);
  void ref_block(std::int32_t b);
  void lru_push(bool is_checkpoint, std::uint64_t key);
  void lru_erase(bool is_checkpoint, std::uint64_t key);
  void evict_one();
  void evict_entry(bool is_checkpoint, std::uint64_t key);
  void free_checkpoint_blocks(std::vector<std::int32_t>& blocks);
  void commit(seq& s, pending_checkpoint p); // register as a checkpoint under its chain hash
  void register_blocks(seq& s, std::span<const std::int32_t> tokens, std::int64_t computed);
  std::vector<state_copy> slot_copies(int slot, const std::vector<std::int32_t>& blocks, bool to_blocks) const;
  [[nodiscard]] std::int64_t available_blocks() const noexcept {
    return static_cast<std::int64_t>(free_blocks_.size()) + lru_blocks_;
  }
  // second tier
  struct host_entry {
    std::vector<std::int32_t> blocks;
    std::int32_t pins = 0;
    bool in_lru = false;
    std::list<std::pair<bool, std::uint64_t>>::iterator lru;
  };
  void tier_out(bool is_checkpoint, std::uint64_t hash, const std::vector<std::int32_t>& device_blocks);
  bool host_take(std::int64_t n, std::vector<std::int32_t>& out); // evicting the host LRU
  void host_erase(bool is_checkpoint, std::uint64_t hash);
  void host_pin(bool is_checkpoint, std::uint64_t hash, int delta);
  void copy_bytes(void* dst, const void* src, std::size_t n) const;
  [[nodiscard]] char* device_region(std::int32_t b) const noexcept;
  [[nodiscard]] char* host_region(std::int32_t b) const noexcept;

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
  // prefix cache
  bool caching_ = false;
  std::int64_t interval_ = 0, ckpt_blocks_ = 0, ckpt_block_cap_ = 0;
  std::vector<block_meta> meta_;
  std::unordered_map<std::uint64_t, std::int32_t> cached_;      // chain hash → row block
  std::unordered_map<std::uint64_t, checkpoint> checkpoints_;   // chain hash at its boundary → checkpoint
  std::list<std::pair<bool, std::uint64_t>> lru_;               // (is checkpoint, block id or hash), oldest first
  std::list<std::uint64_t> ckpt_lru_;                           // the checkpoints of lru_, same order
  std::int64_t lru_blocks_ = 0, ckpt_blocks_held_ = 0;
  bool tier_ = false;
  std::size_t region_ = 0;               // bytes of one block (all MLA layers)
  std::shared_ptr<void> host_mem_;
  std::int64_t host_blocks_ = 0, host_writes_ = 0, host_reads_ = 0;
  std::vector<std::int32_t> host_free_;
  std::unordered_map<std::uint64_t, host_entry> host_rows_, host_ckpts_; // by chain hash
  std::list<std::pair<bool, std::uint64_t>> host_lru_;                   // (is checkpoint, hash)
};

} // namespace k3::engine
