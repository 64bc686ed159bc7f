#pragma once
// The Kimi K3 / Kimi Linear forward pass on the CPU kernels (spec model.md §4–§10).
//
// A step runs one batch that mixes prefill chunks and decode tokens of different sequences:
// the batch is plain data, a list of (sequence state, tokens) entries. All tokens of the batch
// go through every projection GEMM together; the sequence-local parts (KDA short conv and
// delta-rule scan, MLA cache write and attention) run per entry on its own state. Consecutive
// single-token entries share one batched recurrent scan.
//
// Per-sequence state (sequence_state): for each KDA layer the fp32 recurrent state [H, dk, dv]
// and the conv state [3, P, K−1] (pre-conv inputs, q/k/v streams); for each MLA layer a block
// table of bf16 latent rows [c_kv | k_rot] (paged, block_size rows per block). A state either
// owns its storage (the default for offline use: reserve() grows the blocks) or is a view into
// pools of a KV manager (sequence_state::view: the manager points kda/conv at its slot and
// fills mla_blocks before each step).
//
// Invariances the tests pin (fp32, rel ≤ 1e-4): one prefill = chunked prefill = token by token
// decode; a sequence's logits are the same alone or batched with others. They hold because
// every per-token reduction has a fixed order independent of batch composition, and the
// chunked and recurrent KDA forms agree to ~1e-6.
//
// Thread safety: step() is called by one thread at a time (it owns a workspace); the kernels
// parallelise internally. Different sequence_states may not alias.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/common/bf16.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/experts.hpp"
#include "runtime/model/safetensors.hpp"
#include "runtime/model/weights.hpp"

namespace k3::model {

class sequence_state {
public:
  /// Owning state: zeroed KDA/conv storage, blocks allocated by reserve().
  sequence_state(const model_config& c, int block_size = 64, bool fp32_cache = false);
  /// Non-owning view: kda/conv pointers null and tables empty until a KV manager fills them.
  [[nodiscard]] static sequence_state view(const model_config& c, int block_size, bool fp32_cache);
  sequence_state(const sequence_state&) = delete; // kda/conv may point into own storage
  sequence_state& operator=(const sequence_state&) = delete;
  sequence_state(sequence_state&&) noexcept = default;
  sequence_state& operator=(sequence_state&&) noexcept = default;

  std::int64_t pos = 0;                          ///< tokens already processed
  std::vector<float*> kda;                       ///< per KDA layer → [H, dk, dv]
  std::vector<float*> conv;                      ///< per KDA layer → [3, P, K−1]
  std::vector<std::vector<bf16_t*>> mla_blocks;  ///< per MLA layer: block table
  int block_size = 64;
  int mla_row_width = 0;
  bool owns_blocks = true;
  bool fp32_cache = false; ///< rows are fp32 (exact_fp32 mode); blocks then hold floats

  /// Ensures the block tables cover `tokens` rows (allocating owned blocks). With external
  /// blocks, throws std::length_error if the manager did not provide enough.
  void reserve(std::int64_t tokens);
  /// Back to an empty sequence (owned states zeroed; owned blocks kept for reuse).
  void reset();
  [[nodiscard]] std::size_t kda_state_floats() const noexcept { return kda_floats_; }
  [[nodiscard]] std::size_t conv_state_floats() const noexcept { return conv_floats_; }
  [[nodiscard]] std::int64_t capacity() const noexcept;
  /// Bytes of fixed state (KDA recurrent + conv) and of one cached token (all MLA layers).
  [[nodiscard]] static std::int64_t fixed_bytes(const model_config& c);
  [[nodiscard]] static std::int64_t bytes_per_token(const model_config& c);

private:
  std::vector<std::unique_ptr<bf16_t[]>> owned_;
  std::vector<std::vector<float>> own_state_;
  std::size_t kda_floats_ = 0, conv_floats_ = 0;
};

/// Input rows that replace token embeddings: the sequence's tokens at absolute positions
/// [start, start + count) take rows [count, hidden] (fp32) instead of their embedding rows —
/// image features at <|media_pad|> positions (spec vision.md §6.3). Spans may extend outside
/// the entry's chunk; only the overlap is used.
struct embed_override {
  std::int64_t start = 0, count = 0;
  const float* rows = nullptr;        ///< fp32 rows, or
  const bf16_t* rows_bf16 = nullptr;  ///< bf16 rows (the server keeps image features in bf16, as the reference does)
};

struct batch_entry {
  sequence_state* seq = nullptr;
  std::span<const std::int32_t> tokens;
  bool all_logits = false; ///< logits for every token (else only the last)
  std::span<const embed_override> embeds = {}; ///< replaced input rows (optional)
};

struct step_output {
  std::int64_t vocab = 0;
  std::vector<float> logits;           ///< rows × vocab
  std::vector<std::int64_t> first_row; ///< per entry: its first row in logits
  [[nodiscard]] std::span<const float> row(std::int64_t r) const {
    return {logits.data() + r * vocab, static_cast<std::size_t>(vocab)};
  }
  /// The last logits row of entry i.
  [[nodiscard]] std::span<const float> last(std::size_t i) const;
};

class workspace;

class model {
public:
  /// Loads config.json and the safetensors checkpoint in `dir`. Throws config_error or
  /// checkpoint_error with the file and key/tensor named.
  [[nodiscard]] static std::unique_ptr<model> load(const std::string& dir, const load_options& opt = {},
                                                   std::vector<std::string>* notes = nullptr);
  ~model();

  [[nodiscard]] const model_config& config() const noexcept { return cfg_; }
  [[nodiscard]] const model_weights& weights() const noexcept { return w_; }
  [[nodiscard]] const checkpoint& ckpt() const noexcept { return ck_; }
  [[nodiscard]] sequence_state new_sequence(int block_size = 64) const {
    return sequence_state(cfg_, block_size, opt_.exact_fp32);
  }
  [[nodiscard]] const load_options& options() const noexcept { return opt_; }

  /// Runs one batch. Advances every entry's state by its tokens; an entry at pos 0 starts from
  /// zeroed KDA/conv state (so recycled KV-manager slots need no clearing). Throws std::invalid_argument
  /// for a token id outside the vocabulary, an empty entry, two entries on one state, or a
  /// sequence past max_position_embeddings; the states are untouched in that case.
  step_output step(std::span<const batch_entry> batch);

  /// Routes the routed-expert part of every MoE layer through `d` (expert-shard actors);
  /// nullptr restores local computation. Not owned; must outlive its use.
  void set_expert_dispatcher(expert_dispatcher* d) noexcept { dispatcher_ = d; }
  /// The MoE weights of MoE layer ordinal i (for shard hosts).
  [[nodiscard]] const moe_weights& moe_layer(int i) const;

  /// Tokens routed to each expert so far: [moe layer][expert] (for load figures).
  [[nodiscard]] const std::vector<std::vector<std::int64_t>>& expert_tokens() const noexcept { return expert_tokens_; }

private:
  model(checkpoint ck, model_config cfg, model_weights w, load_options opt);

  checkpoint ck_;
  model_config cfg_;
  model_weights w_;
  load_options opt_;
  std::unique_ptr<workspace> ws_;
  std::vector<std::vector<std::int64_t>> expert_tokens_;
  expert_dispatcher* dispatcher_ = nullptr;
};

} // namespace k3::model
