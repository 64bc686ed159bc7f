#pragma once
// OpenAI request bodies (chat completions, completions, tokenize) → engine requests, with the
// validation the server promises: every unsupported or ill-typed field is an api_error with
// HTTP 400 and `param` naming the field; an unknown model is 404. Unknown top-level fields are
// ignored (as vLLM does) and counted by the caller.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/sampling/sampler.hpp"
#include "runtime/chat/conversation.hpp"
#include "runtime/chat/json.hpp"

namespace k3::net {

struct api_error : std::exception {
  api_error(int s, std::string msg, std::string p = "", std::string c = "", std::string t = "")
      : status(s), message(std::move(msg)), param(std::move(p)), code(std::move(c)), type(std::move(t)) {
    if (type.empty()) type = s == 401 ? "authentication_error" : s == 404 ? "not_found_error" : s == 429 ? "rate_limit_error"
                             : s >= 500 ? "server_error" : "invalid_request_error";
  }
  [[nodiscard]] const char* what() const noexcept override { return message.c_str(); }
  int status;
  std::string message, param, code, type;
};

/// The OpenAI error object {"error": {"message", "type", "param", "code"}}.
[[nodiscard]] std::string error_json(const api_error& e);

struct generation_fields {
  int max_tokens = -1; ///< -1: the rest of the context
  sampling::params sampling;
  std::uint64_t seed = 0;
  bool has_seed = false;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;  ///< chat: logprobs=true; completions: logprobs=N (then top N)
  int n = 1;              ///< choices per request (1..16)
  bool skip_special_tokens = true; ///< drop special-token text from the output (vLLM's default)
  std::string model;
};

struct chat_request {
  generation_fields gen;
  chat::conversation conv;
  bool has_tools = false;
  bool parallel_tool_calls = true;
  std::string named_tool; ///< tool_choice {"type": "function", "function": {"name": N}}
};

struct completion_request {
  generation_fields gen;
  std::string prompt;                 ///< text prompt (encoded without special tokens)
  std::vector<std::int32_t> prompt_ids; ///< or token ids
};

/// Parses a JSON body; malformed JSON / invalid UTF-8 → 400.
[[nodiscard]] json::value parse_body(std::string_view body);

/// `for_generation` false (render, tokenize): add_generation_prompt may be false.
[[nodiscard]] chat_request parse_chat(const json::value& body, bool k3_family, bool for_generation = true);
[[nodiscard]] completion_request parse_completion(const json::value& body);

/// The model field must name one of the served names (when present); returns the name to report
/// (the one the client asked for, else the first).
[[nodiscard]] std::string check_model(const generation_fields& g, const std::vector<std::string>& names);

/// An integer field checked against [lo, hi] before any narrowing (overflowing text included):
/// 400 naming `param` otherwise.
[[nodiscard]] long long integer_in(const json::value& v, const std::string& param, long long lo, long long hi);

} // namespace k3::net
