#pragma once
// The grammar of a whole constrained assistant message, for both Kimi formats.
//
// K3 (XTML, spec §16.6/§16.7), after the generation prompt:
//   [thinking: TEXT <|close|>think<|sep|>]            the think channel stays free text
//   [<|open|>response<|sep|>] CONTENT <|close|>response<|sep|>   (optional unless JSON is required;
//                                                       opened by the prompt without thinking)
//   [<|open|>tools<|sep|> CALL… <|close|>tools<|sep|>] (per tool_choice)
//   <|close|>message<|sep|> STOP
// CALL = <|open|>call tool="NAME" index="I"<|sep|> ARGUMENTS <|close|>call<|sep|>, I = 1, 2, …
// in order; ARGUMENTS the XTML argument elements valid under the tool's `parameters`.
//
// Kimi Linear / K2: CONTENT [<|tool_calls_section_begin|> (<|tool_call_begin|>functions.NAME:IDX
//   <|tool_call_argument_begin|> JSON <|tool_call_end|>)+ <|tool_calls_section_end|>] STOP.
//
// CONTENT is JSON valid under response_format's schema (or any object for json_object), else
// free text. STOP is the model's end-of-message token or one of the spec's safety stops — never
// a generic EOS alone. Markers are the special *tokens* (grammar symbols ≥ 256): a marker spelled
// with ordinary pieces stays text.
//
// Compiled grammars are cached by their specification (agents send the same tools every turn).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/chat/json.hpp"
#include "runtime/grammar/matcher.hpp"

namespace k3::tok {
class kimi_tokenizer;
}

namespace k3::grammar {

struct tool_def {
  std::string name;
  json::value parameters; ///< null kind: no schema given
  bool strict = false;    ///< arguments constrained even under tool_choice auto
  std::string path;       ///< e.g. tools[2].function.parameters (errors)
};

enum class tool_mode {
  free,     ///< no tools block is constrained (auto without strict tools)
  none,     ///< no tools block at all
  optional, ///< auto with at least one strict tool: calls optional, strict ones constrained
  required, ///< at least one call of a declared tool
  named     ///< exactly one call of tools[0]
};

struct output_spec {
  bool k3 = true;
  bool thinking = false; ///< K3: the prompt ended inside the think channel
  tool_mode tools_mode = tool_mode::free;
  std::vector<tool_def> tools;
  bool parallel = true;
  bool json_object = false;
  std::optional<json::value> json_schema;
  std::string schema_path = "response_format.json_schema.schema";
};

/// True when the spec constrains anything (otherwise decoding stays free).
[[nodiscard]] bool constrains(const output_spec& s);

/// Compiles the grammar of `s` for this tokenizer and computes every token cache on `threads`
/// threads (no compile cache). Throws schema_error (naming keyword and path) for what cannot be
/// enforced.
[[nodiscard]] std::shared_ptr<const compiled_grammar> compile_output_grammar(const output_spec& s, const tok::kimi_tokenizer& t,
                                                                             std::int32_t model_vocab, unsigned threads);

/// compile_output_grammar through a cache keyed by the specification (on half the cores, at most
/// 8). Throws schema_error like it.
[[nodiscard]] std::shared_ptr<const compiled_grammar> output_grammar(const output_spec& s, const tok::kimi_tokenizer& t,
                                                                     std::int32_t model_vocab);

} // namespace k3::grammar
