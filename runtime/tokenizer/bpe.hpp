#pragma once
// tiktoken-style byte-level BPE: a rank table (token bytes -> rank = id), a pre-tokenizer and
// optional special tokens. Encoding of a piece repeatedly merges the adjacent pair whose
// concatenation has the lowest rank (leftmost on ties), exactly as tiktoken does.
//
// Loading: `load_tiktoken_file` reads the standard `*.tiktoken` / `tiktoken.model` format
// (one `base64(bytes) rank` per line, blank lines ignored). Errors name the file and line.
//
// Thread safety: a loaded tokenizer is immutable; encode/decode are const and reentrant.

#include <cstdint>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/tokenizer/pretokenizer.hpp"

namespace k3::tok {

struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept;
};

class bpe_tokenizer {
public:
  /// ranks: token bytes for ids 0..n-1 (ids must be dense); specials: text -> id.
  bpe_tokenizer(std::vector<std::string> tokens, std::string_view pattern,
                std::vector<std::pair<std::string, std::int32_t>> specials = {});

  /// Reads a tiktoken rank file. Throws std::runtime_error naming file and line.
  [[nodiscard]] static std::vector<std::string> load_tiktoken_file(const std::string& path);

  /// Encodes text; when allow_special, special-token strings become their ids, otherwise they
  /// are ordinary text (tiktoken's disallowed_special=()).
  [[nodiscard]] std::vector<std::int32_t> encode(std::string_view text, bool allow_special) const;
  /// Appends the ids of text to out. Stops early and returns false once out holds more than
  /// `limit` ids (what is in out then is a prefix of no use); true when the whole text fit.
  bool encode_into(std::string_view text, bool allow_special, std::vector<std::int32_t>& out,
                   std::size_t limit = SIZE_MAX) const;

  /// Concatenated token bytes (specials by their text). Unknown ids throw std::out_of_range.
  [[nodiscard]] std::string decode(std::span<const std::int32_t> ids) const;
  [[nodiscard]] std::string_view token_bytes(std::int32_t id) const;

  [[nodiscard]] std::int32_t base_vocab_size() const noexcept { return static_cast<std::int32_t>(tokens_.size()); }
  /// One past the largest id (base or special).
  [[nodiscard]] std::int32_t vocab_size() const noexcept { return vocab_size_; }
  [[nodiscard]] bool is_special(std::int32_t id) const noexcept { return special_text_.count(id) != 0; }
  /// Id of a special token's text, or -1.
  [[nodiscard]] std::int32_t special_id(std::string_view text) const;
  /// Bytes of the longest token (base or special): no text of B bytes encodes to fewer than
  /// ceil(B / max_token_bytes()) ids, which bounds a prompt before it is encoded.
  [[nodiscard]] std::size_t max_token_bytes() const noexcept { return max_token_bytes_; }

private:
  void encode_ordinary(std::string_view text, std::vector<std::int32_t>& out, std::size_t limit) const;
  void encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const;
  [[nodiscard]] std::int32_t rank_of(std::string_view bytes) const;

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, std::int32_t, string_hash, std::equal_to<>> ranks_;
  regex_splitter splitter_;
  std::unordered_map<std::string, std::int32_t, string_hash, std::equal_to<>> specials_;
  std::unordered_map<std::int32_t, std::string> special_text_;
  std::vector<std::string> specials_by_length_; // longest first, for leftmost-longest scanning
  std::string special_first_bytes_;             // first byte of every special, for a quick scan
  std::int32_t vocab_size_ = 0;
  std::size_t max_token_bytes_ = 1;
};

} // namespace k3::tok
