#pragma once
// The web playground's files, embedded in the binary at build time (cmake/EmbedWebAssets.cmake
// over net/web/), and how they are served: content type, gzip when the client accepts it, an
// ETag for revalidation, and the security headers every page response carries.
//
// No Beast here: the HTTP session turns a web_response into its reply; tests call it directly.

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace k3::net {

struct web_asset {
  std::string_view name; ///< file name under net/web/ (index.html is served at /)
  std::string_view type; ///< Content-Type
  std::span<const unsigned char> raw, gz;
  std::string_view etag; ///< quoted, from the content hash
};

/// Every embedded file (generated source).
[[nodiscard]] std::span<const web_asset> web_assets();

/// The asset a GET path names: "/" → index.html, "/ui/NAME" → NAME; nullptr otherwise.
[[nodiscard]] const web_asset* find_web_asset(std::string_view path);

/// Whether an Accept-Encoding header value accepts gzip (q-values honoured: `gzip;q=0` refuses).
[[nodiscard]] bool accepts_gzip(std::string_view accept_encoding);

struct web_response {
  int status = 200;                                      ///< 200 or 304
  std::string body;                                      ///< empty for 304
  std::vector<std::pair<std::string, std::string>> headers;
};

/// The response to GET `asset` given the request's Accept-Encoding and If-None-Match.
[[nodiscard]] web_response serve_web_asset(const web_asset& asset, std::string_view accept_encoding, std::string_view if_none_match);

/// The page's Content-Security-Policy: scripts, styles and connections to this origin only, no
/// inline script, no framing, images from data:/blob: (pasted images) — the model's output is
/// untrusted and never becomes markup.
[[nodiscard]] std::string_view web_csp();

} // namespace k3::net
