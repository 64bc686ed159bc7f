// WebSocket endpoint /v1/ws of a real `k3 serve`: several requests on one socket, cancel.
#include <catch2/catch.hpp>

#include <map>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include "runtime/chat/json.hpp"
#include "runtime/model/make_model.hpp"
#include "tests/model/model_fixture.hpp"
#include "tests/support/child_process.hpp"

using namespace k3;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = boost::asio::ip::tcp;

namespace {

/// Reads the socket's messages, all for request `id`, up to its "done"; returns the chunks. An
/// error fails the test at once (an error comes without "done": waiting would hang).
std::vector<json::value> replies_until_done(websocket::stream<tcp::socket>& ws, const std::string& id) {
  std::vector<json::value> out;
  for (;;) {
    beast::flat_buffer buf;
    ws.read(buf);
    const std::string text = beast::buffers_to_string(buf.data());
    INFO(text.substr(0, 300));
    auto v = json::parse(text);
    REQUIRE(v.find("request_id")->s == id);
    REQUIRE(!v.find("error"));
    if (v.find("done")) return out;
    out.push_back(std::move(v));
  }
}

} // namespace

TEST_CASE("server: WebSocket carries concurrent requests and cancels", "[net]") {
  test::temp_dir d("ws");
  model::make_model({}, d.str());
  // c must still be running when its cancel arrives, on any machine: the demo model decodes
  // thousands of tokens a second, so c asks for 60000 (tens of seconds of decoding at the
  // least) and only a working cancel ends it early.
  test::child_process srv({K3_BINARY, "serve", "--model", d.str(), "--port", "0", "--max-model-len", "65536",
                           "--kv-cache-memory", "67108864"});
  const int port = srv.port_after("127.0.0.1");
  REQUIRE(port > 0);
  boost::asio::io_context ioc;
  tcp::resolver res(ioc);
  websocket::stream<tcp::socket> ws(ioc);
  boost::asio::connect(ws.next_layer(), res.resolve("127.0.0.1", std::to_string(port)));
  ws.handshake("127.0.0.1", "/v1/ws");
  auto send = [&](const std::string& s) { ws.write(boost::asio::buffer(s)); };
  send(R"({"type":"chat.completions","id":"a","body":{"messages":[{"role":"user","content":"Hi"}],"max_tokens":5,"temperature":0,"stream_options":{"include_usage":true}}})");
  send(R"({"type":"completions","id":"b","body":{"prompt":"Hello","max_tokens":3,"temperature":0}})");
  send(R"({"type":"chat.completions","id":"c","body":{"messages":[{"role":"user","content":"Hi"}],"max_tokens":60000,"temperature":0,"ignore_eos":true,"stream_options":{"include_usage":true}}})");
  send(R"({"type":"chat.completions","id":"bad","body":{"messages":[{"role":"user","content":"Hi"}],"temperature":"hot"}})");
  std::map<std::string, std::vector<json::value>> got;
  std::map<std::string, bool> done;
  bool cancelled = false;
  while (done.size() < 3 || !got.count("bad")) {
    beast::flat_buffer buf;
    ws.read(buf);
    auto v = json::parse(beast::buffers_to_string(buf.data()));
    const std::string id = v.find("request_id")->s;
    if (v.find("done")) done[id] = true;
    else got[id].push_back(std::move(v));
    // The role chunk comes with c's first token, whatever the text: cancel then, so the test
    // does not depend on how much of the demo model's output the reply parser holds back.
    if (id == "c" && !cancelled && !got["c"].empty()) {
      send(R"({"type":"cancel","id":"c"})");
      cancelled = true;
    }
  }
  // a: role chunk first, finish_reason length, then the usage chunk.
  REQUIRE(got["a"].size() >= 3u);
  CHECK(got["a"].front().find("choices")->items[0].find("delta")->find("role")->s == "assistant");
  CHECK(got["a"].back().find("usage")->find("completion_tokens")->s == "5");
  CHECK(got["a"][got["a"].size() - 2].find("choices")->items[0].find("finish_reason")->s == "length");
  // b: a text completion stream.
  CHECK(got["b"].back().find("object")->s == "text_completion");
  CHECK(got["b"].back().find("choices")->items[0].find("finish_reason")->s == "length");
  // c: cancelled long before its 60000 tokens (the tokens decoded while the cancel was in
  // flight still count; a fast machine may decode a few hundred of them).
  REQUIRE(got["c"].size() >= 3u); // role, finish, usage
  CHECK(got["c"][got["c"].size() - 2].find("choices")->items[0].find("finish_reason")->s == "abort");
  CHECK(std::stoi(got["c"].back().find("usage")->find("completion_tokens")->s) < 6000);
  // bad: an OpenAI error object naming the field, the socket stays usable.
  REQUIRE(got["bad"].size() == 1u);
  CHECK(got["bad"][0].find("error")->find("param")->s == "temperature");
  // A cancel that arrives after its request finished cancels nothing: the id's next request
  // (ids may be reused once their request is done) runs to its end.
  send(R"({"type":"cancel","id":"a"})");
  send(R"({"type":"chat.completions","id":"a","body":{"messages":[{"role":"user","content":"Hi"}],"max_tokens":5,"temperature":0,"stream_options":{"include_usage":true}}})");
  const auto again = replies_until_done(ws, "a");
  REQUIRE(again.size() >= 3u);
  CHECK(again.back().find("usage")->find("completion_tokens")->s == "5");
  CHECK(again[again.size() - 2].find("choices")->items[0].find("finish_reason")->s == "length");
  // A cancel sent right behind a request that takes a while to prepare (a 20000-word prompt)
  // usually overtakes its preparation: the request then ends before it starts (only "done"),
  // else it is cancelled running. Either way it ends long before its 20000 tokens.
  std::string words;
  for (int i = 0; i < 20000; ++i) words += "hi ";
  send(R"({"type":"completions","id":"p","body":{"prompt":")" + words +
       R"(","max_tokens":20000,"temperature":0,"ignore_eos":true,"stream_options":{"include_usage":true}}})");
  send(R"({"type":"cancel","id":"p"})");
  const auto p = replies_until_done(ws, "p");
  if (!p.empty()) {
    REQUIRE(p.size() >= 2u);
    CHECK(p[p.size() - 2].find("choices")->items[0].find("finish_reason")->s == "abort");
    CHECK(std::stoi(p.back().find("usage")->find("completion_tokens")->s) < 2000);
  }
  ws.close(websocket::close_code::normal);
}

#include "tests/net/http_client.hpp"

TEST_CASE("server: a WebSocket client that stops reading is dropped after --write-timeout, its requests cancelled", "[net]") {
  test::temp_dir d("ws_slow");
  model::make_model({}, d.str());
  test::child_process srv({K3_BINARY, "serve", "--model", d.str(), "--port", "0", "--max-model-len", "65536",
                           "--kv-cache-memory", "67108864", "--write-timeout", "0.5", "--served-model-name", "Kimi-K3"});
  const int port = srv.port_after("127.0.0.1");
  REQUIRE(port > 0);
  boost::asio::io_context ioc;
  tcp::resolver res(ioc);
  websocket::stream<tcp::socket> ws(ioc);
  // The kernel buffers a few MB of what nobody reads before a write blocks; 20 alternatives per
  // token make every chunk ~1 KB. A 4 KB receive window (set before connecting) keeps the
  // client's side small.
  ws.next_layer().open(tcp::v4());
  ws.next_layer().set_option(boost::asio::socket_base::receive_buffer_size(4096));
  boost::asio::connect(ws.next_layer(), res.resolve("127.0.0.1", std::to_string(port)));
  ws.handshake("127.0.0.1", "/v1/ws");
  for (int i = 0; i < 16; ++i) { // sixteen streams fill it sixteen times as fast as one
    const std::string msg = std::string(R"({"type":"completions","id":"r)") + std::to_string(i) +
                            R"(","body":{"prompt":"Hi","max_tokens":60000,"temperature":0,"ignore_eos":true,"logprobs":20}})";
    ws.write(boost::asio::buffer(msg));
  }
  // Never read again; the server must give up on the socket and free all sixteen requests.
  std::string m;
  const bool dropped = test::metrics_show(port,
                                          {"k3:http_requests_client_disconnected_total{model_name=\"Kimi-K3\"} 16",
                                           "k3:kda_state_slots_used{model_name=\"Kimi-K3\"} 0",
                                           "k3:num_requests_running{model_name=\"Kimi-K3\"} 0"},
                                          60000, &m);
  INFO(m);
  CHECK(dropped);
  CHECK(test::http_request(port, "GET", "/health").status == 200);
}

TEST_CASE("server: tool-call arguments stream over WebSocket and equal the non-streamed HTTP arguments", "[net]") {
  test::temp_dir d("ws_tools");
  model::make_model({}, d.str());
  test::child_process srv({K3_BINARY, "serve", "--model", d.str(), "--port", "0", "--max-model-len", "2048",
                           "--kv-cache-memory", "67108864"});
  const int port = srv.port_after("127.0.0.1");
  REQUIRE(port > 0);
  const std::string body =
      R"({"messages":[{"role":"user","content":"go"}],"tools":[{"type":"function","function":{"name":"f","parameters":)"
      R"({"type":"object","properties":{"s":{"type":"string","maxLength":20},"n":{"type":"integer"}},"required":["s","n"],)"
      R"("additionalProperties":false}}}],"tool_choice":"required","temperature":1,"seed":11,"max_tokens":300,"thinking":{"type":"disabled"}})";
  const auto plain = json::parse(test::http_request(port, "POST", "/v1/chat/completions", body).body);
  const auto& calls = plain.find("choices")->items[0].find("message")->find("tool_calls")->items;
  REQUIRE(!calls.empty());
  boost::asio::io_context ioc;
  tcp::resolver res(ioc);
  websocket::stream<tcp::socket> ws(ioc);
  boost::asio::connect(ws.next_layer(), res.resolve("127.0.0.1", std::to_string(port)));
  ws.handshake("127.0.0.1", "/v1/ws");
  const std::string msg = R"({"type":"chat.completions","id":"t","body":)" + body + "}";
  ws.write(boost::asio::buffer(msg));
  std::vector<std::string> args;
  int deltas = 0;
  for (;;) {
    beast::flat_buffer buf;
    ws.read(buf);
    const auto v = json::parse(beast::buffers_to_string(buf.data()));
    if (v.find("done")) break;
    const auto* ch = v.find("choices");
    if (!ch || ch->items.empty()) continue;
    if (const auto* tc = ch->items[0].find("delta")->find("tool_calls"))
      for (const auto& c : tc->items) {
        const auto idx = std::stoul(c.find("index")->s);
        if (idx >= args.size()) args.resize(idx + 1);
        if (const auto* a = c.find("function")->find("arguments")) args[idx] += a->s;
        ++deltas;
      }
  }
  REQUIRE(args.size() == calls.size());
  for (std::size_t i = 0; i < args.size(); ++i) CHECK(args[i] == calls[i].find("function")->find("arguments")->s);
  CHECK(deltas > static_cast<int>(calls.size())); // arguments arrived in pieces, not whole calls
  ws.close(websocket::close_code::normal);
}
