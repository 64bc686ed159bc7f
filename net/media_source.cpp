#include "net/media_source.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <thread>
#include <utility>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

namespace k3::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

namespace {

std::string lower(std::string_view s) {
  std::string o(s);
  for (auto& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

bool starts_with_ci(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && lower(s.substr(0, p.size())) == p;
}

[[noreturn]] void too_large(const std::string& param, std::int64_t max) {
  throw api_error(422, param + ": the image is larger than --max-image-bytes (" + std::to_string(max) + " bytes)", param,
                  "image_too_large");
}

} // namespace

media_policy media_policy_of(const server_config& c) {
  media_policy p;
  p.allowed_domains = c.allowed_media_domains;
  p.allowed_local_path = c.allowed_local_media_path;
  p.fetch_timeout = c.media_fetch_timeout;
  p.max_bytes = c.max_image_bytes;
  p.allow_private = c.media_allow_private_networks;
  return p;
}

bool is_remote_url(std::string_view url) noexcept {
  return starts_with_ci(url, "http://") || starts_with_ci(url, "https://");
}

std::optional<std::string> base64_decode(std::string_view in) {
  static const auto table = [] {
    std::array<int, 256> t{};
    t.fill(-1);
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(a[i])] = i;
    return t;
  }();
  std::size_t n = in.size();
  std::size_t pad = 0;
  while (n > 0 && in[n - 1] == '=' && pad < 2) --n, ++pad;
  if (pad && (n + pad) % 4) return std::nullopt;
  if (n % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(n / 4 * 3 + 2);
  std::uint32_t acc = 0;
  int bits = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const int v = table[static_cast<unsigned char>(in[i])];
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

std::string load_local_media(std::string_view url, const std::string& param, const media_policy& pol) {
  if (starts_with_ci(url, "data:")) {
    const auto comma = url.find(',');
    if (comma == std::string_view::npos) throw api_error(400, param + ": invalid data URL: missing ',' separator", param);
    const std::string_view meta = url.substr(5, comma - 5), data = url.substr(comma + 1);
    if (meta.size() < 7 || lower(meta.substr(meta.size() - 7)) != ";base64")
      throw api_error(400, param + ": only base64 data URLs are supported (data:image/png;base64,…)", param);
    if (static_cast<std::int64_t>(data.size() / 4 * 3) > pol.max_bytes + 3) too_large(param, pol.max_bytes);
    auto bytes = base64_decode(data);
    if (!bytes) throw api_error(400, param + ": the data URL is not valid base64", param);
    if (static_cast<std::int64_t>(bytes->size()) > pol.max_bytes) too_large(param, pol.max_bytes);
    return std::move(*bytes);
  }
  if (starts_with_ci(url, "file:")) {
    if (pol.allowed_local_path.empty())
      throw api_error(400, param + ": cannot load local files without --allowed-local-media-path", param);
    std::string_view path = url.substr(5);
    if (path.rfind("//", 0) == 0) {
      path.remove_prefix(2);
      const auto slash = path.find('/');
      const std::string_view host = path.substr(0, slash);
      if (!host.empty() && host != "localhost") throw api_error(400, param + ": file URLs must name a local path", param);
      path = slash == std::string_view::npos ? std::string_view() : path.substr(slash);
    }
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path root = fs::weakly_canonical(pol.allowed_local_path, ec);
    const fs::path p = fs::weakly_canonical(fs::path(std::string(path)), ec);
    auto rel = p.lexically_relative(root);
    if (ec || path.empty() || rel.empty() || *rel.begin() == "..")
      throw api_error(400, param + ": the file path must be a subpath of --allowed-local-media-path (" +
                               pol.allowed_local_path + ")", param);
    const auto size = fs::file_size(p, ec);
    if (ec || !fs::is_regular_file(p)) throw api_error(400, param + ": cannot read " + p.string(), param);
    if (static_cast<std::int64_t>(size) > pol.max_bytes) too_large(param, pol.max_bytes);
    std::ifstream in(p, std::ios::binary);
    std::string bytes(static_cast<std::size_t>(size), '\0');
    if (!in.read(bytes.data(), static_cast<std::streamsize>(size))) throw api_error(400, param + ": cannot read " + p.string(), param);
    return bytes;
  }
  if (is_remote_url(url)) throw api_error(400, param + ": remote image URLs are fetched only for generation requests", param);
  throw api_error(400, param + ": the URL must be either a HTTP, data or file URL", param);
}

http_url parse_http_url(std::string_view url, const std::string& param) {
  http_url u;
  std::string_view rest;
  if (starts_with_ci(url, "https://")) {
    u.tls = true;
    rest = url.substr(8);
  } else if (starts_with_ci(url, "http://")) {
    rest = url.substr(7);
  } else {
    throw api_error(400, param + ": the URL must be either a HTTP, data or file URL", param);
  }
  if (const auto h = rest.find('#'); h != std::string_view::npos) rest = rest.substr(0, h);
  const auto end = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, end);
  u.target = end == std::string_view::npos ? "/" : std::string(rest.substr(end));
  if (u.target[0] == '?') u.target = "/" + u.target;
  if (authority.find('@') != std::string_view::npos) throw api_error(400, param + ": URLs with user information are refused", param);
  if (!authority.empty() && authority[0] == '[') { // IPv6 literal
    const auto close = authority.find(']');
    if (close == std::string_view::npos) throw api_error(400, param + ": malformed URL host", param);
    u.host = std::string(authority.substr(1, close - 1));
    authority = authority.substr(close + 1);
    if (!authority.empty() && authority[0] == ':') u.port = std::string(authority.substr(1));
    else if (!authority.empty()) throw api_error(400, param + ": malformed URL host", param);
  } else {
    const auto colon = authority.rfind(':');
    u.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) u.port = std::string(authority.substr(colon + 1));
  }
  u.host = lower(u.host);
  if (u.host.empty() || u.host.find_first_of(" \t\r\n/\\") != std::string::npos)
    throw api_error(400, param + ": the URL has no valid host", param);
  if (u.port.empty()) u.port = u.tls ? "443" : "80";
  if (u.port.find_first_not_of("0123456789") != std::string::npos || u.port.size() > 5 || std::stoi(u.port) == 0 ||
      std::stoi(u.port) > 65535)
    throw api_error(400, param + ": the URL's port is not valid", param);
  for (char c : u.target)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) throw api_error(400, param + ": the URL contains control characters or spaces", param);
  return u;
}

void check_allowed_host(const std::string& host, const media_policy& pol, const std::string& param) {
  if (std::find(pol.allowed_domains.begin(), pol.allowed_domains.end(), host) != pol.allowed_domains.end()) return;
  throw api_error(400, param + ": the URL must be from one of the allowed domains (--allowed-media-domains: " +
                           (pol.allowed_domains.empty() ? std::string("none; pass the image as a data: URL or start the "
                                                                      "server with --allowed-media-domains " + host)
                                                        : [&] {
                                                            std::string l;
                                                            for (const auto& d : pol.allowed_domains) l += (l.empty() ? "" : ", ") + d;
                                                            return l;
                                                          }()) +
                           "); got " + host,
                  param);
}

bool is_private_address(const std::string& ip) {
  boost::system::error_code ec;
  auto a = asio::ip::make_address(ip, ec);
  if (ec) return true; // unparsable: refuse
  if (a.is_v6() && a.to_v6().is_v4_mapped()) a = asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6());
  if (a.is_v4()) {
    const auto b = a.to_v4().to_bytes();
    return b[0] == 0 || b[0] == 10 || b[0] == 127 || (b[0] == 169 && b[1] == 254) || (b[0] == 172 && (b[1] & 0xf0) == 16) ||
           (b[0] == 192 && b[1] == 168) || (b[0] == 100 && (b[1] & 0xc0) == 64) || b[0] >= 224 ||
           (b[0] == 192 && b[1] == 0 && b[2] == 0) || (b[0] == 198 && (b[1] & 0xfe) == 18);
  }
  const auto v6 = a.to_v6();
  const auto b = v6.to_bytes();
  return v6.is_loopback() || v6.is_unspecified() || v6.is_link_local() || v6.is_multicast() || (b[0] & 0xfe) == 0xfc ||
         v6.is_site_local() || (b[0] == 0x20 && b[1] == 0x02) /* 6to4 */ || (b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b);
}

// ---- the asynchronous client ----------------------------------------------------------------

struct media_fetcher::impl {
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> work{ioc.get_executor()};
  ssl::context tls{ssl::context::tls_client};
  std::thread thread;
  impl() {
    tls.set_default_verify_paths();
    tls.set_verify_mode(ssl::verify_peer);
    thread = std::thread([this] { ioc.run(); });
  }
  ~impl() {
    work.reset();
    ioc.stop();
    if (thread.joinable()) thread.join();
  }
};

namespace {

class fetch_op : public std::enable_shared_from_this<fetch_op> {
public:
  fetch_op(media_fetcher::impl& im, const media_policy& pol, std::string param, std::function<void(media_fetcher::result)> done)
      : im_(im), pol_(pol), param_(std::move(param)), done_(std::move(done)), resolver_(im.ioc),
        deadline_(std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(pol.fetch_timeout))) {}

  void start(const std::string& url) {
    try {
      url_ = parse_http_url(url, param_);
      check_allowed_host(url_.host, pol_, param_);
    } catch (const api_error& e) {
      return finish_error(e);
    }
    auto self = shared_from_this();
    resolver_.async_resolve(url_.host, url_.port, [self](beast::error_code ec, tcp::resolver::results_type res) {
      self->on_resolve(ec, std::move(res));
    });
    arm_timer();
  }

private:
  void arm_timer() {
    // The resolver has no deadline of its own: cancel it when the overall deadline passes.
    timer_ = std::make_shared<asio::steady_timer>(im_.ioc, deadline_);
    auto self = shared_from_this();
    timer_->async_wait([self](beast::error_code ec) {
      if (ec) return;
      self->timed_out_ = true;
      self->resolver_.cancel();
      if (self->tcp_) self->tcp_->cancel();
      if (self->tls_) beast::get_lowest_layer(*self->tls_).cancel();
    });
  }

  void on_resolve(beast::error_code ec, tcp::resolver::results_type res) {
    if (ec) return fail_net(ec, "cannot resolve " + url_.host);
    std::vector<tcp::endpoint> eps;
    for (const auto& r : res) {
      const auto ep = r.endpoint();
      if (!pol_.allow_private && is_private_address(ep.address().to_string())) {
        blocked_ = ep.address().to_string();
        continue;
      }
      eps.push_back(ep);
    }
    if (eps.empty())
      return finish_error(api_error(400, param_ + ": " + url_.host + " resolves to a private or loopback address (" + blocked_ +
                                             "); refused unless the server runs with --media-allow-private-networks",
                                    param_));
    auto self = shared_from_this();
    if (url_.tls) {
      tls_ = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(im_.ioc, im_.tls);
      if (!SSL_set_tlsext_host_name(tls_->native_handle(), url_.host.c_str()))
        return finish_error(api_error(502, param_ + ": TLS setup failed", param_));
      tls_->set_verify_callback(ssl::host_name_verification(url_.host));
      beast::get_lowest_layer(*tls_).expires_at(deadline_);
      beast::get_lowest_layer(*tls_).async_connect(eps, [self](beast::error_code e, const tcp::endpoint&) {
        if (e) return self->fail_net(e, "cannot connect to " + self->url_.host);
        beast::get_lowest_layer(*self->tls_).expires_at(self->deadline_);
        self->tls_->async_handshake(ssl::stream_base::client, [self](beast::error_code e2) {
          if (e2) return self->fail_net(e2, "TLS handshake with " + self->url_.host + " failed");
          self->send(*self->tls_);
        });
      });
    } else {
      tcp_ = std::make_unique<beast::tcp_stream>(im_.ioc);
      tcp_->expires_at(deadline_);
      tcp_->async_connect(eps, [self](beast::error_code e, const tcp::endpoint&) {
        if (e) return self->fail_net(e, "cannot connect to " + self->url_.host);
        self->send(*self->tcp_);
      });
    }
  }

  template <class Stream>
  void send(Stream& s) {
    req_ = {http::verb::get, url_.target, 11};
    const bool default_port = url_.port == (url_.tls ? "443" : "80");
    req_.set(http::field::host, default_port ? url_.host : url_.host + ":" + url_.port);
    req_.set(http::field::user_agent, "k3serve");
    req_.set(http::field::accept, "image/*");
    auto self = shared_from_this();
    beast::get_lowest_layer(s).expires_at(deadline_);
    http::async_write(s, req_, [self, &s](beast::error_code ec, std::size_t) {
      if (ec) return self->fail_net(ec, "cannot send the request to " + self->url_.host);
      self->parser_.emplace();
      self->parser_->body_limit(static_cast<std::uint64_t>(self->pol_.max_bytes));
      self->parser_->header_limit(64 * 1024);
      beast::get_lowest_layer(s).expires_at(self->deadline_);
      http::async_read_header(s, self->buf_, *self->parser_, [self, &s](beast::error_code e, std::size_t) {
        if (e) return self->on_read(e);
        const auto cl = self->parser_->content_length();
        if (cl && *cl > static_cast<std::uint64_t>(self->pol_.max_bytes)) return self->on_read(http::error::body_limit);
        self->read_body(s);
      });
    });
  }

  // Beast 1.74 does not always enforce body_limit once the header and part of the body arrive
  // in one read (seen with eager parsing), so the size is checked here after every read.
  template <class Stream>
  void read_body(Stream& s) {
    if (parser_->is_done()) return on_read({});
    auto self = shared_from_this();
    http::async_read_some(s, buf_, *parser_, [self, &s](beast::error_code e, std::size_t) {
      if (!e && self->parser_->get().body().size() > static_cast<std::size_t>(self->pol_.max_bytes)) e = http::error::body_limit;
      if (e) return self->on_read(e);
      self->read_body(s);
    });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::body_limit)
      return finish_error(api_error(422, param_ + ": the image at " + url_.host + " is larger than --max-image-bytes (" +
                                             std::to_string(pol_.max_bytes) + " bytes)",
                                    param_, "image_too_large"));
    if (ec) return fail_net(ec, "cannot read the response of " + url_.host);
    auto& res = parser_->get();
    const unsigned code = res.result_int();
    if (code >= 300 && code < 400 && res.find(http::field::location) != res.end()) {
      if (++hops_ > pol_.max_redirects)
        return finish_error(api_error(422, param_ + ": more than " + std::to_string(pol_.max_redirects) + " redirects", param_));
      std::string loc(res[http::field::location]);
      if (loc.rfind("//", 0) == 0) loc = (url_.tls ? "https:" : "http:") + loc;
      else if (!loc.empty() && loc[0] == '/') loc = (url_.tls ? "https://" : "http://") + url_.host + ":" + url_.port + loc;
      else if (!is_remote_url(loc))
        return finish_error(api_error(422, param_ + ": the redirect to '" + loc + "' is not an http(s) URL", param_));
      close();
      buf_.consume(buf_.size());
      if (timer_) timer_->cancel();
      return start(loc); // the next hop is checked against the allow-list and address rules again
    }
    if (code >= 400 && code < 500 && code != 408 && code != 429)
      return finish_error(api_error(422, param_ + ": fetching the image from " + url_.host + " failed with HTTP " + std::to_string(code), param_));
    if (code >= 300)
      return finish_error(api_error(502, param_ + ": fetching the image from " + url_.host + " failed with HTTP " + std::to_string(code), param_));
    media_fetcher::result r;
    r.bytes = std::move(res.body());
    finish(std::move(r));
  }

  void fail_net(beast::error_code ec, const std::string& what) {
    if (timed_out_ || ec == beast::error::timeout)
      return finish_error(api_error(504, param_ + ": fetching the image from " + url_.host + " timed out after " +
                                             std::to_string(pol_.fetch_timeout) + " s (--media-fetch-timeout)",
                                    param_, "media_fetch_timeout"));
    finish_error(api_error(502, param_ + ": " + what + ": " + ec.message(), param_, "media_fetch_failed"));
  }

  void close() {
    beast::error_code ignored;
    if (tcp_) tcp_->socket().close(ignored);
    if (tls_) beast::get_lowest_layer(*tls_).socket().close(ignored);
    tcp_.reset();
    tls_.reset();
  }

  void finish_error(api_error e) {
    media_fetcher::result r;
    r.error = std::move(e);
    finish(std::move(r));
  }
  void finish(media_fetcher::result r) {
    if (finished_) return;
    finished_ = true;
    if (timer_) timer_->cancel();
    close();
    auto d = std::move(done_);
    d(std::move(r));
  }

  media_fetcher::impl& im_;
  const media_policy& pol_;
  std::string param_;
  std::function<void(media_fetcher::result)> done_;
  tcp::resolver resolver_;
  std::chrono::steady_clock::time_point deadline_;
  std::shared_ptr<asio::steady_timer> timer_;
  http_url url_;
  std::unique_ptr<beast::tcp_stream> tcp_;
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> tls_;
  http::request<http::empty_body> req_;
  beast::flat_buffer buf_;
  std::optional<http::response_parser<http::string_body>> parser_;
  std::string blocked_;
  int hops_ = 0;
  bool timed_out_ = false, finished_ = false;
};

} // namespace

media_fetcher::media_fetcher(media_policy pol) : pol_(std::move(pol)), impl_(std::make_unique<impl>()) {}
media_fetcher::~media_fetcher() = default;

void media_fetcher::fetch(const std::string& url, const std::string& param, std::function<void(result)> done) {
  auto op = std::make_shared<fetch_op>(*impl_, pol_, param, std::move(done));
  asio::post(impl_->ioc, [op, url] { op->start(url); });
}

} // namespace k3::net
