#pragma once
// Internal to the Beast TUs of the server (http_server.cpp, http_session.cpp, ws_session.cpp):
// the shared server state and the session entry points. Not for other includes (Beast is
// heavy; net/http_server.hpp is the public face).
//
// Threads: `ioc` runs on --http-threads I/O threads and does only I/O and bookkeeping; every
// connection lives on its own strand. `prep` (--tokenizer-threads) parses, renders and encodes
// requests; results are posted back to the connection's strand. Engine events arrive on actor
// threads and are posted to the strand too.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "net/frontend.hpp"
#include "net/media_source.hpp"
#include "net/http_server.hpp"

namespace k3::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using steady = std::chrono::steady_clock;

struct http_server::impl : frontend {
  impl(llm_engine& e, server_config c, std::shared_ptr<const vision::vision_model> vision);
  ~impl();
  /// The whole preparation of a generation request off the I/O threads: remote images are
  /// fetched asynchronously, then parse/decode/render/encode runs on `prep`, then the tower on
  /// `vision_pool`. `done` runs exactly once, on a pool or fetcher thread (callers post to
  /// their strand) with the prepared request or the error.
  using prepared_ptr = std::shared_ptr<frontend::prepared>;
  void prepare_async(std::string target, std::shared_ptr<const json::value> body,
                     std::function<void(prepared_ptr, std::optional<api_error>)> done);
  asio::io_context ioc;
  tcp::acceptor acceptor;
  asio::signal_set signals;
  asio::steady_timer accept_retry;
  asio::thread_pool prep; ///< request preparation (parse, render, tokenize): never the I/O threads
  asio::thread_pool vision_pool{1}; ///< the vision tower, one image batch at a time
  std::unique_ptr<media_fetcher> fetcher; ///< image downloads (its own I/O thread)
  std::atomic<int> connections{0};
  int max_connections = 1024;
  std::uint16_t bound_port = 0;
  steady::time_point last_accept_log{};
};

/// One open connection counted against --max-connections; moves with the socket (HTTP → WS).
class connection_slot {
public:
  explicit connection_slot(http_server::impl& c) : c_(&c) { ++c_->connections; }
  connection_slot(connection_slot&& o) noexcept : c_(o.c_) { o.c_ = nullptr; }
  connection_slot& operator=(connection_slot&&) = delete;
  connection_slot(const connection_slot&) = delete;
  ~connection_slot() {
    if (c_) --c_->connections;
  }

private:
  http_server::impl* c_;
};

template <class Duration>
std::chrono::steady_clock::duration secs(Duration s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

/// Starts an HTTP/1.x session on an accepted socket (http_session.cpp).
void start_http_session(tcp::socket&& s, http_server::impl& core, connection_slot slot);
/// Takes over an upgraded connection (ws_session.cpp); `req` is the upgrade request.
void start_ws_session(tcp::socket&& s, http_server::impl& core, connection_slot slot,
                      http::request<http::string_body> req);
/// Over --max-connections: a 503 and a close, without reading the request (http_session.cpp).
void reject_connection(tcp::socket&& s, http_server::impl& core);

/// Chunked-transfer framing of one payload.
[[nodiscard]] std::string chunk_frame(const std::string& payload);

} // namespace k3::net
