#pragma once
// The OpenAI-compatible HTTP/SSE + WebSocket front end (Boost.Beast), one TU so Beast's
// compile cost is paid once.
//
// Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,
// GET /metrics, POST /tokenize, POST /detokenize, GET /version, and the WebSocket endpoint
// GET /v1/ws (upgrade). Every connection runs on its own strand; engine events (from actor
// threads) are posted onto it. Streaming uses SSE over chunked transfer; a client that goes
// away mid-request (socket readable with no data, or a failed write) cancels the request, which
// frees its cache within a step.
//
// WebSocket protocol (text frames, JSON):
//   client → {"type": "chat.completions" | "completions", "id": "<client id>", "body": {…}}
//            {"type": "cancel", "id": "<client id>"}
//   server → the same chunk objects as SSE, each with "request_id": "<client id>" added;
//            {"request_id": …, "done": true} where SSE sends [DONE];
//            {"request_id": …, "error": {…OpenAI error object…}} for a rejected or failed request.
//   One socket carries any number of concurrent requests (streaming is implied).

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "k3/engine.hpp"
#include "net/metrics.hpp"
#include "net/server_config.hpp"

namespace k3::net {

class http_server {
public:
  http_server(llm_engine& eng, server_config cfg, std::string served_name);
  ~http_server();
  /// Binds, prints "k3 serve: listening on http://HOST:PORT …" and serves until SIGTERM/SIGINT,
  /// then drains (health 503, no new requests) up to shutdown_timeout. Returns the exit code.
  int run();
  [[nodiscard]] std::uint16_t port() const noexcept;

  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

} // namespace k3::net
