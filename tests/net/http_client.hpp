#pragma once
// A deliberately small blocking HTTP/1.1 client over a raw socket for the server tests (so the
// tests do not share code with the server they check): one request per connection
// ("Connection: close"), chunked responses de-chunked, SSE `data:` payloads split out.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace k3::test {

struct http_response {
  int status = 0;
  std::map<std::string, std::string> headers; ///< lower-case names
  std::string body;                           ///< de-chunked
  [[nodiscard]] std::vector<std::string> sse_data() const;
};

/// Sends one request; an empty body sends no Content-Type. Throws std::runtime_error on I/O,
/// and when timeout_ms > 0 and the response has not fully arrived within it.
http_response http_request(int port, const std::string& method, const std::string& target, const std::string& body = "",
                           const std::vector<std::string>& extra_headers = {}, int timeout_ms = 0);
/// Parses a raw response (status line, headers, body de-chunked when chunked).
http_response parse_response(const std::string& raw);

/// Polls GET /metrics (each poll a real request, no sleeps) until its body holds every line of
/// `lines`, or timeout_ms passes. Returns whether they all showed; `last` gets the final body
/// (for the failure message).
bool metrics_show(int port, const std::vector<std::string>& lines, int timeout_ms, std::string* last = nullptr);

/// A connection the test can read from partially and then drop (disconnect tests).
class raw_connection {
public:
  /// rcvbuf > 0: the socket's receive buffer (SO_RCVBUF) in bytes, for a client that stops
  /// reading and should fill the server's send path quickly.
  explicit raw_connection(int port, int rcvbuf = 0);
  ~raw_connection();
  void send(const std::string& data);
  /// Reads until `needle` has been seen (or the peer closes); returns everything read.
  std::string read_until(const std::string& needle);
  /// Reads until the peer closes (or timeout_ms passes: then `timed_out` is set).
  std::string read_all(int timeout_ms, bool* timed_out = nullptr);
  /// Receive timeout for later reads (0: none).
  void set_timeout(int ms);
  void close();

private:
  int fd_ = -1;
  std::string buf_;
};

} // namespace k3::test
