// A real `k3 serve` under hostile and unusual clients: pathological prompts never delay
// /health, the listener survives running out of descriptors, connection caps and timeouts,
// HEAD / HTTP/1.0 / Expect: 100-continue, auth details, request validation that names the
// field, metrics escaping, and a drain deadline that answers 503.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "runtime/chat/json.hpp"
#include "runtime/model/make_model.hpp"
#include "tests/model/model_fixture.hpp"
#include "tests/net/http_client.hpp"
#include "tests/support/child_process.hpp"

using namespace k3;
using test::http_request;

namespace {

struct server {
  explicit server(std::vector<std::string> extra = {}, const std::string& shell_prefix = "") : dir("hard") {
    model::make_model({}, dir.str());
    std::vector<std::string> args = {K3_BINARY, "serve", "--model", dir.str(), "--port", "0", "--kv-cache-memory", "67108864"};
    if (std::find(extra.begin(), extra.end(), "--served-model-name") == extra.end())
      args.insert(args.end(), {"--served-model-name", "Kimi-K3"});
    args.insert(args.end(), extra.begin(), extra.end());
    if (!shell_prefix.empty()) { // e.g. "ulimit -n 128": run through a shell, then exec the server
      std::string cmd = shell_prefix + " && exec";
      for (const auto& a : args) cmd += " '" + a + "'";
      args = {"/bin/bash", "-c", cmd};
    }
    proc = std::make_unique<test::child_process>(args);
    port = proc->port_after("127.0.0.1");
    INFO(proc->line());
    REQUIRE(port > 0);
  }
  test::temp_dir dir;
  std::unique_ptr<test::child_process> proc;
  int port = 0;
};

std::string param_of(const test::http_response& r) {
  const auto v = json::parse(r.body);
  const auto* p = v.find("error")->find("param");
  return p && p->is_string() ? p->s : "";
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace

TEST_CASE("hardening: /health answers within 100 ms while 2 MB single-character prompts are prepared", "[net][hardening]") {
  // One I/O thread: anything slow on it would show. The context is the model's full 1M tokens,
  // so the prompts are really encoded (then refused as too long, or queued), not cut by bytes.
  server s({"--http-threads", "1", "--max-model-len", "1048576", "--kv-cache-memory", "536870912"});
  const std::string big = "{\"prompt\":\"" + std::string(2 << 20, 'a') + "\",\"max_tokens\":1}";
  std::atomic<int> done{0};
  std::vector<int> statuses(3, 0);
  std::vector<std::thread> load;
  for (int i = 0; i < 3; ++i)
    load.emplace_back([&, i] {
      statuses[i] = http_request(s.port, "POST", i == 2 ? "/tokenize" : "/v1/completions", big).status;
      ++done;
    });
  double worst = 0;
  int probes = 0;
  const auto t_start = std::chrono::steady_clock::now();
  while (done < 3 && ms_since(t_start) < 60000) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto h = http_request(s.port, "GET", "/health", "", {}, 2000);
    worst = std::max(worst, ms_since(t0));
    CHECK(h.status == 200);
    ++probes;
  }
  for (auto& t : load) t.join();
  INFO("probes " << probes << ", slowest /health " << worst << " ms");
  CHECK(worst < 100.0);
  for (int st : statuses) CHECK((st == 400 || st == 200));
}

TEST_CASE("hardening: oversized prompts are refused from their byte length, before encoding", "[net][hardening]") {
  server s({"--max-model-len", "2048"});
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = http_request(s.port, "POST", "/v1/chat/completions",
                              "{\"messages\":[{\"role\":\"user\",\"content\":\"" + std::string(6 << 20, 'e') + "\"}]}");
  CHECK(r.status == 400);
  CHECK(r.body.find("context_length_exceeded") != std::string::npos);
  CHECK(r.body.find("maximum context length is 2048") != std::string::npos);
  CHECK(ms_since(t0) < 5000.0);
}

TEST_CASE("hardening: the listener keeps accepting after running out of file descriptors", "[net][hardening]") {
  // The issue's repro: ulimit -n 128, 150 idle connections, close them, /health must answer.
  server s({"--header-timeout", "30"}, "ulimit -n 128");
  std::vector<std::unique_ptr<test::raw_connection>> conns;
  for (int i = 0; i < 150; ++i) {
    try {
      conns.push_back(std::make_unique<test::raw_connection>(s.port));
    } catch (const std::exception&) {
    }
  }
  // Over the cap some got a 503 at once; the rest wait idle.
  int rejected = 0;
  for (auto& c : conns) {
    c->set_timeout(50);
    bool timed_out = false;
    const auto got = c->read_all(50, &timed_out);
    if (got.find(" 503 ") != std::string::npos) ++rejected;
  }
  INFO("rejected with 503: " << rejected);
  CHECK(rejected > 0);
  conns.clear();
  const auto h = http_request(s.port, "GET", "/health", "", {}, 3000);
  CHECK(h.status == 200);
}

TEST_CASE("hardening: --max-connections caps open connections with 503, timeouts close slow clients", "[net][hardening]") {
  server s({"--max-connections", "2", "--header-timeout", "0.3", "--timeout-keep-alive", "0.3"});
  SECTION("the third connection gets 503 and is closed") {
    test::raw_connection a(s.port), b(s.port);
    std::this_thread::sleep_for(std::chrono::milliseconds(100)); // both accepted before the third
    test::raw_connection c(s.port);
    bool timed_out = false;
    const auto got = c.read_all(2000, &timed_out);
    CHECK_FALSE(timed_out);
    CHECK(got.find("HTTP/1.1 503") == 0);
    CHECK(got.find("too_many_connections") != std::string::npos);
  }
  SECTION("a client that never finishes its headers is dropped after --header-timeout") {
    test::raw_connection a(s.port);
    a.send("GET /health HTTP/1.1\r\nHost: x\r\n"); // no blank line
    bool timed_out = false;
    const auto t0 = std::chrono::steady_clock::now();
    const auto got = a.read_all(5000, &timed_out);
    CHECK_FALSE(timed_out);
    CHECK(got.empty());
    CHECK(ms_since(t0) < 3000.0);
    // Slots are given back: new requests work.
    CHECK(http_request(s.port, "GET", "/health").status == 200);
  }
  SECTION("an idle keep-alive connection is closed after --timeout-keep-alive") {
    test::raw_connection a(s.port);
    a.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    bool timed_out = false;
    const auto got = a.read_all(5000, &timed_out);
    CHECK_FALSE(timed_out);
    CHECK(got.find("HTTP/1.1 200") == 0);
  }
}

TEST_CASE("hardening: HEAD, HTTP/1.0 streaming, Expect: 100-continue", "[net][hardening]") {
  server s;
  SECTION("HEAD /health sends headers only; the next keep-alive response is intact") {
    test::raw_connection a(s.port);
    a.send("HEAD /health HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    const auto got = a.read_all(5000);
    const auto first_end = got.find("\r\n\r\n");
    REQUIRE(first_end != std::string::npos);
    CHECK(got.find("HTTP/1.1 200") == 0);
    CHECK(got.find("Content-Length: 15") < first_end);
    const auto second = got.substr(first_end + 4);
    CHECK(second.find("HTTP/1.1 200") == 0); // no stray body between the two responses
    CHECK(second.find("{\"status\":\"ok\"}") != std::string::npos);
  }
  SECTION("an HTTP/1.0 client gets a close-delimited stream, not chunked encoding") {
    const std::string body = R"({"prompt":"Hi","max_tokens":4,"temperature":0,"stream":true})";
    test::raw_connection a(s.port);
    a.send("POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body);
    bool timed_out = false;
    const auto got = a.read_all(10000, &timed_out);
    CHECK_FALSE(timed_out); // the server closed the connection to end the body
    const auto hend = got.find("\r\n\r\n");
    REQUIRE(hend != std::string::npos);
    const auto head = got.substr(0, hend);
    CHECK(head.find("200 OK") != std::string::npos);
    CHECK(head.find("Transfer-Encoding") == std::string::npos);
    const auto rest = got.substr(hend + 4);
    CHECK(rest.rfind("data: ", 0) == 0); // the first SSE event, no chunk-size line
    CHECK(rest.find("data: [DONE]\n\n") != std::string::npos);
  }
  SECTION("Expect: 100-continue is answered before the body is sent") {
    const std::string body = R"({"prompt":"Hi"})";
    test::raw_connection a(s.port);
    a.send("POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nConnection: close\r\n"
           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n");
    a.set_timeout(2000);
    const auto interim = a.read_until("\r\n\r\n");
    CHECK(interim.find("HTTP/1.1 100 Continue") == 0);
    a.send(body);
    const auto got = a.read_all(5000);
    CHECK(got.find("HTTP/1.1 200") != std::string::npos);
    CHECK(got.find("\"tokens\"") != std::string::npos);
  }
}

TEST_CASE("hardening: auth scheme is case-insensitive, 401 says Bearer, /metrics and /health stay public", "[net][hardening]") {
  server s({"--api-key", "s3cret"});
  const std::string hi = R"({"prompt":"Hi","max_tokens":1})";
  CHECK(http_request(s.port, "POST", "/v1/completions", hi, {"Authorization: Bearer s3cret"}).status == 200);
  CHECK(http_request(s.port, "POST", "/v1/completions", hi, {"Authorization: bearer s3cret"}).status == 200);
  CHECK(http_request(s.port, "POST", "/v1/completions", hi, {"Authorization: BEARER   s3cret"}).status == 200);
  const auto no = http_request(s.port, "POST", "/v1/completions", hi);
  CHECK(no.status == 401);
  CHECK(no.headers.at("www-authenticate") == "Bearer");
  CHECK(http_request(s.port, "POST", "/v1/completions", hi, {"Authorization: Basic s3cret"}).status == 401);
  CHECK(http_request(s.port, "GET", "/metrics").status == 200);
  CHECK(http_request(s.port, "GET", "/health").status == 200);
}

TEST_CASE("hardening: tools and integer fields are validated by name", "[net][hardening]") {
  server s;
  auto post = [&](const std::string& b) { return http_request(s.port, "POST", "/v1/chat/completions", b); };
  const std::string m = R"("messages":[{"role":"user","content":"Hi"}],"max_tokens":2)";
  auto r = post("{" + m + R"(,"tools":[1]})");
  CHECK(r.status == 400);
  CHECK(param_of(r) == "tools[0]");
  r = post("{" + m + R"(,"tools":[{"type":"function"}]})");
  CHECK(r.status == 400);
  CHECK(param_of(r) == "tools[0].function");
  r = post("{" + m + R"(,"tools":[{"type":"function","function":{"name":"f","parameters":[]}}]})");
  CHECK(r.status == 400);
  CHECK(param_of(r) == "tools[0].function.parameters");
  r = post("{" + m + R"(,"tools":[{"type":"retrieval","function":{"name":"f"}}]})");
  CHECK(param_of(r) == "tools[0].type");
  r = post("{" + m + R"(,"top_k":4294967297})");
  CHECK(r.status == 400);
  CHECK(param_of(r) == "top_k");
  r = post("{" + m + R"(,"n":99999999999999999999})");
  CHECK(r.status == 400);
  CHECK(param_of(r) == "n");
  r = post(R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":4294967296})");
  CHECK(r.status == 400);
  CHECK(param_of(r) == "max_tokens");
  r = post("{" + m + R"(,"seed":18446744073709551616})");
  CHECK(r.status == 400);
  CHECK(param_of(r) == "seed");
  CHECK(post("{" + m + R"(,"seed":18446744073709551615})").status == 200);
  r = http_request(s.port, "POST", "/detokenize", R"({"tokens":[1, 4294967297]})");
  CHECK(r.status == 400);
  CHECK(param_of(r) == "tokens[1]");
}

TEST_CASE("hardening: metrics escape label values and count streamed responses", "[net][hardening]") {
  server s({"--served-model-name", "we\"ird\\name", "Kimi-K3"});
  const auto st = http_request(s.port, "POST", "/v1/completions", R"({"model":"Kimi-K3","prompt":"Hi","max_tokens":2,"stream":true})");
  REQUIRE(st.status == 200);
  const auto models = json::parse(http_request(s.port, "GET", "/v1/models").body);
  CHECK(models.find("data")->items.size() == 2u);
  const auto met = http_request(s.port, "GET", "/metrics");
  REQUIRE(met.status == 200);
  CHECK(met.body.find("model_name=\"we\\\"ird\\\\name\"") != std::string::npos);
  CHECK(met.body.find("k3:http_responses_total{model_name=\"we\\\"ird\\\\name\",status=\"200\"}") != std::string::npos);
  // promtool (Debian `prometheus`) checks the exposition when installed.
  if (std::system("command -v promtool >/dev/null 2>&1") == 0) {
    test::temp_dir d("prom");
    const auto f = d.str() + "/metrics.txt";
    std::ofstream(f) << met.body;
    CHECK(std::system(("promtool check metrics < '" + f + "' >/dev/null 2>&1").c_str()) == 0);
  } else {
    WARN("promtool not installed: exposition format not checked by promtool");
  }
}

TEST_CASE("hardening: a stream cut by the drain deadline ends with a 503 shutting_down error", "[net][hardening]") {
  server s({"--shutdown-timeout", "0.3", "--max-model-len", "32768"});
  test::raw_connection a(s.port);
  const std::string body = R"({"prompt":"Hi","max_tokens":30000,"ignore_eos":true,"stream":true})";
  a.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body);
  a.set_timeout(10000);
  a.read_until("data: ");
  s.proc->signal(SIGTERM);
  bool timed_out = false;
  const auto got = a.read_all(30000, &timed_out);
  CHECK_FALSE(timed_out);
  CHECK(got.find("\"code\":\"shutting_down\"") != std::string::npos);
  CHECK(got.find("internal_error") == std::string::npos);
  CHECK(got.find("data: [DONE]") != std::string::npos);
  CHECK(s.proc->wait() == 0);
}

TEST_CASE("hardening: the web page at /, --no-ui, CORS with --allowed-origins, WebSocket origins", "[net][hardening][web]") {
  const std::string ws_upgrade = "GET /v1/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                                 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";
  {
    server s;
    const auto page = http_request(s.port, "GET", "/", "", {"Accept-Encoding: gzip"});
    CHECK(page.status == 200);
    CHECK(page.headers.at("content-type") == "text/html; charset=utf-8");
    CHECK(page.headers.at("content-encoding") == "gzip");
    CHECK(page.headers.at("content-security-policy").find("script-src 'self'") != std::string::npos);
    const auto plain = http_request(s.port, "GET", "/");
    CHECK(plain.body.find("/ui/app.js") != std::string::npos);
    CHECK(http_request(s.port, "GET", "/", "", {"If-None-Match: " + plain.headers.at("etag")}).status == 304);
    CHECK(http_request(s.port, "HEAD", "/ui/app.css").status == 200);
    CHECK(http_request(s.port, "GET", "/ui/missing.js").status == 404);
    CHECK(http_request(s.port, "POST", "/", "{}").status == 404);
    // CORS is off by default: no Access-Control-* headers, OPTIONS is not a method of the API.
    const auto m = http_request(s.port, "GET", "/v1/models", "", {"Origin: https://other.example"});
    CHECK(m.status == 200);
    CHECK(m.headers.count("access-control-allow-origin") == 0);
    CHECK(http_request(s.port, "OPTIONS", "/v1/chat/completions", "", {"Origin: https://other.example"}).status == 405);
    // WebSocket: same-origin and Origin-less clients are accepted, other sites' pages are not.
    for (const auto& [origin, want] : std::vector<std::pair<std::string, std::string>>{
             {"", "101"}, {"Origin: http://127.0.0.1\r\n", "101"}, {"Origin: https://evil.example\r\n", "403"}}) {
      test::raw_connection c(s.port);
      c.set_timeout(10000);
      c.send(ws_upgrade + origin + "\r\n");
      const auto head = c.read_until("\r\n");
      INFO(origin << " -> " << head);
      CHECK(head.find(" " + want + " ") != std::string::npos);
    }
  }
  {
    server s({"--no-ui"});
    CHECK(http_request(s.port, "GET", "/").status == 404);
    CHECK(http_request(s.port, "GET", "/ui/app.js").status == 404);
    CHECK(http_request(s.port, "GET", "/v1/models").status == 200);
  }
  {
    server s({"--allowed-origins", "http://localhost:3000,https://app.example", "--api-key", "k"});
    const auto pre = http_request(s.port, "OPTIONS", "/v1/chat/completions", "",
                                  {"Origin: https://app.example", "Access-Control-Request-Method: POST",
                                   "Access-Control-Request-Headers: authorization, content-type"});
    CHECK(pre.status == 204); // no key needed: browsers never send credentials on a preflight
    CHECK(pre.headers.at("access-control-allow-origin") == "https://app.example");
    CHECK(pre.headers.at("access-control-allow-methods").find("POST") != std::string::npos);
    CHECK(pre.headers.at("access-control-allow-headers") == "authorization, content-type");
    const auto ok = http_request(s.port, "POST", "/v1/chat/completions",
                                 R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"stream":true})",
                                 {"Origin: http://localhost:3000", "Authorization: Bearer k"});
    CHECK(ok.status == 200);
    CHECK(ok.headers.at("access-control-allow-origin") == "http://localhost:3000");
    CHECK(ok.headers.at("vary").find("Origin") != std::string::npos);
    const auto denied = http_request(s.port, "GET", "/v1/models", "", {"Origin: http://localhost:3000"});
    CHECK(denied.status == 401); // the browser can read the 401 (CORS headers on errors too)
    CHECK(denied.headers.at("access-control-allow-origin") == "http://localhost:3000");
    const auto other = http_request(s.port, "GET", "/v1/models", "", {"Origin: https://evil.example", "Authorization: Bearer k"});
    CHECK(other.status == 200);
    CHECK(other.headers.count("access-control-allow-origin") == 0);
    test::raw_connection c(s.port);
    c.set_timeout(10000);
    c.send(ws_upgrade + "Origin: https://app.example\r\nAuthorization: Bearer k\r\n\r\n");
    CHECK(c.read_until("\r\n").find(" 101 ") != std::string::npos);
  }
}

TEST_CASE("hardening: a client that stops reading its stream is dropped after --write-timeout, its request cancelled", "[net][hardening]") {
  server s({"--write-timeout", "0.5", "--max-model-len", "65536"});
  // The kernel buffers a few MB of a stream nobody reads (the server's send buffer grows on
  // loopback) before a write blocks; 16 choices with 20 alternatives per token (~1 KB a chunk)
  // fill that in a few thousand tokens, far fewer than the 16 × 60000 asked for (without the
  // timeout the request would run on for minutes). A 4 KB receive window keeps the client's side small.
  test::raw_connection a(s.port, 4096);
  const std::string body = R"({"prompt":"Hi","max_tokens":60000,"temperature":0,"ignore_eos":true,"stream":true,"logprobs":20,"n":16})";
  a.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body);
  std::string m;
  const bool dropped = test::metrics_show(s.port,
                                          {"k3:http_requests_client_disconnected_total{model_name=\"Kimi-K3\"} 1",
                                           "k3:kda_state_slots_used{model_name=\"Kimi-K3\"} 0",
                                           "k3:num_requests_running{model_name=\"Kimi-K3\"} 0"},
                                          60000, &m);
  INFO(m);
  CHECK(dropped);
  // The server closed the connection: what the client reads now ends (not a timeout).
  bool timed_out = false;
  a.read_all(10000, &timed_out);
  CHECK_FALSE(timed_out);
  CHECK(http_request(s.port, "GET", "/health").status == 200);
}
