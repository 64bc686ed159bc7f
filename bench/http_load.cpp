#include "bench/http_load.hpp"

#include <cstdlib>
#include <stdexcept>

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench/bench_util.hpp"
#include "runtime/chat/json.hpp"

namespace k3::bench {

http_target parse_url(const std::string& url) {
  std::string s = url;
  if (s.rfind("http://", 0) == 0) s = s.substr(7);
  else if (s.find("://") != std::string::npos) throw std::invalid_argument("--url: only http:// is supported");
  if (auto slash = s.find('/'); slash != std::string::npos) s.resize(slash);
  const auto colon = s.rfind(':');
  if (colon == std::string::npos) return {s, "80"};
  return {s.substr(0, colon), s.substr(colon + 1)};
}

int connect_to(const http_target& t) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (::getaddrinfo(t.host.c_str(), t.port.c_str(), &hints, &res) != 0 || !res)
    throw std::runtime_error("cannot resolve " + t.host);
  const int fd = ::socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  const int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
  ::freeaddrinfo(res);
  if (rc != 0) {
    ::close(fd);
    throw std::runtime_error("cannot connect to " + t.host + ":" + t.port);
  }
  return fd;
}

stream_sample stream_request(const http_target& t, const std::string& path, const std::string& body, const std::string& key) {
  stream_sample s;
  const double t0 = now_s();
  int fd = -1;
  try {
    fd = connect_to(t);
  } catch (const std::exception& e) {
    s.error = e.what();
    return s;
  }
  std::string req = "POST " + path + " HTTP/1.1\r\nHost: " + t.host + "\r\nConnection: close\r\nContent-Type: application/json\r\n";
  if (!key.empty()) req += "Authorization: Bearer " + key + "\r\n";
  req += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string buf;
  char tmp[16384];
  std::size_t scan = 0;
  double last = 0;
  bool header_ok = false, done = false;
  while (!done) {
    const auto n = ::recv(fd, tmp, sizeof tmp, 0);
    if (n <= 0) break;
    const double now = now_s();
    buf.append(tmp, static_cast<std::size_t>(n));
    if (!header_ok) {
      const auto h = buf.find("\r\n\r\n");
      if (h == std::string::npos) continue;
      if (buf.compare(9, 3, "200") != 0) {
        s.error = "HTTP " + buf.substr(9, 3) + ": " + buf.substr(h + 4, 200);
        break;
      }
      header_ok = true;
      scan = h + 4;
    }
    std::size_t at;
    while ((at = buf.find("data: ", scan)) != std::string::npos) {
      const auto end = buf.find("\n\n", at);
      if (end == std::string::npos) break;
      const std::string data = buf.substr(at + 6, end - at - 6);
      scan = end + 2;
      if (data == "[DONE]") {
        done = true;
        break;
      }
      if (data.find("\"usage\"") != std::string::npos && data.find("\"choices\":[]") != std::string::npos) {
        const auto v = json::parse(data);
        if (const auto* u = v.find("usage")) {
          if (const auto* c = u->find("completion_tokens")) s.out_tokens = std::atoll(c->s.c_str());
          if (const auto* p = u->find("prompt_tokens")) s.prompt_tokens = std::atoll(p->s.c_str());
          if (const auto* d = u->find("prompt_tokens_details"); d && d->is_object())
            if (const auto* c = d->find("cached_tokens")) s.cached_tokens = std::atoll(c->s.c_str());
        }
        continue;
      }
      if (data.find("\"error\"") != std::string::npos) {
        s.error = data;
        done = true;
        break;
      }
      if (last == 0) s.ttft = now - t0;
      else s.itl.push_back(now - last);
      last = now;
    }
  }
  ::close(fd);
  s.e2e = now_s() - t0;
  s.ok = done && s.error.empty() && s.out_tokens > 0;
  if (!s.ok && s.error.empty()) s.error = "stream ended early";
  return s;
}

std::string http_get(const http_target& t, const std::string& path, const std::string& key) {
  const int fd = connect_to(t);
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: " + t.host + "\r\nConnection: close\r\n";
  if (!key.empty()) req += "Authorization: Bearer " + key + "\r\n";
  req += "\r\n";
  ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string raw;
  char tmp[4096];
  for (;;) {
    const auto n = ::recv(fd, tmp, sizeof tmp, 0);
    if (n <= 0) break;
    raw.append(tmp, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return raw;
}

std::string first_model(const http_target& t, const std::string& key) {
  const auto raw = http_get(t, "/v1/models", key);
  const auto at = raw.find("\"id\":\"");
  if (at == std::string::npos) throw std::runtime_error("cannot read /v1/models: " + raw.substr(0, 200));
  return raw.substr(at + 6, raw.find('"', at + 6) - at - 6);
}

} // namespace k3::bench
