#pragma once
// Incremental parsers for generated assistant text (streaming-safe): K3 XTML (spec §16.7) and
// the K2 / Kimi Linear envelope (spec §16.5). Feed detokenized text as it arrives (specials kept,
// no inserted spaces); each call returns only what is now certain. Text that could be the
// beginning of a marker is held back, so a marker split across tokens never leaks; finish()
// releases what is left at the end of the stream (e.g. after max_tokens).
//
// Invariant (tested for every split point): the concatenation of all deltas equals the result
// of feeding the whole text at once.
//
// One parser per generated message; not thread-safe.

#include <string>
#include <string_view>
#include <vector>

namespace k3::chat {

struct parsed_call {
  std::string name;
  std::string arguments; ///< JSON object text (OpenAI function.arguments)
};

struct parse_delta {
  std::string reasoning;
  std::string content;
  std::vector<parsed_call> calls;
  void append(parse_delta&& d);
};

class k3_output_parser {
public:
  /// starts_in_reasoning: the prompt ended with <|open|>think<|sep|> (thinking mode).
  explicit k3_output_parser(bool starts_in_reasoning = true)
      : state_(starts_in_reasoning ? state::reasoning : state::content) {}
  parse_delta feed(std::string_view text);
  parse_delta finish();
  /// Saw <|end_of_msg|> or [EOS].
  [[nodiscard]] bool ended() const noexcept { return state_ == state::done; }
  [[nodiscard]] bool in_reasoning() const noexcept { return state_ == state::reasoning; }

private:
  enum class state { reasoning, between, content, after_content, tools, closed, done };
  parse_delta run(bool final);
  state state_;
  std::string buf_;
  bool think_prefix_checked_ = false;
};

class k2_output_parser {
public:
  parse_delta feed(std::string_view text);
  parse_delta finish();
  [[nodiscard]] bool ended() const noexcept { return state_ == state::done; }

private:
  enum class state { content, calls, done };
  parse_delta run(bool final);
  state state_ = state::content;
  std::string buf_;
};

/// Parses one `<|open|>call ATTRS<|sep|>BODY<|close|>call<|sep|>` (exposed for tests); false if
/// the call has no tool name.
bool parse_k3_call(std::string_view call, parsed_call& out);

} // namespace k3::chat
