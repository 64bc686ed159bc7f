#pragma once
// The engine's one error vocabulary. Actors carry it in messages (never exceptions across actor
// boundaries); the HTTP layer maps it once (queue_full → 429, context_too_long and
// invalid_request → 400, cancelled → client gone, internal / shutting_down → 500 / 503).

#include <cstdint>

namespace k3::engine {

enum class errc : std::uint8_t {
  none = 0,
  queue_full,       ///< waiting queue at its request or prompt-token cap
  context_too_long, ///< prompt + max_tokens exceeds max_model_len
  invalid_request,  ///< bad parameters (empty prompt, token id outside the vocabulary, ...)
  cancelled,        ///< the client cancelled
  internal,         ///< a step failed (stream or shard actor down, kernel error)
  shutting_down,    ///< the engine is stopping
};

[[nodiscard]] inline const char* to_string(errc e) noexcept {
  switch (e) {
  case errc::none: return "none";
  case errc::queue_full: return "queue_full";
  case errc::context_too_long: return "context_too_long";
  case errc::invalid_request: return "invalid_request";
  case errc::cancelled: return "cancelled";
  case errc::internal: return "internal";
  case errc::shutting_down: return "shutting_down";
  }
  return "?";
}

} // namespace k3::engine
