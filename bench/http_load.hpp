#pragma once
// Plain-socket HTTP/1.1 for the load generators (`k3 bench serve`, `k3 bench agent`): one
// connection per request ("Connection: close"), streaming responses timed as each SSE event
// arrives. Blocking and dependency-free so the numbers include nothing but the server.

#include <cstdint>
#include <string>
#include <vector>

namespace k3::bench {

struct http_target {
  std::string host, port;
};

/// "http://host:port[/...]" → host and port (80 when absent). Throws std::invalid_argument.
[[nodiscard]] http_target parse_url(const std::string& url);
/// A connected socket. Throws std::runtime_error naming the address.
[[nodiscard]] int connect_to(const http_target& t);

/// One streaming request's timings and what its usage chunk reported.
struct stream_sample {
  bool ok = false;
  double ttft = 0, e2e = 0; ///< seconds from connect to the first content event / to [DONE]
  std::vector<double> itl;  ///< seconds between content events
  std::int64_t out_tokens = 0, prompt_tokens = 0, cached_tokens = 0;
  std::string error;
};

/// POSTs `body` (which must ask for stream + include_usage) to `path`.
[[nodiscard]] stream_sample stream_request(const http_target& t, const std::string& path, const std::string& body,
                                           const std::string& api_key);
/// GET `path`; returns the whole raw response (status line, headers and body).
[[nodiscard]] std::string http_get(const http_target& t, const std::string& path, const std::string& api_key);
/// The first model id of GET /v1/models. Throws std::runtime_error.
[[nodiscard]] std::string first_model(const http_target& t, const std::string& api_key);

} // namespace k3::bench
