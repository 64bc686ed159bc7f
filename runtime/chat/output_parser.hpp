#pragma once
// Incremental parsers of generated assistant messages, driven by token ids: K3 XTML (spec
// §16.7) and the K2 / Kimi Linear envelope (spec §16.5).
//
// Markers are matched on ids, never on text: a model that spells `<|close|>` with ordinary BPE
// pieces does not end a channel, and no detokenizer spacing can break parsing. Each call to
// feed(token, text) first appends `text` (the detokenized text released with that token: its
// own text and anything held before it; marker tokens release no text of their own) to the
// current channel, then acts on `token` if it is a marker. The request actor releases all held
// text at a marker (request_options::structural_ids), so text is always attributed to the right
// side of it.
//
// Streaming and non-streaming share this one state machine; the concatenation of all deltas is
// the complete result (tested at every split point). Tool-call arguments stream as they are
// generated: K3 argument by argument (`{"key": ` then the value: string values as they arrive,
// other values once complete, re-serialized), K2 as the raw JSON text. A parse problem never
// throws: a malformed argument value becomes a JSON string, an unterminated marker header is
// dropped, a call cut off by max_tokens is closed so its arguments stay valid JSON (K3).
//
// One parser per generated message; not thread-safe.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace k3::tok {
class kimi_tokenizer;
}

namespace k3::chat {

/// A piece of one tool call: `begin` carries the name (first delta of the call); `arguments`
/// is text appended to the call's function.arguments.
struct call_delta {
  std::size_t index = 0;
  bool begin = false;
  std::string name;
  std::string arguments;
};

struct parse_delta {
  std::string reasoning;
  std::string content;
  std::vector<call_delta> calls;
  void append(parse_delta&& d);
  [[nodiscard]] bool empty() const noexcept { return reasoning.empty() && content.empty() && calls.empty(); }
};

class k3_output_parser {
public:
  struct marker_ids {
    std::int32_t open = -1, close = -1, sep = -1, end_of_msg = -1, eos = -1;
    [[nodiscard]] std::vector<std::int32_t> all() const { return {open, close, sep, end_of_msg, eos}; }
  };
  /// The marker ids of a K3 tokenizer (by their names).
  [[nodiscard]] static marker_ids ids_of(const tok::kimi_tokenizer& t);

  /// starts_in_reasoning: the prompt ended with <|open|>think<|sep|> (thinking mode), else with
  /// <|open|>response<|sep|>. report_calls false: tool calls are parsed but not reported (the
  /// request declared no tools, or tool_choice none).
  k3_output_parser(marker_ids ids, bool starts_in_reasoning, bool report_calls = true);
  parse_delta feed(std::int32_t token, std::string_view text);
  /// End of the stream: closes what is open (an argument, a call); drops an unfinished header.
  parse_delta finish();
  /// Saw <|end_of_msg|> or [EOS].
  [[nodiscard]] bool ended() const noexcept { return mode_ == mode::done; }
  [[nodiscard]] bool in_reasoning() const noexcept { return mode_ == mode::reasoning && !in_header_; }
  [[nodiscard]] std::size_t calls() const noexcept { return calls_; }

private:
  enum class mode { reasoning, between, content, after_content, tools, call, dropped_call, argument, json, closed, done };
  void text(std::string_view t, parse_delta& d);
  void header(parse_delta& d);
  void close_argument(parse_delta& d);
  void close_call(parse_delta& d);
  void args(parse_delta& d, std::string s);

  marker_ids ids_;
  bool report_;
  mode mode_;
  bool in_header_ = false, header_close_ = false;
  std::string header_;
  // the call being generated
  std::size_t calls_ = 0;         ///< reported calls so far (the next call's index)
  bool call_open_ = false, any_arg_ = false, arg_string_ = false;
  std::string arg_raw_;           ///< a non-string argument value, until it is complete
};

class k2_output_parser {
public:
  struct marker_ids {
    std::int32_t section_begin = -1, section_end = -1, call_begin = -1, arg_begin = -1, call_end = -1, im_end = -1,
                 eos = -1, eot = -1;
    [[nodiscard]] std::vector<std::int32_t> all() const {
      return {section_begin, section_end, call_begin, arg_begin, call_end, im_end, eos, eot};
    }
  };
  [[nodiscard]] static marker_ids ids_of(const tok::kimi_tokenizer& t);

  explicit k2_output_parser(marker_ids ids, bool report_calls = true) : ids_(ids), report_(report_calls) {}
  parse_delta feed(std::int32_t token, std::string_view text);
  parse_delta finish();
  [[nodiscard]] bool ended() const noexcept { return mode_ == mode::done; }
  [[nodiscard]] std::size_t calls() const noexcept { return calls_; }

private:
  enum class mode { content, section, call_id, args, dropped_call, done };
  marker_ids ids_;
  bool report_;
  mode mode_ = mode::content;
  std::string id_;
  std::size_t calls_ = 0;
};

/// K3 attribute values are escaped & -> &amp;, " -> &quot;; key="value" pairs of a tag header
/// (after the tag name), unescaped. Exposed for tests.
[[nodiscard]] std::vector<std::pair<std::string, std::string>> parse_attributes(std::string_view header);

} // namespace k3::chat
