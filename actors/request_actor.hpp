#pragma once
// Request actor: one per request. Receives the scheduler's token events, turns them into text
// with an incremental detokenizer (UTF-8 safe across tokens; skipped special tokens and the
// chat markers in structural_ids produce no text), applies text stop sequences,
// and streams events to the client's sink. Cancellation from the client (cancel message, or
// the actor being killed) reaches the scheduler, which frees the request's slot and blocks.
// The sink runs on this actor's worker thread, one call at a time, in token order; the last
// event has finished = true, after which the actor quits.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/protocol.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"

namespace k3::actors {

struct stream_event {
  engine::request_id id = 0;
  std::int32_t token = -1;      ///< -1 on an event that only ends the stream
  float logprob = 0.0f;         ///< raw log-probability of token
  std::vector<sampling::token_logprob> top; ///< alternatives, when top_logprobs was asked
  std::string text;             ///< new complete UTF-8 text (may be empty)
  bool finished = false;
  std::string finish_reason;    ///< "stop", "length", "cancelled", "error"
  engine::errc error = engine::errc::none;
  std::string message;
  std::int64_t cached_tokens = 0; ///< prompt tokens the prefix cache served
};

using stream_sink = std::function<void(const stream_event&)>;

struct request_options {
  engine::request_id id = 0;
  std::vector<std::string> stop_strings; ///< text stops: output ends before the match
  bool skip_special_tokens = true;       ///< the tokenizer's skippable specials produce no text
  /// Marker ids a downstream parser consumes by id: no text of their own, and everything held
  /// before them (an unfinished UTF-8 character, a possible stop-string prefix) is released
  /// with their event, so the parser can attribute all text to the right side of the marker.
  std::vector<std::int32_t> structural_ids;
  std::shared_ptr<const tok::kimi_tokenizer> tokenizer; ///< nullptr: no text, ids only
  stream_sink sink;
};

[[nodiscard]] request_actor spawn_request(caf::actor_system& sys, request_options opt, scheduler_actor sched);

} // namespace k3::actors
