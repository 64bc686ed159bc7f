#include "net/http_server.hpp"

#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include "net/frontend.hpp"
#include "runtime/chat/k2_format.hpp"
#include "runtime/chat/k3_xtml.hpp"

namespace k3::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using clock_t_ = std::chrono::steady_clock;

// ---- shared server state -------------------------------------------------------------------

struct http_server::impl : frontend {
  impl(llm_engine& e, server_config c, std::string name)
      : frontend(e, std::move(c), std::move(name)), ioc(cfg.http_threads), acceptor(ioc), signals(ioc, SIGTERM, SIGINT) {}
  asio::io_context ioc;
  tcp::acceptor acceptor;
  asio::signal_set signals;
  std::uint16_t bound_port = 0;
};

namespace {

std::string chunk_frame(const std::string& payload) {
  char hex[20];
  std::snprintf(hex, sizeof hex, "%zx\r\n", payload.size());
  return hex + payload + "\r\n";
}

std::string sse(const std::string& json) { return chunk_frame("data: " + json + "\n\n"); }

// ---- WebSocket session -----------------------------------------------------------------------

class ws_session : public std::enable_shared_from_this<ws_session> {
public:
  ws_session(tcp::socket&& s, http_server::impl& core) : ws_(std::move(s)), core_(core) {}

  void run(http::request<http::string_body> req) {
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws_.async_accept(req, beast::bind_front_handler(&ws_session::on_accept, shared_from_this()));
  }

private:
  void on_accept(beast::error_code ec) {
    if (ec) return;
    read();
  }
  void read() { ws_.async_read(buf_, beast::bind_front_handler(&ws_session::on_read, shared_from_this())); }

  void on_read(beast::error_code ec, std::size_t) {
    if (ec) { // socket gone: cancel everything it carried
      closed_ = true;
      for (const auto& [cid, rid] : live_) {
        core_.eng.cancel(rid);
        core_.metrics.disconnected();
      }
      return;
    }
    const std::string text = beast::buffers_to_string(buf_.data());
    buf_.consume(buf_.size());
    handle(text);
    read();
  }

  void send(std::string msg) {
    if (closed_) return;
    out_.push_back(std::move(msg));
    if (out_.size() == 1) write_next();
  }
  void write_next() {
    ws_.text(true);
    ws_.async_write(asio::buffer(out_.front()), [self = shared_from_this()](beast::error_code ec, std::size_t) {
      self->out_.pop_front();
      if (ec) {
        self->closed_ = true;
        return;
      }
      if (!self->out_.empty()) self->write_next();
    });
  }

  static std::string tag(const std::string& cid, const std::string& obj) {
    return "{\"request_id\":" + json::quote(cid) + "," + obj.substr(1);
  }

  void handle(const std::string& text) {
    std::string cid;
    try {
      const auto msg = parse_body(text);
      const auto* type = msg.find("type");
      const auto* id = msg.find("id");
      if (!id || !id->is_string()) throw api_error(400, "id: every WebSocket message needs a string id", "id");
      cid = id->s;
      const std::string t = type && type->is_string() ? type->s : "";
      if (t == "cancel") {
        if (auto it = live_.find(cid); it != live_.end()) core_.eng.cancel(it->second);
        return;
      }
      if (t != "chat.completions" && t != "completions")
        throw api_error(400, "type: must be chat.completions, completions or cancel", "type");
      if (live_.count(cid)) throw api_error(400, "id: a request with this id is still running on this socket", "id");
      if (core_.draining) throw api_error(503, "The server is shutting down.", "", "shutting_down");
      const auto* body = msg.find("body");
      if (!body || !body->is_object()) throw api_error(400, "body: must be the request object", "body");
      auto p = core_.prepare(t == "chat.completions" ? "/v1/chat/completions" : "/v1/completions", *body);
      if (p.n != 1) throw api_error(400, "n: n > 1 is served over HTTP; send one WebSocket request per choice", "n");
      auto builder = std::make_shared<response_builder>(p.setup);
      auto self = shared_from_this();
      auto ex = ws_.get_executor();
      const auto t0 = clock_t_::now();
      auto last = std::make_shared<clock_t_::time_point>(t0);
      const auto prompt_n = p.setup.prompt_tokens;
      auto r = core_.eng.submit(std::move(p.prompt), p.gp, [self, ex, builder, cid, t0, last, prompt_n](const stream_event& ev) {
        asio::post(ex, [self, builder, cid, ev, t0, last, prompt_n] {
          const auto now = clock_t_::now();
          if (ev.token >= 0) {
            if (builder->completion_tokens() == 0) self->core_.metrics.first_token(std::chrono::duration<double>(now - t0).count());
            else self->core_.metrics.inter_token(std::chrono::duration<double>(now - *last).count());
            *last = now;
          }
          for (auto& c : builder->on_event(ev)) self->send(tag(cid, c));
          if (ev.finished) {
            if (builder->failed())
              self->send(tag(cid, error_json(api_error(500, builder->error_message(), "", "internal_error"))));
            self->send("{\"request_id\":" + json::quote(cid) + ",\"done\":true}");
            self->live_.erase(cid);
            self->core_.metrics.request_finished(builder->failed() ? "error" : builder->finish_reason(), prompt_n,
                                                 builder->completion_tokens(),
                                                 std::chrono::duration<double>(now - t0).count());
            --self->core_.active;
          }
        });
      });
      if (!r.ok()) throw http_server::impl::submit_error(r);
      ++core_.active;
      live_[cid] = r.id;
    } catch (const api_error& e) {
      core_.metrics.rejected(e.code.empty() ? "invalid" : e.code);
      send(tag(cid, error_json(e)));
    }
  }

  websocket::stream<beast::tcp_stream> ws_;
  http_server::impl& core_;
  beast::flat_buffer buf_;
  std::deque<std::string> out_;
  std::map<std::string, engine::request_id> live_;
  bool closed_ = false;
};

// ---- HTTP session --------------------------------------------------------------------------

class http_session : public std::enable_shared_from_this<http_session> {
public:
  http_session(tcp::socket&& s, http_server::impl& core) : stream_(std::move(s)), core_(core), ping_(stream_.get_executor()) {}
  void run() { read(); }

private:
  void read() {
    parser_.emplace();
    parser_->body_limit(static_cast<std::uint64_t>(core_.cfg.max_body_bytes));
    stream_.expires_after(std::chrono::minutes(5));
    http::async_read(stream_, buf_, *parser_, beast::bind_front_handler(&http_session::on_read, shared_from_this()));
  }

  void on_read(beast::error_code ec, std::size_t) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::connection_reset) return close();
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      return reply_error(api_error(413, "The request body exceeds " + std::to_string(core_.cfg.max_body_bytes) + " bytes.", "", "body_too_large"));
    }
    if (ec) {
      keep_alive_ = false;
      return reply_error(api_error(400, "Malformed HTTP request: " + ec.message(), "", "bad_request"));
    }
    req_ = parser_->release();
    keep_alive_ = req_.keep_alive();
    stream_.expires_never();
    if (websocket::is_upgrade(req_)) {
      if (req_.target() != "/v1/ws") return reply_error(api_error(404, "WebSocket endpoint is /v1/ws", "", "not_found"));
      if (!core_.authorized(std::string(req_[http::field::authorization])))
        return reply_error(api_error(401, "Missing or invalid API key.", "", "invalid_api_key"));
      std::make_shared<ws_session>(stream_.release_socket(), core_)->run(std::move(req_));
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

  void route() {
    const std::string target(req_.target().substr(0, req_.target().find('?')));
    const auto method = req_.method();
    if (target == "/health") {
      if (core_.draining) return reply(503, "{\"error\":{\"message\":\"draining\",\"type\":\"unavailable_error\",\"param\":null,\"code\":\"draining\"}}");
      return reply(200, "{\"status\":\"ok\"}");
    }
    if (!core_.authorized(std::string(req_[http::field::authorization]))) {
      core_.metrics.rejected("auth");
      throw api_error(401, "Missing or invalid API key (send Authorization: Bearer <key>).", "", "invalid_api_key");
    }
    auto need = [&](http::verb v) {
      if (method != v) throw api_error(405, std::string("use ") + std::string(http::to_string(v)) + " for " + target, "", "method_not_allowed");
    };
    if (target == "/v1/models") return need(http::verb::get), reply(200, core_.models_json());
    if (target == "/version") return need(http::verb::get), reply(200, "{\"version\":\"k3serve 0.1\"}");
    if (target == "/metrics") {
      need(http::verb::get);
      return reply(200, core_.metrics.render(core_.eng.stats(), core_.served, core_.draining), "text/plain; version=0.0.4");
    }
    if (target == "/tokenize") {
      need(http::verb::post);
      const auto b = parse_body(req_.body());
      std::vector<std::int32_t> ids;
      if (const auto* m = b.find("messages"); m && m->k != json::value::kind::null) {
        auto r = parse_chat(b, core_.k3);
        ids = core_.eng.tokenizer().encode(core_.k3 ? chat::render_k3(r.conv) : chat::render_k2(r.conv));
      } else if (const auto* p = b.find("prompt"); p && p->is_string()) {
        ids = core_.eng.tokenizer().encode(p->s, false);
      } else {
        throw api_error(400, "prompt: a string prompt or messages is required", "prompt");
      }
      std::string arr;
      for (std::size_t i = 0; i < ids.size(); ++i) arr += (i ? "," : "") + std::to_string(ids[i]);
      return reply(200, "{\"count\":" + std::to_string(ids.size()) + ",\"max_model_len\":" +
                            std::to_string(core_.max_model_len()) + ",\"tokens\":[" + arr + "]}");
    }
    if (target == "/detokenize") {
      need(http::verb::post);
      const auto b = parse_body(req_.body());
      const auto* t = b.find("tokens");
      if (!t || t->k != json::value::kind::array) throw api_error(400, "tokens: an array of token ids is required", "tokens");
      std::vector<std::int32_t> ids;
      for (const auto& x : t->items) {
        if (x.k != json::value::kind::integer) throw api_error(400, "tokens: every entry must be an integer", "tokens");
        const long long v = std::strtoll(x.s.c_str(), nullptr, 10);
        if (v < 0 || v >= core_.eng.tokenizer().vocab_size()) throw api_error(400, "tokens: id " + x.s + " is outside the vocabulary", "tokens");
        ids.push_back(static_cast<std::int32_t>(v));
      }
      return reply(200, "{\"prompt\":" + json::quote(core_.eng.tokenizer().decode(ids)) + "}");
    }
    if (target == "/v1/chat/completions" || target == "/v1/completions") {
      need(http::verb::post);
      if (core_.draining) throw api_error(503, "The server is shutting down.", "", "shutting_down");
      return generate(target);
    }
    throw api_error(404, "No route for " + std::string(http::to_string(method)) + " " + target, "", "not_found");
  }

  void generate(const std::string& target) {
    auto p = core_.prepare(target, parse_body(req_.body()));
    streaming_ = p.stream;
    include_usage_ = p.setup.include_usage;
    prompt_tokens_ = p.setup.prompt_tokens;
    t0_ = last_ = clock_t_::now();
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
      write_raw("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                "Transfer-Encoding: chunked\r\nConnection: " + std::string(keep_alive_ ? "keep-alive" : "close") + "\r\n\r\n");
      arm_ping();
    }
    watch_disconnect();
  }

  /// SSE comment lines while nothing else is sent (a long prefill): proxies keep the stream open.
  void arm_ping() {
    ping_.expires_after(std::chrono::seconds(15));
    ping_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || !self->generating_ || self->cancelled_) return;
      if (clock_t_::now() - self->last_write_ >= std::chrono::seconds(15)) self->write_raw(chunk_frame(": ping\n\n"));
      self->arm_ping();
    });
  }

  /// The peer closing its side makes the socket readable with no data: cancel.
  void watch_disconnect() {
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
      if (!self->generating_) return;
      beast::error_code e2;
      const auto avail = self->stream_.socket().available(e2);
      if (ec || e2 || avail == 0) {
        self->disconnect();
      } else {
        // Pipelined bytes: leave them for the next read; stop watching.
      }
    });
  }

  void disconnect() {
    if (!generating_ || cancelled_) return;
    cancelled_ = true;
    core_.metrics.disconnected();
    for (auto id : req_ids_) core_.eng.cancel(id);
  }

  void on_event(std::size_t i, const stream_event& ev) {
    const auto now = clock_t_::now();
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
      for (auto& c : chunks) write_raw(sse(c));
    if (!ev.finished) return;
    --core_.active;
    core_.metrics.request_finished(cancelled_ ? "abort" : b.failed() ? "error" : b.finish_reason(), i == 0 ? prompt_tokens_ : 0,
                                   b.completion_tokens(), std::chrono::duration<double>(now - t0_).count());
    if (--open_ > 0) return;
    generating_ = false;
    ping_.cancel();
    if (cancelled_) return close();
    std::vector<const response_builder*> all;
    std::string failure;
    for (const auto& x : builders_) {
      all.push_back(x.get());
      if (x->failed() && failure.empty()) failure = x->error_message();
    }
    if (streaming_) {
      if (!failure.empty()) write_raw(sse(error_json(api_error(500, failure, "", "internal_error"))));
      else if (include_usage_ && all.size() > 1) write_raw(sse(response_builder::usage_chunk(all)));
      write_raw(sse("[DONE]"));
      write_raw("0\r\n\r\n");
      after_writes_ = true;
      maybe_continue();
    } else if (!failure.empty()) {
      reply_error(api_error(500, failure, "", "internal_error"));
    } else {
      reply(200, response_builder::merged_body(all));
    }
  }

  void write_raw(std::string s) {
    last_write_ = clock_t_::now();
    out_.push_back(std::move(s));
    if (out_.size() == 1) write_next();
  }
  void write_next() {
    asio::async_write(stream_, asio::buffer(out_.front()), [self = shared_from_this()](beast::error_code ec, std::size_t) {
      self->out_.pop_front();
      if (ec) {
        self->out_.clear();
        self->disconnect();
        return;
      }
      if (!self->out_.empty()) return self->write_next();
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
    cancelled_ = false;
    stream_.socket().cancel(); // stop the disconnect watch
    read();
  }

  void reply(int status, std::string body, const char* type = "application/json") {
    core_.metrics.http_request(status);
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(status), req_.version());
    res->set(http::field::server, "k3serve");
    res->set(http::field::content_type, type);
    if (status == 429) res->set(http::field::retry_after, "1");
    res->keep_alive(keep_alive_);
    res->body() = std::move(body);
    res->prepare_payload();
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, std::size_t) {
      if (ec || !self->keep_alive_) return self->close();
      self->reset_and_read();
    });
  }
  void reply_error(const api_error& e) { reply(e.status, error_json(e)); }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  }

  beast::tcp_stream stream_;
  http_server::impl& core_;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> req_;
  bool keep_alive_ = true, streaming_ = false, generating_ = false, cancelled_ = false, after_writes_ = false;
  bool include_usage_ = false, abandoned_ = false;
  int open_ = 0;
  std::vector<std::shared_ptr<response_builder>> builders_;
  std::vector<engine::request_id> req_ids_;
  std::int64_t prompt_tokens_ = 0;
  clock_t_::time_point t0_, last_, last_write_;
  asio::steady_timer ping_;
  std::deque<std::string> out_;
};

void do_accept(http_server::impl& core) {
  core.acceptor.async_accept(asio::make_strand(core.ioc), [&core](beast::error_code ec, tcp::socket s) {
    if (ec) return; // acceptor closed (draining)
    std::make_shared<http_session>(std::move(s), core)->run();
    do_accept(core);
  });
}

} // namespace

http_server::http_server(llm_engine& eng, server_config cfg, std::string served)
    : impl_(std::make_unique<impl>(eng, std::move(cfg), std::move(served))) {}

http_server::~http_server() = default;

std::uint16_t http_server::port() const noexcept { return impl_->bound_port; }

int http_server::run() {
  auto& c = *impl_;
  const auto addr = asio::ip::make_address(c.cfg.host);
  const tcp::endpoint ep(addr, static_cast<std::uint16_t>(c.cfg.port));
  c.acceptor.open(ep.protocol());
  c.acceptor.set_option(asio::socket_base::reuse_address(true));
  c.acceptor.bind(ep);
  c.acceptor.listen(asio::socket_base::max_listen_connections);
  c.bound_port = c.acceptor.local_endpoint().port();
  std::printf("k3 serve: listening on http://%s:%u (model %s, max_model_len %lld)\n", c.cfg.host.c_str(),
              static_cast<unsigned>(c.bound_port), c.served.c_str(), static_cast<long long>(c.max_model_len()));
  std::fflush(stdout);
  do_accept(c);

  // SIGTERM / SIGINT: stop taking requests (503, /health 503), drain in-flight ones, exit 0.
  asio::steady_timer drain_timer(c.ioc);
  clock_t_::time_point deadline;
  std::function<void()> poll = [&] {
    if (c.active == 0 || clock_t_::now() >= deadline) {
      std::fprintf(stderr, "k3 serve: %s, exiting\n", c.active == 0 ? "drained" : "shutdown timeout with requests in flight");
      c.ioc.stop();
      return;
    }
    drain_timer.expires_after(std::chrono::milliseconds(20));
    drain_timer.async_wait([&](beast::error_code) { poll(); });
  };
  c.signals.async_wait([&](beast::error_code ec, int sig) {
    if (ec) return;
    std::fprintf(stderr, "k3 serve: signal %d, draining %d in-flight request(s) (timeout %.0f s)\n", sig, c.active.load(),
                 c.cfg.shutdown_timeout);
    c.draining = true; // keep accepting: /health answers 503 and new requests get 503 while draining
    deadline = clock_t_::now() + std::chrono::milliseconds(static_cast<long long>(c.cfg.shutdown_timeout * 1000));
    poll();
  });

  std::vector<std::thread> threads;
  for (int i = 1; i < c.cfg.http_threads; ++i) threads.emplace_back([&] { c.ioc.run(); });
  c.ioc.run();
  for (auto& t : threads) t.join();
  return 0;
}

} // namespace k3::net
