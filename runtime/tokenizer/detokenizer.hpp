#pragma once
// Incremental detokenizer for streaming: feed token ids one at a time, get back text that is
// always well-formed UTF-8. Bytes of a multi-byte character split across tokens are held until
// the character completes; bytes that can never form a character become U+FFFD at once, so a
// stream never stalls and never emits a broken sequence. flush() ends the stream (a held
// incomplete tail becomes U+FFFD).
//
// One decoder per output stream; not thread-safe (it is per-request state).

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tokenizer/bpe.hpp"

namespace k3::tok {

class incremental_decoder {
public:
  /// `silent`: ids that produce no text (skipped special tokens, markers a parser consumes);
  /// sorted or not, duplicates allowed.
  explicit incremental_decoder(const bpe_tokenizer& tok, std::vector<std::int32_t> silent = {});

  [[nodiscard]] std::string push(std::int32_t id);
  [[nodiscard]] std::string push_bytes(std::string_view bytes);
  [[nodiscard]] std::string flush();
  /// Bytes waiting for the rest of a character (0..3).
  [[nodiscard]] std::size_t pending() const noexcept { return held_.size(); }

private:
  const bpe_tokenizer* tok_;
  std::vector<std::int32_t> silent_;
  std::string held_;
};

/// Length of the longest prefix of s after which no incomplete-but-valid-so-far UTF-8
/// sequence remains (what may be emitted now).
[[nodiscard]] std::size_t complete_prefix(std::string_view s) noexcept;

} // namespace k3::tok
