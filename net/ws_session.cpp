// The WebSocket endpoint /v1/ws (protocol in net/http_server.hpp): any number of concurrent
// streaming requests per socket. Requests are prepared on the preparation pool like HTTP ones;
// a socket that goes away cancels everything it carried.
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
      : ws_(std::move(s)), core_(core), slot_(std::move(slot)) {}

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
      for (const auto& [cid, rid] : live_) {
        core_.eng.cancel(rid);
        core_.metrics.disconnected();
      }
      return;
    }
    auto text = std::make_shared<std::string>(beast::buffers_to_string(buf_.data()));
    buf_.consume(buf_.size());
    handle(text);
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
    ws_.async_write(asio::buffer(out_.front()), [self = shared_from_this()](beast::error_code ec, std::size_t) {
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
  void handle(const std::shared_ptr<std::string>& text) {
    auto self = shared_from_this();
    asio::post(core_.prep, [self, text] {
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
      if (err || type == "cancel") return self->prepared_done(cid, type, nullptr, err);
      self->core_.prepare_async(type == "chat.completions" ? "/v1/chat/completions" : "/v1/completions", body,
                                [self, cid, type](std::shared_ptr<frontend::prepared> p, std::optional<api_error> e) {
                                  if (!e && p && p->n != 1)
                                    e = api_error(400, "n: n > 1 is served over HTTP; send one WebSocket request per choice", "n");
                                  self->prepared_done(cid, type, std::move(p), std::move(e));
                                });
    });
  }

  void prepared_done(const std::string& cid, const std::string& type, std::shared_ptr<frontend::prepared> p,
                     std::optional<api_error> err) {
    auto self = shared_from_this();
    asio::post(ws_.get_executor(), [self, cid, type, p, err] {
      if (err) return self->reject(cid, *err);
      if (type == "cancel") {
        if (auto it = self->live_.find(cid); it != self->live_.end()) self->core_.eng.cancel(it->second);
        else if (self->early_cancels_.size() < 1024) self->early_cancels_.insert(cid); // its request is still being prepared
        return;
      }
      self->start(cid, std::move(*p));
    });
  }

  void start(const std::string& cid, frontend::prepared p) {
    if (early_cancels_.erase(cid)) return send("{\"request_id\":" + json::quote(cid) + ",\"done\":true}");
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
    live_[cid] = r.id;
    if (closed_) core_.eng.cancel(r.id); // the socket went away while this was being prepared
  }

  websocket::stream<beast::tcp_stream> ws_;
  http_server::impl& core_;
  connection_slot slot_;
  beast::flat_buffer buf_;
  std::deque<std::string> out_;
  std::map<std::string, engine::request_id> live_;
  std::set<std::string> early_cancels_; ///< cancels that overtook their request's preparation
  bool closed_ = false;
};

} // namespace

void start_ws_session(tcp::socket&& s, http_server::impl& core, connection_slot slot, http::request<http::string_body> req) {
  std::make_shared<ws_session>(std::move(s), core, std::move(slot))->run(std::move(req));
}

} // namespace k3::net
