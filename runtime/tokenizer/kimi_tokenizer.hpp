#pragma once
// The Kimi tokenizer (K2 / Kimi Linear / K3) loaded from a Hugging Face model directory:
//   tiktoken.model          base vocabulary (163,584 ranks for the real models)
//   tokenizer_config.json   added_tokens_decoder: names of the 256 special ids above the base
//   config.json             bos/eos/pad ids (top level, or text_config for K3)
//   generation_config.json  eos_token_id (int or list) — extra stop ids, when present
// Special ids without a name are `<|reserved_token_{id}|>` (spec §16.1). No id ≥ base + 256 is
// ever created.
//
// Encoding follows tokenization_kimi.py (spec §16.3): windows of 400,000 code points, each cut
// so no piece holds more than 25,000 consecutive whitespace / non-whitespace code points
// (Python isspace), then tiktoken encoding of each piece with specials allowed (control
// segments) or treated as text (user content). Chat rendering encodes segment by segment, so
// BPE never merges across a segment boundary and user text can never spell a control token.
//
// Immutable after load; safe to share between threads.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/tokenizer/bpe.hpp"

namespace k3::tok {

/// A piece of rendered chat text: control markup (specials recognised) or plain text.
struct segment {
  std::string text;
  bool control = false;
};

class kimi_tokenizer {
public:
  static constexpr int num_special_slots = 256;

  /// Loads from a model directory. Throws std::runtime_error naming the file and key.
  [[nodiscard]] static kimi_tokenizer load(const std::string& model_dir);

  /// From parts (tests and make-model): base tokens and the named specials (id -> text).
  /// `not_special`: named ids marked `"special": false` (their text is kept by skip_special_tokens).
  kimi_tokenizer(std::vector<std::string> base, const std::vector<std::pair<std::int32_t, std::string>>& named,
                 const std::vector<std::int32_t>& not_special = {});

  [[nodiscard]] std::vector<std::int32_t> encode(std::string_view text, bool allow_special) const;
  bool encode_into(std::string_view text, bool allow_special, std::vector<std::int32_t>& out,
                   std::size_t limit = SIZE_MAX) const;
  [[nodiscard]] std::vector<std::int32_t> encode(std::span<const segment> segments) const;
  /// Encodes segments into out, stopping once out holds more than `limit` ids: false then.
  /// A text whose bytes alone prove it cannot fit (min_tokens) is refused before any work.
  bool encode_bounded(std::span<const segment> segments, std::size_t limit, std::vector<std::int32_t>& out) const;
  /// The fewest ids `bytes` bytes of text can encode to.
  [[nodiscard]] std::size_t min_tokens(std::size_t bytes) const noexcept {
    return (bytes + bpe_.max_token_bytes() - 1) / bpe_.max_token_bytes();
  }
  [[nodiscard]] std::string decode(std::span<const std::int32_t> ids) const { return bpe_.decode(ids); }

  [[nodiscard]] const bpe_tokenizer& bpe() const noexcept { return bpe_; }
  [[nodiscard]] std::int32_t vocab_size() const noexcept { return bpe_.vocab_size(); }
  [[nodiscard]] std::int32_t id_of(std::string_view special) const { return bpe_.special_id(special); }

  /// Special ids whose text skip_special_tokens leaves out: the 256 special slots except those
  /// tokenizer_config.json marks `"special": false` (K3's <|open|>/<|close|>/<|sep|>, K2's
  /// tool-call markers). Sorted.
  [[nodiscard]] const std::vector<std::int32_t>& skippable_specials() const noexcept { return skippable_; }

  std::int32_t bos_id = -1;
  std::int32_t eos_id = -1;
  std::int32_t pad_id = -1;
  std::vector<std::int32_t> stop_ids; ///< eos plus generation_config eos ids, deduplicated

private:
  static bpe_tokenizer make_bpe(std::vector<std::string> base,
                                const std::vector<std::pair<std::int32_t, std::string>>& named);
  bpe_tokenizer bpe_;
  std::vector<std::int32_t> skippable_;
};

/// The Kimi 400k / 25k piece split (exposed for tests): byte ranges of text, in order.
[[nodiscard]] std::vector<std::string_view> kimi_split(std::string_view text, std::size_t window = 400000,
                                                       std::size_t max_run = 25000);

} // namespace k3::tok
