#pragma once
// Pre-tokenizer: splits text into the pieces BPE runs on, with a PCRE2 (JIT) Unicode regex.
//
// Patterns: Kimi (K2 / Kimi Linear / K3, spec §16.2, with tiktoken's `[X&&[^\p{Han}]]`
// class intersections rewritten as `(?:(?!\p{Han})X)` for PCRE2), and OpenAI's o200k_base and
// cl100k_base (as js-tiktoken ships them). Compiled with UTF and UCP, so \s and \p{…} are
// Unicode-aware like tiktoken's regex engine.
//
// Input may contain invalid UTF-8: maximal invalid byte runs become pieces of their own (BPE
// encodes them byte by byte), so encode/decode round-trips any byte string.
//
// A splitter is immutable after construction and safe to share between threads (each call
// uses its own match data).

#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace k3::tok {

enum class pattern_kind { kimi, o200k, cl100k };

[[nodiscard]] std::string_view pattern_source(pattern_kind p) noexcept;
/// "kimi", "o200k", "cl100k" -> kind; false otherwise.
bool parse_pattern(std::string_view name, pattern_kind& out) noexcept;

class regex_splitter {
public:
  /// Compiles `pattern`; throws std::runtime_error with PCRE2's message and offset on error.
  explicit regex_splitter(std::string_view pattern);
  ~regex_splitter();
  regex_splitter(regex_splitter&&) noexcept;
  regex_splitter& operator=(regex_splitter&&) noexcept;

  /// Calls fn(piece) for each pre-token of text, in order; pieces tile the input exactly.
  void split(std::string_view text, const std::function<void(std::string_view)>& fn) const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace k3::tok
