// The web page's serving rules without a server: asset lookup, Accept-Encoding q-values,
// ETag revalidation, the security headers, CORS origin matching and the WebSocket origin rule.
#include <catch2/catch.hpp>

#include <string>

#include "net/routes.hpp"
#include "net/web_assets.hpp"

using namespace k3::net;

namespace {
std::string header(const web_response& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return "";
}
} // namespace

TEST_CASE("web: the page and its files are embedded and found by path", "[net][web]") {
  const auto* index = find_web_asset("/");
  REQUIRE(index);
  CHECK(index->name == "index.html");
  CHECK(index->type.rfind("text/html", 0) == 0);
  CHECK(find_web_asset("/index.html") == index);
  for (const char* f : {"/ui/app.js", "/ui/markdown.js", "/ui/app.css"}) {
    INFO(f);
    const auto* a = find_web_asset(f);
    REQUIRE(a);
    CHECK(!a->raw.empty());
    CHECK(a->gz.size() < a->raw.size()); // text compresses
  }
  CHECK(find_web_asset("/ui/") == nullptr);
  CHECK(find_web_asset("/ui/../index.html") == nullptr);
  CHECK(find_web_asset("/app.js") == nullptr);
  CHECK(find_web_asset("/v1/models") == nullptr);
  // No inline script anywhere in the page: the CSP forbids it, so it would not run anyway.
  const std::string html(reinterpret_cast<const char*>(index->raw.data()), index->raw.size());
  CHECK(html.find("<script>") == std::string::npos);
  CHECK(html.find("onclick") == std::string::npos);
}

TEST_CASE("web: Accept-Encoding with q-values", "[net][web]") {
  CHECK(accepts_gzip("gzip"));
  CHECK(accepts_gzip("gzip, deflate, br"));
  CHECK(accepts_gzip("deflate, GZIP;q=0.5"));
  CHECK(accepts_gzip("*"));
  CHECK(accepts_gzip("br;q=1, *;q=0.1"));
  CHECK_FALSE(accepts_gzip(""));
  CHECK_FALSE(accepts_gzip("identity"));
  CHECK_FALSE(accepts_gzip("gzip;q=0"));
  CHECK_FALSE(accepts_gzip("gzip;q=0.000, *"));
  CHECK_FALSE(accepts_gzip("*;q=0"));
  CHECK_FALSE(accepts_gzip("br"));
}

TEST_CASE("web: gzip, ETag revalidation and the security headers", "[net][web]") {
  const auto& a = *find_web_asset("/ui/app.js");
  const auto plain = serve_web_asset(a, "", "");
  CHECK(plain.status == 200);
  CHECK(plain.body.size() == a.raw.size());
  CHECK(header(plain, "Content-Encoding").empty());
  const auto gz = serve_web_asset(a, "gzip, br", "");
  CHECK(header(gz, "Content-Encoding") == "gzip");
  CHECK(gz.body.size() == a.gz.size());
  CHECK(static_cast<unsigned char>(gz.body[0]) == 0x1f);
  CHECK(static_cast<unsigned char>(gz.body[1]) == 0x8b);
  for (const auto* r : {&plain, &gz}) {
    CHECK(header(*r, "Content-Type") == "text/javascript; charset=utf-8");
    CHECK(header(*r, "Vary") == "Accept-Encoding");
    CHECK(header(*r, "X-Content-Type-Options") == "nosniff");
    CHECK(header(*r, "Cache-Control") == "no-cache");
    const auto csp = header(*r, "Content-Security-Policy");
    CHECK(csp.find("default-src 'none'") != std::string::npos);
    CHECK(csp.find("script-src 'self'") != std::string::npos);
    CHECK(csp.find("unsafe-inline") == std::string::npos);
    CHECK(csp.find("frame-ancestors 'none'") != std::string::npos);
  }
  const std::string etag(a.etag);
  CHECK(etag.size() > 2);
  CHECK(serve_web_asset(a, "", etag).status == 304);
  CHECK(serve_web_asset(a, "", "W/" + etag).status == 304);
  CHECK(serve_web_asset(a, "", "\"other\", " + etag).status == 304);
  CHECK(serve_web_asset(a, "", "*").status == 304);
  CHECK(serve_web_asset(a, "", "\"other\"").status == 200);
  CHECK(serve_web_asset(a, "", etag).body.empty());
}

TEST_CASE("web: CORS origins and the WebSocket origin rule", "[net][web]") {
  const std::vector<std::string> none, some = {"http://localhost:3000", "https://app.example"}, any = {"*"};
  CHECK(cors_allow_origin("http://localhost:3000", none).empty());
  CHECK(cors_allow_origin("http://localhost:3000", some) == "http://localhost:3000");
  CHECK(cors_allow_origin("https://app.example", some) == "https://app.example");
  CHECK(cors_allow_origin("https://evil.example", some).empty());
  CHECK(cors_allow_origin("http://localhost:3001", some).empty());
  CHECK(cors_allow_origin("https://anything.example", any) == "https://anything.example");
  CHECK(cors_allow_origin("", any).empty());
  CHECK(cors_allow_origin("null", any).empty()); // sandboxed frames and file: pages
  CHECK(websocket_origin_allowed("", "127.0.0.1:8000", none));                  // non-browser client
  CHECK(websocket_origin_allowed("http://127.0.0.1:8000", "127.0.0.1:8000", none)); // the page itself
  CHECK(websocket_origin_allowed("http://LOCALHOST:8000", "localhost:8000", none));
  CHECK_FALSE(websocket_origin_allowed("https://evil.example", "127.0.0.1:8000", none));
  CHECK_FALSE(websocket_origin_allowed("http://127.0.0.1:8001", "127.0.0.1:8000", none));
  CHECK(websocket_origin_allowed("https://app.example", "127.0.0.1:8000", some));
}
