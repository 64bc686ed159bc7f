#pragma once
// The server's routing table, without Beast: which endpoint a method and request target name,
// whether it needs the API key, and the 404 / 405 a mismatch gets. The HTTP session and the
// HTTP fuzz target (fuzz/http_fuzz.cpp) both use it.

#include <string>
#include <string_view>
#include <vector>

namespace k3::net {

enum class route { health, metrics, models, version, tokenize, detokenize, render, chat_completions, completions, websocket, none };

struct route_match {
  route r = route::none;
  bool needs_key = true;  ///< false for /health and /metrics (public, as vLLM's are)
  int status = 0;         ///< 0: matched; 404 / 405 otherwise
  std::string message;    ///< for status != 0
};

/// An Authorization header value authorizes when it is `Bearer <key>` (scheme case-insensitive,
/// RFC 7235; spaces around the key ignored) for one of `keys`; constant-time in the key. True
/// when no key is configured.
[[nodiscard]] bool bearer_authorized(std::string_view header, const std::vector<std::string>& keys);

/// CORS: the value of Access-Control-Allow-Origin for a request from `origin` — the origin
/// itself when `allowed` lists it or `*` — or empty (no CORS headers; the browser then blocks
/// the response). Empty `allowed`: CORS is off.
[[nodiscard]] std::string cors_allow_origin(std::string_view origin, const std::vector<std::string>& allowed);

/// A WebSocket upgrade is accepted from a browser page only when it is same-origin (Origin's
/// host:port equals Host) or CORS allows its origin; clients that send no Origin (non-browser)
/// are accepted. Stops other sites' pages from driving the API through a visitor's browser.
[[nodiscard]] bool websocket_origin_allowed(std::string_view origin, std::string_view host, const std::vector<std::string>& allowed);

/// `method` as on the wire (GET, HEAD, POST, …); HEAD is accepted wherever GET is. The query
/// string is ignored. `upgrade`: a WebSocket upgrade request.
[[nodiscard]] route_match match_route(std::string_view method, std::string_view target, bool upgrade = false);

} // namespace k3::net
