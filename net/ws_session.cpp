// The WebSocket endpoint /v1/ws (protocol in net/http_server.hpp): any number of concurrent
// streaming requests per socket. Requests are prepared on the preparation pool like HTTP ones;
// a socket that goes away cancels everything it carried. A client that leaves one write unread
// for --write-timeout seconds is dropped like an HTTP one (its requests cancelled, their slots
// freed): Beast's WebSocket timeouts cover the handshake and idle reads, not a stuck write.
//
// A cancel applies to the request with its id that the client sent before it, and to no later
// one: envelopes are parsed on the pool (two messages may finish parsing in either order), so
// every message carries its arrival number from the I/O thread, and a cancel that finds no live
// request is kept with its number only while a message sent before it is still being prepared.
// A cancel that arrives just after its request finished is therefore dropped, not applied to the
// next request that reuses the id.
#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <set>

#include <boost/beast/websocket.hpp>

#include "net/http_internal.hpp"

namespace k3::net {
namespace {

namespace websocket = beast::websocket;

class ws_session : public std::enable_shared_from_this<ws_session> {
public:
  ws_session(tcp::socket&& s, http_server::impl& core, connection_slot slot)
      : ws_(std::move(s)), core_(core), slot_(std::move(slot)), write_timer_(ws_.get_executor()) {}

  void run(http::request<http::string_body> req) {
    auto t = websocket::stream_base::timeout::suggested(beast::role_type::server);
    ws_.set_option(t);
    ws_.read_message_max(static_cast<std::uint64_t>(core_.cfg.max_body_bytes));
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
      for (const auto& [cid, live] : live_) {
        core_.eng.cancel(live.id);
        core_.metrics.disconnected();
      }
      return;
    }
    auto text = std::make_shared<std::string>(beast::buffers_to_string(buf_.data()));
    buf_.consume(buf_.size());
    preparing_.insert(++received_);
    handle(text, received_);
    read();
  }

  void send(std::string msg) {
    if (closed_) return;
    out_.push_back(std::move(msg));
    if (out_.size() == 1) {
      ++core_.unflushed;
      write_next();
    }
  }
  void write_next() {
    ws_.text(true);
    write_timer_.expires_after(secs(core_.cfg.write_timeout));
    write_timer_.async_wait([self = shared_from_this(), seq = writes_done_](beast::error_code ec) {
      if (ec || self->writes_done_ != seq || self->closed_) return; // that write finished in time
      beast::error_code ignored;
      beast::get_lowest_layer(self->ws_).socket().close(ignored); // the pending read and write fail: cleanup there
    });
    ws_.async_write(asio::buffer(out_.front()), [self = shared_from_this()](beast::error_code ec, std::size_t) {
      ++self->writes_done_;
      self->write_timer_.cancel();
      self->out_.pop_front();
      if (ec) {
        self->closed_ = true;
        self->out_.clear();
        --self->core_.unflushed;
        return;
      }
      if (!self->out_.empty()) self->write_next();
      else --self->core_.unflushed;
    });
  }

  static std::string tag(const std::string& cid, const std::string& obj) {
    return "{\"request_id\":" + json::quote(cid) + "," + obj.substr(1);
  }

  void reject(const std::string& cid, const api_error& e) {
    core_.metrics.rejected(e.code.empty() ? "invalid" : e.code);
    send(tag(cid, error_json(e)));
  }

  // Parsing the envelope is cheap; the body's preparation goes to the pool.
  void handle(const std::shared_ptr<std::string>& text, std::uint64_t seq) {
    auto self = shared_from_this();
    asio::post(core_.prep, [self, text, seq] {
      std::string cid, type;
      std::optional<api_error> err;
      std::shared_ptr<const json::value> body;
      try {
        const auto msg = parse_body(*text);
        const auto* t = msg.find("type");
        const auto* id = msg.find("id");
        if (!id || !id->is_string()) throw api_error(400, "id: every WebSocket message needs a string id", "id");
        cid = id->s;
        type = t && t->is_string() ? t->s : "";
        if (type != "cancel") {
          if (type != "chat.completions" && type != "completions")
            throw api_error(400, "type: must be chat.completions, completions or cancel", "type");
          if (self->core_.draining) throw api_error(503, "The server is shutting down.", "", "shutting_down");
          const auto* b = msg.find("body");
          if (!b || !b->is_object()) throw api_error(400, "body: must be the request object", "body");
          body = std::make_shared<const json::value>(*b);
        }
      } catch (const api_error& e) {
        err = e;
      } catch (const std::exception& e) {
        err = api_error(500, std::string("internal error: ") + e.what(), "", "internal_error");
      }
      if (err || type == "cancel") return self->prepared_done(cid, type, seq, nullptr, err);
      self->core_.prepare_async(type == "chat.completions" ? "/v1/chat/completions" : "/v1/completions", body,
                                [self, cid, type, seq](std::shared_ptr<frontend::prepared> p, std::optional<api_error> e) {
                                  if (!e && p && p->n != 1)
                                    e = api_error(400, "n: n > 1 is served over HTTP; send one WebSocket request per choice", "n");
                                  self->prepared_done(cid, type, seq, std::move(p), std::move(e));
                                });
    });
  }

  void prepared_done(const std::string& cid, const std::string& type, std::uint64_t seq,
                     std::shared_ptr<frontend::prepared> p, std::optional<api_error> err) {
    auto self = shared_from_this();
    asio::post(ws_.get_executor(), [self, cid, type, seq, p, err] {
      self->preparing_.erase(seq);
      if (err) self->reject(cid, *err);
      else if (type == "cancel") self->cancel(cid, seq);
      else self->start(cid, seq, std::move(*p));
      self->forget_stale_cancels();
    });
  }

  void cancel(const std::string& cid, std::uint64_t seq) {
    if (auto it = live_.find(cid); it != live_.end()) {
      if (it->second.seq < seq) core_.eng.cancel(it->second.id);
      return;
    }
    // Its request may still be in preparation (only a message sent before this one can be it):
    // keep the newest cancel per id until no earlier message is left in preparation.
    if (preparing_.empty() || *preparing_.begin() > seq) return;
    if (auto it = early_cancels_.find(cid); it != early_cancels_.end()) it->second = std::max(it->second, seq);
    else if (early_cancels_.size() < 4096) early_cancels_.emplace(cid, seq);
  }

  /// Drops kept cancels that no message still in preparation was sent before: their requests
  /// started (and took them), failed, or never existed. The map only holds cancels sent while
  /// an earlier message was still being prepared (and at most 4096 of those).
  void forget_stale_cancels() {
    if (early_cancels_.empty()) return;
    const std::uint64_t oldest = preparing_.empty() ? ~std::uint64_t{0} : *preparing_.begin();
    std::erase_if(early_cancels_, [&](const auto& kv) { return kv.second < oldest; });
  }

  void start(const std::string& cid, std::uint64_t seq, frontend::prepared p) {
    if (auto it = early_cancels_.find(cid); it != early_cancels_.end()) {
      const bool for_this = it->second > seq; // sent after this request: it cancels it
      early_cancels_.erase(it);               // either way it concerns no request sent after this one
      if (for_this) return send("{\"request_id\":" + json::quote(cid) + ",\"done\":true}");
    }
    if (live_.count(cid)) return reject(cid, api_error(400, "id: a request with this id is still running on this socket", "id"));
    auto builder = std::make_shared<response_builder>(p.setup);
    p.gp.structural_ids = builder->structural_ids();
    auto self = shared_from_this();
    auto ex = ws_.get_executor();
    const auto t0 = steady::now();
    auto last = std::make_shared<steady::time_point>(t0);
    const auto prompt_n = p.setup.prompt_tokens;
    auto r = core_.eng.submit(std::move(p.prompt), p.gp, [self, ex, builder, cid, t0, last, prompt_n](const stream_event& ev) {
      asio::post(ex, [self, builder, cid, ev, t0, last, prompt_n] {
        const auto now = steady::now();
        if (ev.token >= 0) {
          if (builder->completion_tokens() == 0) self->core_.metrics.first_token(std::chrono::duration<double>(now - t0).count());
          else self->core_.metrics.inter_token(std::chrono::duration<double>(now - *last).count());
          *last = now;
        }
        for (auto& c : builder->on_event(ev)) self->send(tag(cid, c));
        if (ev.finished) {
          if (builder->failed()) {
            const auto e = builder->error_code() == engine::errc::shutting_down
                               ? api_error(503, "The server is shutting down.", "", "shutting_down")
                               : api_error(500, builder->error_message(), "", "internal_error");
            self->send(tag(cid, error_json(e)));
          }
          self->send("{\"request_id\":" + json::quote(cid) + ",\"done\":true}");
          self->live_.erase(cid);
          self->core_.metrics.request_finished(builder->failed() ? "error" : builder->finish_reason(), prompt_n,
                                               builder->completion_tokens(), std::chrono::duration<double>(now - t0).count());
          --self->core_.active;
        }
      });
    });
    if (!r.ok()) {
      core_.metrics.rejected(r.error == engine::errc::queue_full ? "queue_full" : engine::to_string(r.error));
      return send(tag(cid, error_json(http_server::impl::submit_error(r))));
    }
    ++core_.active;
    live_[cid] = {r.id, seq};
    if (closed_) core_.eng.cancel(r.id); // the socket went away while this was being prepared
  }

  websocket::stream<beast::tcp_stream> ws_;
  http_server::impl& core_;
  connection_slot slot_;
  beast::flat_buffer buf_;
  std::deque<std::string> out_;
  struct live_request {
    engine::request_id id;
    std::uint64_t seq; ///< arrival number of the message that started it
  };
  std::map<std::string, live_request> live_;
  std::map<std::string, std::uint64_t> early_cancels_; ///< id → arrival number of a cancel that found no live request
  std::uint64_t received_ = 0;                         ///< messages read so far (I/O thread only)
  std::set<std::uint64_t> preparing_;                  ///< arrival numbers of messages still being prepared
  asio::steady_timer write_timer_;                     ///< --write-timeout for the write in flight
  std::uint64_t writes_done_ = 0;
  bool closed_ = false;
};

} // namespace

void start_ws_session(tcp::socket&& s, http_server::impl& core, connection_slot slot, http::request<http::string_body> req) {
  std::make_shared<ws_session>(std::move(s), core, std::move(slot))->run(std::move(req));
}

} // namespace k3::net
