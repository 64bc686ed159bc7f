#include "bench/serve_bench.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench/bench_util.hpp"
#include "runtime/chat/json.hpp"

namespace k3::bench {
namespace {

struct target {
  std::string host, port;
};

target parse_url(const std::string& url) {
  std::string s = url;
  if (s.rfind("http://", 0) == 0) s = s.substr(7);
  else if (s.find("://") != std::string::npos) throw std::invalid_argument("--url: only http:// is supported");
  if (auto slash = s.find('/'); slash != std::string::npos) s.resize(slash);
  const auto colon = s.rfind(':');
  if (colon == std::string::npos) return {s, "80"};
  return {s.substr(0, colon), s.substr(colon + 1)};
}

int connect_to(const target& t) {
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

struct sample {
  bool ok = false;
  double ttft = 0, e2e = 0;
  std::vector<double> itl;
  int out_tokens = 0;
  std::string error;
};

/// One streaming request; timestamps are taken when each SSE event arrives.
sample one_request(const target& t, const std::string& body, const std::string& key) {
  sample s;
  const double t0 = now_s();
  int fd = -1;
  try {
    fd = connect_to(t);
  } catch (const std::exception& e) {
    s.error = e.what();
    return s;
  }
  std::string req = "POST /v1/completions HTTP/1.1\r\nHost: " + t.host + "\r\nConnection: close\r\nContent-Type: application/json\r\n";
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
      if (data.find("\"usage\"") != std::string::npos) {
        const auto v = json::parse(data);
        if (const auto* u = v.find("usage"))
          if (const auto* c = u->find("completion_tokens")) s.out_tokens = std::atoi(c->s.c_str());
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

struct stats3 {
  double mean = 0, median = 0, p99 = 0;
};
stats3 summarize(std::vector<double> v) {
  stats3 s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  s.median = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, static_cast<std::size_t>(0.99 * static_cast<double>(v.size())))];
  return s;
}

} // namespace

int run_serve_benchmark(const serve_bench_options& o) {
  const auto t = parse_url(o.url);
  std::string model = o.model;
  if (model.empty()) { // ask the server
    const int fd = connect_to(t);
    std::string req = "GET /v1/models HTTP/1.1\r\nHost: " + t.host + "\r\nConnection: close\r\n";
    if (!o.api_key.empty()) req += "Authorization: Bearer " + o.api_key + "\r\n";
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
    const auto at = raw.find("\"id\":\"");
    if (at == std::string::npos) throw std::runtime_error("cannot read /v1/models: " + raw.substr(0, 200));
    model = raw.substr(at + 6, raw.find('"', at + 6) - at - 6);
  }
  std::mt19937 rng(o.seed);
  std::vector<std::string> bodies;
  for (int i = 0; i < o.num_prompts; ++i) {
    std::string ids;
    for (int j = 0; j < o.input_len; ++j) ids += (j ? "," : "") + std::to_string(rng() % static_cast<unsigned>(o.vocab_hint));
    bodies.push_back("{\"model\":" + json::quote(model) + ",\"prompt\":[" + ids + "],\"max_tokens\":" + std::to_string(o.output_len) +
                     ",\"temperature\":0,\"ignore_eos\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
  }
  std::vector<sample> samples(static_cast<std::size_t>(o.num_prompts));
  const double t0 = now_s();
  if (o.request_rate > 0) {
    std::exponential_distribution<double> gap(o.request_rate);
    std::vector<std::thread> th;
    double at = 0;
    for (int i = 0; i < o.num_prompts; ++i) {
      std::this_thread::sleep_until(std::chrono::steady_clock::now() + std::chrono::duration<double>(t0 + at - now_s()));
      th.emplace_back([&, i] { samples[static_cast<std::size_t>(i)] = one_request(t, bodies[static_cast<std::size_t>(i)], o.api_key); });
      at += gap(rng);
    }
    for (auto& x : th) x.join();
  } else {
    std::atomic<int> next{0};
    std::vector<std::thread> th;
    for (int w = 0; w < std::max(1, o.max_concurrency); ++w)
      th.emplace_back([&] {
        for (int i; (i = next++) < o.num_prompts;) samples[static_cast<std::size_t>(i)] = one_request(t, bodies[static_cast<std::size_t>(i)], o.api_key);
      });
    for (auto& x : th) x.join();
  }
  const double dur = now_s() - t0;
  int ok = 0;
  std::int64_t out_tok = 0;
  std::vector<double> ttft, tpot, itl, e2e;
  std::string first_error;
  for (const auto& s : samples) {
    if (!s.ok) {
      if (first_error.empty()) first_error = s.error;
      continue;
    }
    ++ok;
    out_tok += s.out_tokens;
    ttft.push_back(s.ttft * 1e3);
    e2e.push_back(s.e2e * 1e3);
    if (s.out_tokens > 1) tpot.push_back((s.e2e - s.ttft) / (s.out_tokens - 1) * 1e3);
    for (double g : s.itl) itl.push_back(g * 1e3);
  }
  std::printf("============ Serving Benchmark Result ============\n");
  std::printf("%-40s %s\n", "Target:", o.url.c_str());
  std::printf("%-40s %s\n", "Load:", o.request_rate > 0 ? ("request rate " + fmt(o.request_rate, 1) + "/s").c_str()
                                                         : ("max concurrency " + std::to_string(o.max_concurrency)).c_str());
  std::printf("%-40s %d x (%d in, %d out)\n", "Requests:", o.num_prompts, o.input_len, o.output_len);
  std::printf("%-40s %d\n", "Successful requests:", ok);
  std::printf("%-40s %.2f\n", "Benchmark duration (s):", dur);
  std::printf("%-40s %.2f\n", "Request throughput (req/s):", ok / dur);
  std::printf("%-40s %.2f\n", "Output token throughput (tok/s):", static_cast<double>(out_tok) / dur);
  std::printf("%-40s %.2f\n", "Total token throughput (tok/s):", (static_cast<double>(out_tok) + ok * o.input_len) / dur);
  auto row = [](const char* name, const stats3& s) {
    std::printf("%-10s mean %9.2f   median %9.2f   p99 %9.2f\n", name, s.mean, s.median, s.p99);
  };
  std::printf("---------------- latencies (ms) -----------------\n");
  row("TTFT", summarize(ttft));
  row("TPOT", summarize(tpot));
  row("ITL", summarize(itl));
  row("E2E", summarize(e2e));
  if (!first_error.empty()) std::printf("first error: %s\n", first_error.c_str());
  return ok == o.num_prompts ? 0 : 1;
}

} // namespace k3::bench
