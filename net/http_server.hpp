#pragma once
// The OpenAI-compatible HTTP/SSE + WebSocket front end (Boost.Beast), one TU so Beast's
// compile cost is paid once.
//
// Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,
// GET /metrics, POST /tokenize, POST /detokenize, GET /version, and the WebSocket endpoint
// GET /v1/ws (upgrade). HEAD works wherever GET does. /health and /metrics need no API key.
// Every connection runs on its own strand; engine events (from actor threads) are posted onto
// it. Parsing, chat rendering and tokenization run on a separate preparation pool, so a
// pathological prompt never delays /health or other streams. Streaming uses SSE over chunked
// transfer (close-delimited for HTTP/1.0 clients); a client that goes away mid-request (socket
// readable with no data, a failed or timed-out write) cancels the request, which frees its
// cache within a step.
//
// Hardening: the accept loop survives every accept error (out of descriptors: retried after
// 50 ms); RLIMIT_NOFILE's soft limit is raised to the hard one; --max-connections caps open
// connections (the rest get 503); headers, bodies, idle keep-alive and unread writes each have
// a timeout; Expect: 100-continue is answered; an early error (413, 400) is followed by a
// lingering close so a client still sending reads the response.
//
// Images (vision checkpoints): image_url parts are fetched (http/https: asynchronously, no
// thread waits), decoded and preprocessed on the preparation pool, and run through the tower
// on one dedicated vision thread before the request is submitted (net/media_source.hpp).
//
// WebSocket protocol (text frames, JSON):
//   client → {"type": "chat.completions" | "completions", "id": "<client id>", "body": {…}}
//            {"type": "cancel", "id": "<client id>"}
//   server → the same chunk objects as SSE, each with "request_id": "<client id>" added;
//            {"request_id": …, "done": true} where SSE sends [DONE];
//            {"request_id": …, "error": {…OpenAI error object…}} for a rejected or failed request.
//   One socket carries any number of concurrent requests (streaming is implied). A cancel
//   applies to the request with its id sent before it, never to a later one (ids may be reused
//   once their request is done).

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "k3/engine.hpp"
#include "net/metrics.hpp"
#include "config/server_config.hpp"

namespace k3::vision {
struct vision_model;
}

namespace k3::net {

class http_server {
public:
  /// cfg.served_model_names must be filled (the first name is the reported one).
  /// `vision`: the checkpoint's vision tower (nullptr: a text-only server).
  http_server(llm_engine& eng, server_config cfg, std::shared_ptr<const vision::vision_model> vision = nullptr);
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
