#include "net/web_assets.hpp"

#include <cctype>
#include <cstdlib>

namespace k3::net {

const web_asset* find_web_asset(std::string_view path) {
  std::string_view name;
  if (path == "/" || path == "/index.html") name = "index.html";
  else if (path.rfind("/ui/", 0) == 0) name = path.substr(4);
  else return nullptr;
  if (name.empty()) return nullptr;
  for (const auto& a : web_assets())
    if (a.name == name) return &a;
  return nullptr;
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

} // namespace

bool accepts_gzip(std::string_view header) {
  // RFC 9110 §12.5.3: a list of codings with optional q-values; `*` covers unnamed codings.
  bool gzip = false, star = false, gzip_named = false;
  while (!header.empty()) {
    const auto comma = header.find(',');
    auto item = trim(header.substr(0, comma));
    header = comma == std::string_view::npos ? std::string_view{} : header.substr(comma + 1);
    double q = 1.0;
    if (const auto semi = item.find(';'); semi != std::string_view::npos) {
      auto params = item.substr(semi + 1);
      item = trim(item.substr(0, semi));
      params = trim(params);
      if (params.size() >= 2 && (params[0] == 'q' || params[0] == 'Q') && params[1] == '=') {
        const std::string v(trim(params.substr(2)));
        char* end = nullptr;
        q = std::strtod(v.c_str(), &end);
        if (end == v.c_str()) q = 1.0;
      }
    }
    if (iequals(item, "gzip") || iequals(item, "x-gzip")) {
      gzip_named = true;
      gzip = q > 0;
    } else if (item == "*") {
      star = q > 0;
    }
  }
  return gzip_named ? gzip : star;
}

std::string_view web_csp() {
  return "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
         "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
}

web_response serve_web_asset(const web_asset& a, std::string_view accept_encoding, std::string_view if_none_match) {
  web_response r;
  const bool gz = accepts_gzip(accept_encoding) && a.gz.size() < a.raw.size();
  r.headers = {{"Content-Type", std::string(a.type)},
               // Revalidate every time (a 304 costs one round trip); a new build changes the ETag.
               {"Cache-Control", "no-cache"},
               {"ETag", std::string(a.etag)},
               {"Vary", "Accept-Encoding"},
               {"Content-Security-Policy", std::string(web_csp())},
               {"X-Content-Type-Options", "nosniff"},
               {"Referrer-Policy", "no-referrer"},
               {"X-Frame-Options", "DENY"}};
  // If-None-Match: a list of entity tags, or *; weak comparison (RFC 9110 §13.1.2).
  bool match = false;
  for (std::string_view rest = if_none_match; !rest.empty() && !match;) {
    const auto comma = rest.find(',');
    auto tag = trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (tag.rfind("W/", 0) == 0) tag.remove_prefix(2);
    match = tag == "*" || tag == a.etag;
  }
  if (match) {
    r.status = 304;
    return r;
  }
  if (gz) r.headers.emplace_back("Content-Encoding", "gzip");
  const auto& bytes = gz ? a.gz : a.raw;
  r.body.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return r;
}

} // namespace k3::net
