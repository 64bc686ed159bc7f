#include "net/routes.hpp"

#include <cctype>

namespace k3::net {

bool bearer_authorized(std::string_view header, const std::vector<std::string>& keys) {
  if (keys.empty()) return true;
  constexpr std::string_view bearer = "bearer";
  if (header.size() <= bearer.size()) return false;
  for (std::size_t i = 0; i < bearer.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(header[i])) != bearer[i]) return false;
  std::size_t at = bearer.size();
  if (header[at] != ' ') return false;
  while (at < header.size() && header[at] == ' ') ++at;
  std::string_view got = header.substr(at);
  while (!got.empty() && (got.back() == ' ' || got.back() == '\t')) got.remove_suffix(1);
  bool ok = false;
  for (const auto& k : keys) {
    unsigned diff = static_cast<unsigned>(got.size() ^ k.size());
    for (std::size_t i = 0; i < k.size(); ++i) diff |= static_cast<unsigned>(k[i]) ^ static_cast<unsigned>(i < got.size() ? got[i] : 0);
    ok |= diff == 0;
  }
  return ok;
}

std::string cors_allow_origin(std::string_view origin, const std::vector<std::string>& allowed) {
  if (origin.empty() || allowed.empty() || origin == "null") return "";
  for (const auto& a : allowed)
    if (a == "*" || a == origin) return std::string(origin);
  return "";
}

bool websocket_origin_allowed(std::string_view origin, std::string_view host, const std::vector<std::string>& allowed) {
  if (origin.empty()) return true;
  if (!cors_allow_origin(origin, allowed).empty()) return true;
  const auto sep = origin.find("://");
  if (sep == std::string_view::npos || host.empty()) return false;
  const auto authority = origin.substr(sep + 3);
  if (authority.size() != host.size()) return false;
  for (std::size_t i = 0; i < host.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(authority[i])) != std::tolower(static_cast<unsigned char>(host[i]))) return false;
  return true;
}

route_match match_route(std::string_view method, std::string_view target, bool upgrade) {
  const std::string_view path = target.substr(0, target.find('?'));
  route_match m;
  struct entry {
    std::string_view path;
    route r;
    std::string_view method;
    bool key;
  };
  static constexpr entry table[] = {
      {"/health", route::health, "GET", false},          {"/metrics", route::metrics, "GET", false},
      {"/v1/models", route::models, "GET", true},        {"/version", route::version, "GET", true},
      {"/tokenize", route::tokenize, "POST", true},      {"/detokenize", route::detokenize, "POST", true},
      {"/v1/chat/completions", route::chat_completions, "POST", true},
      {"/v1/chat/completions/render", route::render, "POST", true},
      {"/v1/completions", route::completions, "POST", true},
  };
  if (upgrade) {
    if (path != "/v1/ws") return {route::none, true, 404, "WebSocket endpoint is /v1/ws"};
    return {route::websocket, true, 0, ""};
  }
  for (const auto& e : table) {
    if (path != e.path) continue;
    const bool ok = method == e.method || (e.method == "GET" && method == "HEAD");
    if (!ok) return {route::none, e.key, 405, "use " + std::string(e.method) + " for " + std::string(path)};
    return {e.r, e.key, 0, ""};
  }
  return {route::none, true, 404, "No route for " + std::string(method) + " " + std::string(path)};
}

} // namespace k3::net
