#pragma once
// Where an image_url part's bytes come from (spec vision.md §3.4), with the server's policy:
//   data:[<type>][;…];base64,<data>  always (strict base64; size capped by --max-image-bytes)
//   file:///path                      only under --allowed-local-media-path (resolved, no escape)
//   http(s)://host[:port]/…           only for hosts in --allowed-media-domains, every redirect
//                                     hop re-checked; addresses that resolve to loopback,
//                                     private, link-local, CGNAT, multicast or unspecified
//                                     ranges refused unless --media-allow-private-networks;
//                                     --media-fetch-timeout for the whole download
// Errors are api_errors naming the part (`param`): 400 malformed/disallowed/undecodable, 422
// upstream 4xx or too large, 502 upstream 5xx or unreachable, 504 timeout.
//
// media_fetcher downloads asynchronously on its own I/O thread (Beast HTTP client, OpenSSL for
// https with certificate and host-name verification): no thread waits for a download.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/server_config.hpp"
#include "net/openai_request.hpp"

namespace k3::net {

struct media_policy {
  std::vector<std::string> allowed_domains;
  std::string allowed_local_path;
  double fetch_timeout = 5;
  std::int64_t max_bytes = 20 << 20;
  bool allow_private = false;
  int max_redirects = 5;
};

/// The policy the server's flags describe.
[[nodiscard]] media_policy media_policy_of(const server_config& c);

/// True for an http:// or https:// URL (which needs media_fetcher).
[[nodiscard]] bool is_remote_url(std::string_view url) noexcept;

/// The bytes of a data: or file: URL; throws api_error (400/422) naming `param`. http(s) URLs
/// and other schemes are a 400 here (remote URLs go through media_fetcher first).
[[nodiscard]] std::string load_local_media(std::string_view url, const std::string& param, const media_policy& pol);

/// RFC 4648 base64 (standard alphabet, padding optional at the very end, no whitespace);
/// nullopt on any other character.
[[nodiscard]] std::optional<std::string> base64_decode(std::string_view in);

struct http_url {
  bool tls = false;
  std::string host, port, target;
};
/// Parses http(s)://host[:port][/path][?query] (userinfo refused, fragment dropped). Throws 400.
[[nodiscard]] http_url parse_http_url(std::string_view url, const std::string& param);
/// 400 naming --allowed-media-domains when `host` is not listed.
void check_allowed_host(const std::string& host, const media_policy& pol, const std::string& param);
/// Loopback, RFC 1918, link-local, CGNAT (100.64/10), unspecified, multicast, broadcast,
/// IPv6 ULA/link-local and IPv4-mapped forms of those.
[[nodiscard]] bool is_private_address(const std::string& ip);

class media_fetcher {
public:
  explicit media_fetcher(media_policy pol);
  ~media_fetcher();
  media_fetcher(const media_fetcher&) = delete;
  media_fetcher& operator=(const media_fetcher&) = delete;

  struct result {
    std::string bytes;
    std::optional<api_error> error;
  };
  /// Starts a download; `done` runs once, on the fetcher's thread.
  void fetch(const std::string& url, const std::string& param, std::function<void(result)> done);
  [[nodiscard]] const media_policy& policy() const noexcept { return pol_; }

  struct impl;

private:
  media_policy pol_;
  std::unique_ptr<impl> impl_;
};

} // namespace k3::net
