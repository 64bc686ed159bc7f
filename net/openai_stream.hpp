#pragma once
// Turns the engine's stream events for one request into OpenAI response objects: streaming
// chunks (chat.completion.chunk / text_completion) and the final non-streaming body. K3 output
// goes through the XTML parser (reasoning_content, content, tool_calls), Kimi Linear through the
// K2 parser. Order per OpenAI/vLLM: role chunk, deltas, final chunk with finish_reason, optional
// usage chunk (choices: []); the transport adds `data:` framing and [DONE].
// One builder per request, used from one thread at a time.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/request_actor.hpp"
#include "runtime/chat/output_parser.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"

namespace k3::net {

struct stream_setup {
  std::string id;        ///< chatcmpl-… / cmpl-…
  std::string model;     ///< served name
  std::int64_t created = 0;
  bool chat = true;
  bool k3 = true;        ///< K3 XTML output (else K2 envelope / raw text for completions)
  bool thinking = true;  ///< prompt ended inside the think channel
  bool tools_declared = false; ///< tool calls are reported (tools given, tool_choice not none)
  bool include_usage = false;
  int index = 0;                  ///< choice index (n > 1: one builder per choice)
  bool logprobs = false;          ///< report per-token log-probabilities
  const tok::kimi_tokenizer* tokenizer = nullptr; ///< token text for logprobs
  std::int64_t prompt_tokens = 0; ///< as reported (K3 chat: without the 3-token opener)
};

class response_builder {
public:
  explicit response_builder(stream_setup s);
  /// Chunks (JSON objects) to send for this event, in order.
  [[nodiscard]] std::vector<std::string> on_event(const actors::stream_event& ev);
  /// The complete non-streaming response (after the finished event).
  [[nodiscard]] std::string final_body() const;
  /// This builder's choice object of the non-streaming response.
  [[nodiscard]] std::string choice_json() const;
  /// Non-streaming response of n choices (builders in index order; usage summed).
  [[nodiscard]] static std::string merged_body(const std::vector<const response_builder*>& choices);
  /// The include_usage chunk for n choices.
  [[nodiscard]] static std::string usage_chunk(const std::vector<const response_builder*>& choices);
  [[nodiscard]] bool finished() const noexcept { return finished_; }
  [[nodiscard]] const std::string& finish_reason() const noexcept { return finish_; }
  [[nodiscard]] std::int64_t completion_tokens() const noexcept { return tokens_; }
  [[nodiscard]] bool failed() const noexcept { return failed_; }
  [[nodiscard]] const std::string& error_message() const noexcept { return error_; }
  [[nodiscard]] engine::errc error_code() const noexcept { return error_code_; }
  /// The marker ids this builder's parser consumes (the request's structural_ids); empty for
  /// completions.
  [[nodiscard]] std::vector<std::int32_t> structural_ids() const;

private:
  std::string chunk(const std::string& delta_json, const std::string& finish);
  void note_logprobs(const actors::stream_event& ev);
  [[nodiscard]] std::string take_logprobs(); ///< pending entries as this chunk's logprobs JSON
  void add(chat::parse_delta&& d, std::vector<std::string>& out);

  stream_setup s_;
  std::unique_ptr<chat::k3_output_parser> k3_;
  std::unique_ptr<chat::k2_output_parser> k2_;
  bool role_sent_ = false, finished_ = false, failed_ = false;
  engine::errc error_code_ = engine::errc::none;
  std::string reasoning_, content_, finish_, error_;
  struct call {
    std::string name, arguments;
  };
  std::vector<call> calls_;
  std::int64_t tokens_ = 0;
  std::int64_t cached_ = 0; ///< prompt tokens the prefix cache served (engine count)
  // logprobs: chat entries, or the completions arrays; pending_* not yet attached to a chunk
  std::vector<std::string> pending_entries_, all_entries_;
  std::vector<std::string> pend_tok_, pend_lp_, pend_top_, all_tok_, all_lp_, all_top_;
  std::vector<std::int64_t> pend_off_, all_off_;
  std::int64_t text_offset_ = 0;
};

} // namespace k3::net
