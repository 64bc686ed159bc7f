#include "tests/net/http_client.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <stdexcept>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

namespace k3::test {
namespace {

int connect_to(int port, int rcvbuf = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  // Set before connect, so the advertised window stays small from the handshake on.
  if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    throw std::runtime_error("connect to 127.0.0.1:" + std::to_string(port) + " failed");
  }
  return fd;
}

void send_all(int fd, const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    const auto n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) throw std::runtime_error("send failed");
    off += static_cast<std::size_t>(n);
  }
}

std::string dechunk(const std::string& b) {
  std::string out;
  std::size_t i = 0;
  while (i < b.size()) {
    const auto eol = b.find("\r\n", i);
    if (eol == std::string::npos) break;
    const std::size_t n = std::stoul(b.substr(i, eol - i), nullptr, 16);
    if (n == 0) break;
    out += b.substr(eol + 2, n);
    i = eol + 2 + n + 2;
  }
  return out;
}

void set_rcv_timeout(int fd, int ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

} // namespace

std::vector<std::string> http_response::sse_data() const {
  std::vector<std::string> out;
  std::size_t i = 0;
  while ((i = body.find("data: ", i)) != std::string::npos) {
    const auto end = body.find("\n\n", i);
    out.push_back(body.substr(i + 6, end - i - 6));
    i = end == std::string::npos ? body.size() : end + 2;
  }
  return out;
}


http_response http_request(int port, const std::string& method, const std::string& target, const std::string& body,
                           const std::vector<std::string>& extra, int timeout_ms) {
  const int fd = connect_to(port);
  if (timeout_ms > 0) set_rcv_timeout(fd, timeout_ms);
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const auto& h : extra) req += h + "\r\n";
  if (!body.empty() || method == "POST")
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  send_all(fd, req);
  std::string raw;
  char buf[8192];
  for (;;) {
    const auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      ::close(fd);
      throw std::runtime_error("no complete response within " + std::to_string(timeout_ms) + " ms");
    }
    if (n <= 0) break;
    raw.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return parse_response(raw);
}

http_response parse_response(const std::string& raw) {
  http_response r;
  const auto hend = raw.find("\r\n\r\n");
  if (hend == std::string::npos) throw std::runtime_error("no HTTP response header");
  r.status = std::stoi(raw.substr(9, 3));
  std::size_t i = raw.find("\r\n") + 2;
  while (i < hend) {
    const auto eol = raw.find("\r\n", i);
    const auto line = raw.substr(i, eol - i);
    const auto colon = line.find(':');
    std::string k = line.substr(0, colon);
    std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    r.headers[k] = line.substr(colon + 2);
    i = eol + 2;
  }
  r.body = raw.substr(hend + 4);
  if (r.headers["transfer-encoding"] == "chunked") r.body = dechunk(r.body);
  return r;
}

bool metrics_show(int port, const std::vector<std::string>& lines, int timeout_ms, std::string* last) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const std::string m = http_request(port, "GET", "/metrics").body;
    const bool all = std::all_of(lines.begin(), lines.end(), [&](const std::string& l) { return m.find(l) != std::string::npos; });
    if (last) *last = m;
    if (all) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
}

raw_connection::raw_connection(int port, int rcvbuf) : fd_(connect_to(port, rcvbuf)) {}
raw_connection::~raw_connection() { close(); }
void raw_connection::send(const std::string& d) { send_all(fd_, d); }
std::string raw_connection::read_until(const std::string& needle) {
  char buf[4096];
  while (buf_.find(needle) == std::string::npos) {
    const auto n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) break;
    buf_.append(buf, static_cast<std::size_t>(n));
  }
  return buf_;
}
std::string raw_connection::read_all(int timeout_ms, bool* timed_out) {
  set_timeout(timeout_ms);
  char buf[4096];
  if (timed_out) *timed_out = false;
  for (;;) {
    const auto n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (timed_out) *timed_out = true;
      break;
    }
    if (n <= 0) break;
    buf_.append(buf, static_cast<std::size_t>(n));
  }
  return buf_;
}
void raw_connection::set_timeout(int ms) { set_rcv_timeout(fd_, ms); }
void raw_connection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

} // namespace k3::test
