// libFuzzer: HTTP/1.x request parsing (Beast's parser with the server's limits) and routing,
// then the body through the OpenAI request parser when the route takes one. Any exception
// other than the server's typed errors, and any sanitizer report, is a finding.
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket/rfc6455.hpp>

#include "fuzz/fuzz_util.hpp"
#include "net/openai_request.hpp"
#include "net/routes.hpp"

namespace http = boost::beast::http;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  http::request_parser<http::string_body> p;
  p.eager(true);
  p.body_limit(1 << 20);
  p.header_limit(64 * 1024);
  boost::beast::error_code ec;
  std::size_t used = 0;
  while (used < size && !p.is_done()) {
    const auto n = p.put(boost::asio::buffer(data + used, size - used), ec);
    if (ec == http::error::need_more) break;
    if (ec) return 0; // malformed: the session answers 400 / 413 / 431
    if (n == 0) break;
    used += n;
  }
  if (!p.is_done()) return 0;
  const auto& req = p.get();
  const bool upgrade = boost::beast::websocket::is_upgrade(req);
  const auto m = k3::net::match_route(std::string(http::to_string(req.method())), std::string(req.target()), upgrade);
  K3_FUZZ_CHECK(m.status == 0 || m.status == 404 || m.status == 405);
  K3_FUZZ_CHECK((m.status == 0) == (m.r != k3::net::route::none));
  (void)k3::net::bearer_authorized(std::string(req[http::field::authorization]), {"key-one", "k2"});
  K3_FUZZ_CHECK(k3::net::bearer_authorized("", {}));
  if (m.r == k3::net::route::chat_completions || m.r == k3::net::route::completions) {
    try {
      const auto body = k3::net::parse_body(req.body());
      if (m.r == k3::net::route::chat_completions) (void)k3::net::parse_chat(body, true);
      else (void)k3::net::parse_completion(body);
    } catch (const k3::net::api_error& e) {
      K3_FUZZ_CHECK(e.status >= 400 && e.status < 500);
    }
  }
  return 0;
}
