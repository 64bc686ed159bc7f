// One HTTP/1.x connection: header and body read with their own timeouts, Expect: 100-continue,
// routing, request preparation on the preparation pool, SSE streaming (chunked for HTTP/1.1,
// close-delimited for HTTP/1.0), write timeouts, and nginx-style lingering close after an early
// error response (so a client still sending its body reads the error instead of a reset).
#include <cstdio>
#include <deque>
#include <functional>
#include <optional>

#include <boost/beast/websocket.hpp>

#include "net/http_internal.hpp"
#include "net/routes.hpp"
#include "net/web_assets.hpp"

namespace k3::net {
namespace {

namespace websocket = beast::websocket;

std::string sse_payload(const std::string& json) { return "data: " + json + "\n\n"; }

class http_session : public std::enable_shared_from_this<http_session> {
public:
  http_session(tcp::socket&& s, http_server::impl& core, connection_slot slot)
      : stream_(std::move(s)), core_(core), slot_(std::move(slot)), ping_(stream_.get_executor()) {}
  void run() { read_header(); }

private:
  // ---- reading -------------------------------------------------------------------------
  void read_header() {
    parser_.emplace();
    parser_->body_limit(static_cast<std::uint64_t>(core_.cfg.max_body_bytes));
    parser_->header_limit(64 * 1024);
    // The first request gets the header timeout; later ones on a kept-alive connection the
    // (shorter) keep-alive idle timeout, which also bounds their headers.
    stream_.expires_after(secs(requests_ == 0 ? core_.cfg.header_timeout
                                              : std::min(core_.cfg.timeout_keep_alive, core_.cfg.header_timeout)));
    http::async_read_header(stream_, buf_, *parser_, beast::bind_front_handler(&http_session::on_header, shared_from_this()));
  }

  void on_header(beast::error_code ec, std::size_t) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::connection_reset ||
        ec == asio::error::eof || ec == asio::error::operation_aborted)
      return close();
    const auto& h = parser_->get();
    version_ = h.version() ? h.version() : 11;
    if (ec == http::error::header_limit) return early_error(api_error(431, "Request header fields too large.", "", "header_too_large"));
    if (ec == http::error::body_limit) return early_error(too_large()); // Content-Length over the limit
    if (ec) return early_error(api_error(400, "Malformed HTTP request: " + ec.message(), "", "bad_request"));
    ++requests_;
    head_ = h.method() == http::verb::head;
    if (const auto len = parser_->content_length(); len && *len > static_cast<std::uint64_t>(core_.cfg.max_body_bytes))
      return early_error(too_large());
    if (beast::iequals(h[http::field::expect], "100-continue")) {
      // curl waits a second for this before sending a body over 1 KiB; answer at once.
      auto msg = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      stream_.expires_after(secs(core_.cfg.write_timeout));
      asio::async_write(stream_, asio::buffer(*msg), [self = shared_from_this(), msg](beast::error_code e, std::size_t) {
        if (e) return self->close();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    stream_.expires_after(secs(core_.cfg.body_timeout));
    http::async_read(stream_, buf_, *parser_, beast::bind_front_handler(&http_session::on_body, shared_from_this()));
  }

  api_error too_large() const {
    return api_error(413, "The request body exceeds " + std::to_string(core_.cfg.max_body_bytes) + " bytes.", "", "body_too_large");
  }

  void on_body(beast::error_code ec, std::size_t) {
    if (ec == beast::error::timeout || ec == asio::error::connection_reset || ec == asio::error::eof ||
        ec == http::error::end_of_stream || ec == asio::error::operation_aborted)
      return close();
    if (ec == http::error::body_limit) return early_error(too_large());
    if (ec) return early_error(api_error(400, "Malformed HTTP request: " + ec.message(), "", "bad_request"));
    stream_.expires_never();
    req_ = parser_->release();
    keep_alive_ = req_.keep_alive();
    cors_origin_ = cors_allow_origin(std::string(req_[http::field::origin]), core_.cfg.allowed_origins);
    if (websocket::is_upgrade(req_)) {
      const auto m = match_route(std::string(http::to_string(req_.method())), std::string(req_.target()), true);
      if (m.status) return reply_error(api_error(m.status, m.message, "", "not_found"));
      if (!websocket_origin_allowed(std::string(req_[http::field::origin]), std::string(req_[http::field::host]), core_.cfg.allowed_origins))
        return reply_error(api_error(403, "WebSocket from origin " + std::string(req_[http::field::origin]) +
                                              " refused (same-origin pages, or origins in --allowed-origins)", "", "forbidden_origin"));
      if (!core_.authorized(std::string(req_[http::field::authorization])))
        return reply_error(api_error(401, "Missing or invalid API key.", "", "invalid_api_key"));
      start_ws_session(stream_.release_socket(), core_, std::move(slot_), std::move(req_));
      return;
    }
    try {
      route();
    } catch (const api_error& e) {
      reply_error(e);
    } catch (const std::exception& e) {
      reply_error(api_error(500, std::string("internal error: ") + e.what(), "", "internal_error"));
    }
  }

  // ---- routing ---------------------------------------------------------------------------
  void route() {
    const std::string target(req_.target());
    const std::string path = target.substr(0, target.find('?'));
    // CORS preflight (only when --allowed-origins names the origin).
    if (req_.method() == http::verb::options && !cors_origin_.empty()) {
      std::string allow_headers(req_[http::field::access_control_request_headers]);
      if (allow_headers.empty()) allow_headers = "Authorization, Content-Type";
      return reply(204, "", "text/plain",
                   {{http::field::access_control_allow_methods, "GET, POST, OPTIONS"},
                    {http::field::access_control_allow_headers, allow_headers},
                    {http::field::access_control_max_age, "600"}});
    }
    // The web page: public (it holds no data; the API calls it makes carry the key).
    if (!core_.cfg.no_ui && (req_.method() == http::verb::get || req_.method() == http::verb::head))
      if (const auto* asset = find_web_asset(path))
        return reply_web(serve_web_asset(*asset, std::string(req_[http::field::accept_encoding]), std::string(req_[http::field::if_none_match])));
    const auto m = match_route(std::string(http::to_string(req_.method())), target);
    if (m.status == 405) throw api_error(405, m.message, "", "method_not_allowed");
    if (m.status == 404) throw api_error(404, m.message, "", "not_found");
    if (m.needs_key && !core_.authorized(std::string(req_[http::field::authorization]))) {
      core_.metrics.rejected("auth");
      throw api_error(401, "Missing or invalid API key (send Authorization: Bearer <key>).", "", "invalid_api_key");
    }
    switch (m.r) {
      case route::health:
        if (core_.draining)
          return reply(503, "{\"error\":{\"message\":\"draining\",\"type\":\"unavailable_error\",\"param\":null,\"code\":\"draining\"}}");
        return reply(200, "{\"status\":\"ok\"}");
      case route::metrics:
        // The engine's figures come from the scheduler actor: asked from the pool, not this thread.
        return offload_reply([&core = core_] { return core.metrics.render(core.eng.stats(), core.served, core.draining); },
                             "text/plain; version=0.0.4; charset=utf-8");
      case route::models: return reply(200, core_.models_json());
      case route::version: return reply(200, std::string("{\"version\":\"") + k3_version() + "\"}");
      case route::tokenize:
      case route::detokenize:
      case route::render: {
        auto body = std::make_shared<std::string>(std::move(req_.body()));
        return offload_reply([&core = core_, body, r = m.r] {
          const auto parsed = parse_body(*body);
          return r == route::tokenize ? core.tokenize_json(parsed) : r == route::render ? core.render_json(parsed) : core.detokenize_json(parsed);
        });
      }
      case route::chat_completions:
      case route::completions:
        if (core_.draining) throw api_error(503, "The server is shutting down.", "", "shutting_down");
        return offload_generate(m.r == route::chat_completions ? "/v1/chat/completions" : "/v1/completions");
      case route::websocket:
      case route::none: break;
    }
    throw api_error(404, "not found", "", "not_found");
  }

  static const char* k3_version();

  /// Runs `work` on the preparation pool and replies with its result (or its api_error) on
  /// this strand.
  void offload_reply(std::function<std::string()> work, const char* type = "application/json") {
    auto self = shared_from_this();
    asio::post(core_.prep, [self, work = std::move(work), type] {
      std::string body;
      std::optional<api_error> err;
      try {
        body = work();
      } catch (const api_error& e) {
        err = e;
      } catch (const std::exception& e) {
        err = api_error(500, std::string("internal error: ") + e.what(), "", "internal_error");
      }
      asio::post(self->stream_.get_executor(), [self, body = std::move(body), err, type]() mutable {
        if (err) return self->reply_error(*err);
        self->reply(200, std::move(body), type);
      });
    });
  }

  /// Parses, renders and encodes a generation request on the preparation pool, then submits it
  /// from this strand (the engine's events are posted here, after the session is set up).
  void offload_generate(const std::string& target) {
    auto self = shared_from_this();
    auto body = std::make_shared<std::string>(std::move(req_.body()));
    asio::post(core_.prep, [self, body, target] {
      std::shared_ptr<const json::value> parsed;
      try {
        parsed = std::make_shared<const json::value>(parse_body(*body));
      } catch (const api_error& e) {
        return self->prepared_done(nullptr, e);
      }
      self->core_.prepare_async(target, parsed, [self](std::shared_ptr<frontend::prepared> p, std::optional<api_error> err) {
        self->prepared_done(std::move(p), std::move(err));
      });
    });
  }

  void prepared_done(std::shared_ptr<frontend::prepared> p, std::optional<api_error> err) {
    auto self = shared_from_this();
    asio::post(stream_.get_executor(), [self, p, err] {
      if (err) {
        if (err->status < 500) self->core_.metrics.rejected(err->code.empty() ? "invalid" : err->code);
        return self->reply_error(*err);
      }
      try {
        self->generate(std::move(*p));
      } catch (const api_error& e) {
        self->reply_error(e);
      }
    });
  }

  // ---- generation ------------------------------------------------------------------------
  void generate(frontend::prepared p) {
    streaming_ = p.stream;
    include_usage_ = p.setup.include_usage;
    prompt_tokens_ = p.setup.prompt_tokens;
    t0_ = last_ = steady::now();
    builders_.clear();
    req_ids_.clear();
    auto self = shared_from_this();
    auto ex = stream_.get_executor();
    for (int i = 0; i < p.n; ++i) {
      auto setup = p.setup;
      setup.index = i;
      setup.include_usage = p.n == 1 && p.setup.include_usage; // n > 1: one combined usage chunk
      builders_.push_back(std::make_shared<response_builder>(setup));
      auto gp = p.gp;
      gp.seed = p.gp.seed + static_cast<std::uint64_t>(i); // distinct samples per choice
      gp.structural_ids = builders_.back()->structural_ids();
      auto r = core_.eng.submit(p.prompt, gp, [self, ex, i](const stream_event& ev) {
        asio::post(ex, [self, ev, i] { self->on_event(static_cast<std::size_t>(i), ev); });
      });
      if (!r.ok()) {
        for (auto id : req_ids_) core_.eng.cancel(id); // their events end as aborted and are ignored
        abandoned_ = !req_ids_.empty();
        open_ = static_cast<int>(req_ids_.size());
        if (abandoned_) keep_alive_ = false; // their late events must not meet a next request
        core_.metrics.rejected(r.error == engine::errc::queue_full ? "queue_full" : engine::to_string(r.error));
        throw http_server::impl::submit_error(r);
      }
      ++core_.active;
      req_ids_.push_back(r.id);
    }
    open_ = p.n;
    generating_ = true;
    if (streaming_) {
      core_.metrics.http_request(200);
      // HTTP/1.0 has no chunked encoding: the body ends when the connection closes.
      if (version_ < 11) keep_alive_ = false;
      write_raw(std::string(version_ < 11 ? "HTTP/1.0" : "HTTP/1.1") +
                " 200 OK\r\nServer: k3serve\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n" +
                (cors_origin_.empty() ? std::string() : "Access-Control-Allow-Origin: " + cors_origin_ + "\r\nVary: Origin\r\n") +
                (version_ < 11 ? "" : "Transfer-Encoding: chunked\r\n") +
                "Connection: " + (keep_alive_ ? "keep-alive" : "close") + "\r\n\r\n");
      arm_ping();
    }
    watch_disconnect();
  }

  std::string frame(const std::string& payload) const { return version_ < 11 ? payload : chunk_frame(payload); }

  /// SSE comment lines while nothing else is sent (a long prefill): proxies keep the stream open.
  void arm_ping() {
    ping_.expires_after(std::chrono::seconds(15));
    ping_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || !self->generating_ || self->cancelled_) return;
      if (steady::now() - self->last_write_ >= std::chrono::seconds(15)) self->write_raw(self->frame(": ping\n\n"));
      self->arm_ping();
    });
  }

  /// The peer closing its side makes the socket readable with no data: cancel.
  void watch_disconnect() {
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
      if (!self->generating_) return;
      beast::error_code e2;
      const auto avail = self->stream_.socket().available(e2);
      if (ec || e2 || avail == 0) self->disconnect();
      // else: pipelined bytes for the next request; stop watching.
    });
  }

  void disconnect() {
    if (!generating_ || cancelled_) return;
    cancelled_ = true;
    core_.metrics.disconnected();
    for (auto id : req_ids_) core_.eng.cancel(id);
  }

  static api_error failure_error(const response_builder& b) {
    if (b.error_code() == engine::errc::shutting_down) return api_error(503, "The server is shutting down.", "", "shutting_down");
    return api_error(500, b.error_message(), "", "internal_error");
  }

  void on_event(std::size_t i, const stream_event& ev) {
    const auto now = steady::now();
    if (abandoned_) { // the request was rejected after some choices were submitted
      if (ev.finished) {
        --core_.active;
        if (--open_ == 0) abandoned_ = false;
      }
      return;
    }
    auto& b = *builders_.at(i);
    if (ev.token >= 0) {
      if (b.completion_tokens() == 0) core_.metrics.first_token(std::chrono::duration<double>(now - t0_).count());
      else core_.metrics.inter_token(std::chrono::duration<double>(now - last_).count());
      last_ = now;
    }
    auto chunks = b.on_event(ev);
    if (streaming_ && !cancelled_)
      for (auto& c : chunks) write_raw(frame(sse_payload(c)));
    if (!ev.finished) return;
    // Leave `active` when this handler returns, after it has queued the response's last bytes
    // (`unflushed` then holds a drain until they are written).
    struct leave {
      std::atomic<int>& n;
      ~leave() { --n; }
    } const leave_active{core_.active};
    core_.metrics.request_finished(cancelled_ ? "abort" : b.failed() ? "error" : b.finish_reason(), i == 0 ? prompt_tokens_ : 0,
                                   b.completion_tokens(), std::chrono::duration<double>(now - t0_).count());
    if (--open_ > 0) return;
    generating_ = false;
    ping_.cancel();
    if (cancelled_) return close();
    std::vector<const response_builder*> all;
    const response_builder* failed = nullptr;
    for (const auto& x : builders_) {
      all.push_back(x.get());
      if (x->failed() && !failed) failed = x.get();
    }
    if (streaming_) {
      if (failed) write_raw(frame(sse_payload(error_json(failure_error(*failed)))));
      else if (include_usage_ && all.size() > 1) write_raw(frame(sse_payload(response_builder::usage_chunk(all))));
      write_raw(frame(sse_payload("[DONE]")));
      if (version_ >= 11) write_raw("0\r\n\r\n");
      after_writes_ = true;
      maybe_continue();
    } else if (failed) {
      reply_error(failure_error(*failed));
    } else {
      reply(200, response_builder::merged_body(all));
    }
  }

  // ---- writing ---------------------------------------------------------------------------
  void write_raw(std::string s) {
    last_write_ = steady::now();
    out_.push_back(std::move(s));
    if (out_.size() == 1) {
      ++core_.unflushed;
      write_next();
    }
  }
  void write_next() {
    // A client that stops reading fills the socket buffers; the write timeout then drops it.
    stream_.expires_after(secs(core_.cfg.write_timeout));
    asio::async_write(stream_, asio::buffer(out_.front()), [self = shared_from_this()](beast::error_code ec, std::size_t) {
      self->out_.pop_front();
      if (ec) {
        self->out_.clear();
        --self->core_.unflushed;
        self->disconnect();
        self->close();
        return;
      }
      if (!self->out_.empty()) return self->write_next();
      --self->core_.unflushed;
      self->stream_.expires_never();
      self->maybe_continue();
    });
  }
  void maybe_continue() {
    if (!after_writes_ || !out_.empty()) return;
    after_writes_ = false;
    if (keep_alive_) reset_and_read();
    else close();
  }
  void reset_and_read() {
    builders_.clear();
    cors_origin_.clear();
    cancelled_ = false;
    beast::error_code ec;
    stream_.socket().cancel(ec); // stop the disconnect watch
    read_header();
  }

  void reply(int status, std::string body, const char* type = "application/json",
             std::initializer_list<std::pair<http::field, std::string>> extra = {}) {
    core_.metrics.http_request(status);
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(status), version_ < 11 ? 10 : 11);
    res->set(http::field::server, "k3serve");
    res->set(http::field::content_type, type);
    if (status == 429 || status == 503) res->set(http::field::retry_after, "1");
    for (const auto& [f, v] : extra) res->set(f, v);
    res->body() = std::move(body);
    send_response(std::move(res));
  }

  void reply_web(web_response w) {
    core_.metrics.http_request(w.status);
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(w.status), version_ < 11 ? 10 : 11);
    res->set(http::field::server, "k3serve");
    for (const auto& [f, v] : w.headers) res->set(f, v);
    res->body() = std::move(w.body);
    send_response(std::move(res));
  }

  void send_response(std::shared_ptr<http::response<http::string_body>> res) {
    if (!cors_origin_.empty()) {
      res->set(http::field::access_control_allow_origin, cors_origin_);
      res->set(http::field::vary, res->find(http::field::vary) == res->end() ? std::string("Origin")
                                                                             : std::string((*res)[http::field::vary]) + ", Origin");
    }
    res->keep_alive(keep_alive_);
    res->prepare_payload();
    if (head_) res->body().clear(); // HEAD: the headers of GET (Content-Length included), no body
    stream_.expires_after(secs(core_.cfg.write_timeout));
    auto sr = std::make_shared<http::response_serializer<http::string_body>>(*res);
    if (head_) sr->split(true);
    auto done = [self = shared_from_this(), res, sr](beast::error_code ec, std::size_t) {
      self->stream_.expires_never();
      if (ec) return self->close();
      if (self->linger_) return self->lingering_close();
      if (!self->keep_alive_) return self->close();
      self->reset_and_read();
    };
    if (head_) http::async_write_header(stream_, *sr, std::move(done));
    else http::async_write(stream_, *sr, std::move(done));
  }
  void reply_error(const api_error& e) {
    if (e.status == 401) return reply(e.status, error_json(e), "application/json", {{http::field::www_authenticate, "Bearer"}});
    reply(e.status, error_json(e));
  }

  /// An error before the body was read: answer, then drain what the client still sends.
  void early_error(const api_error& e) {
    keep_alive_ = false;
    linger_ = true;
    reply_error(e);
  }

  // nginx's lingering_close: shut down our sending side, then read and discard for a bounded
  // time so the client's TCP stack does not see a reset before it reads the response.
  void lingering_close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    linger_deadline_ = steady::now() + secs(std::min(30.0, core_.cfg.body_timeout));
    linger_read();
  }
  void linger_read() {
    const auto left = linger_deadline_ - steady::now();
    if (left <= steady::duration::zero()) return hard_close();
    stream_.expires_after(std::min<steady::duration>(left, std::chrono::seconds(5)));
    stream_.async_read_some(asio::buffer(discard_), [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return self->hard_close();
      self->linger_read();
    });
  }
  void hard_close() {
    beast::error_code ec;
    stream_.socket().close(ec);
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  }

  beast::tcp_stream stream_;
  http_server::impl& core_;
  connection_slot slot_;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> req_;
  unsigned version_ = 11;
  int requests_ = 0;
  bool head_ = false, linger_ = false;
  bool keep_alive_ = true, streaming_ = false, generating_ = false, cancelled_ = false, after_writes_ = false;
  bool include_usage_ = false, abandoned_ = false;
  std::string cors_origin_; ///< Access-Control-Allow-Origin for this request, or empty
  int open_ = 0;
  std::vector<std::shared_ptr<response_builder>> builders_;
  std::vector<engine::request_id> req_ids_;
  std::int64_t prompt_tokens_ = 0;
  steady::time_point t0_, last_, last_write_, linger_deadline_;
  asio::steady_timer ping_;
  std::deque<std::string> out_;
  std::array<char, 64 * 1024> discard_{};
};

const char* http_session::k3_version() { return K3_VERSION_STRING; }

} // namespace

std::string chunk_frame(const std::string& payload) {
  char hex[20];
  std::snprintf(hex, sizeof hex, "%zx\r\n", payload.size());
  return hex + payload + "\r\n";
}

void start_http_session(tcp::socket&& s, http_server::impl& core, connection_slot slot) {
  std::make_shared<http_session>(std::move(s), core, std::move(slot))->run();
}

void reject_connection(tcp::socket&& s, http_server::impl& core) {
  // Answer 503 without reading the request, then close; counted like any other response.
  core.metrics.http_request(503);
  struct rejected {
    tcp::socket sock;
    std::string msg;
    asio::steady_timer timer;
    std::array<char, 4096> sink{};
  };
  auto r = std::make_shared<rejected>(rejected{std::move(s), "", asio::steady_timer(core.ioc), {}});
  const std::string body = error_json(api_error(503, "Too many open connections; retry later.", "", "too_many_connections"));
  r->msg = "HTTP/1.1 503 Service Unavailable\r\nServer: k3serve\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
           "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  r->timer.expires_after(std::chrono::seconds(1));
  r->timer.async_wait([r](beast::error_code) {
    beast::error_code ec;
    r->sock.close(ec);
  });
  asio::async_write(r->sock, asio::buffer(r->msg), [r](beast::error_code ec, std::size_t) {
    if (ec) return;
    beast::error_code e2;
    r->sock.shutdown(tcp::socket::shutdown_send, e2);
    // Drain briefly (the timer closes it) so the client reads the 503 rather than a reset.
    r->sock.async_read_some(asio::buffer(r->sink), [r](beast::error_code, std::size_t) {
      beast::error_code e3;
      r->sock.close(e3);
      r->timer.cancel();
    });
  });
}

} // namespace k3::net
