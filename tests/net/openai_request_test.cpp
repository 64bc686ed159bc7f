// OpenAI request parsing without a server: the thinking switches and their precedence, message
// fields (reasoning precedence, dynamic tools on system messages), validation by field name.
#include <catch2/catch.hpp>

#include "net/openai_request.hpp"

using namespace k3;

namespace {
net::chat_request parse(const std::string& body, bool k3_family = true) { return net::parse_chat(net::parse_body(body), k3_family); }
std::string param_of(const std::string& body) {
  try {
    (void)parse(body);
  } catch (const net::api_error& e) {
    return e.param;
  }
  return "(accepted)";
}
const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
} // namespace

TEST_CASE("request: thinking on by default, Moonshot's top-level thinking switch", "[net][request]") {
  CHECK(parse("{" + msgs + "}").conv.thinking);
  CHECK_FALSE(parse("{" + msgs + R"(,"thinking":{"type":"disabled"}})").conv.thinking);
  CHECK(parse("{" + msgs + R"(,"thinking":{"type":"enabled"}})").conv.thinking);
  CHECK(param_of("{" + msgs + R"(,"thinking":{"type":"maybe"}})") == "thinking.type");
  CHECK(param_of("{" + msgs + R"(,"thinking":true})") == "thinking");
  CHECK(param_of("{" + msgs + R"(,"thinking":{"type":"enabled","extra":1}})") == "thinking.extra");
}

TEST_CASE("request: precedence — kwargs thinking over enable_thinking over the top-level switch, effort none is off",
          "[net][request]") {
  CHECK_FALSE(parse("{" + msgs + R"(,"reasoning_effort":"none"})").conv.thinking);
  CHECK(parse("{" + msgs + R"(,"reasoning_effort":"low"})").conv.thinking_effort == "low");
  CHECK(param_of("{" + msgs + R"(,"reasoning_effort":"medium"})") == "reasoning_effort");
  // chat_template_kwargs.thinking wins over enable_thinking, whichever comes first in the object.
  CHECK(parse("{" + msgs + R"(,"chat_template_kwargs":{"thinking":true,"enable_thinking":false}})").conv.thinking);
  CHECK_FALSE(parse("{" + msgs + R"(,"chat_template_kwargs":{"enable_thinking":true,"thinking":false}})").conv.thinking);
  // kwargs win over the top-level switch and over reasoning_effort none.
  CHECK(parse("{" + msgs + R"(,"thinking":{"type":"disabled"},"chat_template_kwargs":{"thinking":true}})").conv.thinking);
  CHECK(parse("{" + msgs + R"(,"reasoning_effort":"none","chat_template_kwargs":{"enable_thinking":true}})").conv.thinking);
  // Kimi Linear has no thinking channel at all.
  CHECK_FALSE(parse("{" + msgs + R"(,"thinking":{"type":"enabled"}})", false).conv.thinking);
}

TEST_CASE("request: reasoning_content wins over reasoning, a system message may carry tools", "[net][request]") {
  auto r = parse(R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a","reasoning":"R2","reasoning_content":"R1"}]})");
  CHECK(r.conv.messages[1].reasoning_content == "R1");
  r = parse(R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a","reasoning":"R2"}]})");
  CHECK(r.conv.messages[1].reasoning_content == "R2");
  r = parse(R"({"messages":[{"role":"system","content":"","tools":[{"type":"function","function":{"name":"f"}}]},{"role":"user","content":"u"}]})");
  REQUIRE(r.conv.messages[0].tools.has_value());
  CHECK(r.conv.messages[0].tools->items.size() == 1u);
  CHECK(param_of(R"({"messages":[{"role":"user","content":"u","tools":[]}]})") == "messages[0].tools");
  CHECK(param_of(R"({"messages":[{"role":"system","content":"","tools":[{"type":"function"}]}]})") == "messages[0].tools[0].function");
}

// ---- Streamed tool calls: the response builder on token events --------------------------------

#include "net/openai_stream.hpp"
#include "runtime/model/make_model.hpp"
#include "runtime/tokenizer/detokenizer.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"
#include "tests/model/model_fixture.hpp"

namespace {

struct events {
  const tok::kimi_tokenizer& t;
  std::vector<actors::stream_event> list;
  void marker(const char* m) {
    actors::stream_event e;
    e.token = t.id_of(m);
    REQUIRE(e.token >= 0);
    list.push_back(e);
  }
  tok::incremental_decoder dec{t.bpe()};
  void text(const std::string& s) { // one event per token, its text released UTF-8-safely as the request actor does
    for (auto id : t.encode(s, false)) {
      actors::stream_event e;
      e.token = id;
      e.text = dec.push(id);
      list.push_back(e);
    }
  }
  void end(const char* reason) {
    list.back().finished = true;
    list.back().finish_reason = reason;
  }
};

struct collected {
  std::string content, reasoning;
  std::vector<std::pair<std::string, std::string>> calls; // name, arguments
  std::vector<std::string> ids;
  std::string finish;
};

collected stream(net::stream_setup s, const std::vector<actors::stream_event>& evs) {
  net::response_builder b(std::move(s));
  collected c;
  for (const auto& e : evs)
    for (const auto& chunk : b.on_event(e)) {
      const auto v = json::parse(chunk);
      const auto* ch = v.find("choices");
      if (!ch || ch->items.empty()) continue;
      const auto& choice = ch->items[0];
      if (const auto* f = choice.find("finish_reason"); f && f->is_string()) c.finish = f->s;
      const auto* d = choice.find("delta");
      if (const auto* x = d->find("content"); x && x->is_string()) c.content += x->s;
      if (const auto* x = d->find("reasoning_content"); x && x->is_string()) c.reasoning += x->s;
      if (const auto* tc = d->find("tool_calls"))
        for (const auto& call : tc->items) {
          const auto idx = static_cast<std::size_t>(std::stoul(call.find("index")->s));
          if (const auto* id = call.find("id")) {
            REQUIRE(idx == c.calls.size()); // the first delta of a call carries id, type and name
            CHECK(call.find("type")->s == "function");
            c.calls.emplace_back(call.find("function")->find("name")->s, "");
            c.ids.push_back(id->s);
          }
          REQUIRE(idx < c.calls.size());
          if (const auto* a = call.find("function")->find("arguments")) c.calls[idx].second += a->s;
        }
    }
  return c;
}

collected whole(net::stream_setup s, const std::vector<actors::stream_event>& evs) {
  net::response_builder b(std::move(s));
  for (const auto& e : evs) (void)b.on_event(e);
  const auto v = json::parse(b.final_body());
  const auto& choice = v.find("choices")->items[0];
  collected c;
  c.finish = choice.find("finish_reason")->s;
  const auto* m = choice.find("message");
  if (const auto* x = m->find("content"); x && x->is_string()) c.content = x->s;
  if (const auto* x = m->find("reasoning_content"); x && x->is_string()) c.reasoning = x->s;
  if (const auto* tc = m->find("tool_calls"))
    for (const auto& call : tc->items) {
      c.calls.emplace_back(call.find("function")->find("name")->s, call.find("function")->find("arguments")->s);
      c.ids.push_back(call.find("id")->s);
    }
  return c;
}

} // namespace

TEST_CASE("stream: K3 tool-call arguments stream argument by argument and equal the non-streamed ones", "[net][stream]") {
  test::temp_dir d("stream_k3");
  model::make_model(test::tiny_options(model::family::kimi_k3), d.str());
  const auto t = tok::kimi_tokenizer::load(d.str());
  events ev{t, {}, tok::incremental_decoder(t.bpe())};
  ev.text("Let me look.");
  ev.marker("<|close|>"), ev.text("think"), ev.marker("<|sep|>");
  ev.marker("<|open|>"), ev.text("response"), ev.marker("<|sep|>"), ev.text("Checking both."), ev.marker("<|close|>"),
      ev.text("response"), ev.marker("<|sep|>");
  ev.marker("<|open|>"), ev.text("tools"), ev.marker("<|sep|>");
  ev.marker("<|open|>"), ev.text("call tool=\"get_weather\" index=\"1\""), ev.marker("<|sep|>");
  ev.marker("<|open|>"), ev.text("argument key=\"city\" type=\"string\""), ev.marker("<|sep|>"), ev.text("São \"Paulo\"\n");
  ev.marker("<|close|>"), ev.text("argument"), ev.marker("<|sep|>");
  ev.marker("<|open|>"), ev.text("argument key=\"days\" type=\"number\""), ev.marker("<|sep|>"), ev.text("3"), ev.marker("<|close|>"),
      ev.text("argument"), ev.marker("<|sep|>");
  ev.marker("<|close|>"), ev.text("call"), ev.marker("<|sep|>");
  ev.marker("<|open|>"), ev.text("call tool=\"search\" index=\"2\""), ev.marker("<|sep|>"), ev.marker("<|close|>"), ev.text("call"),
      ev.marker("<|sep|>");
  ev.marker("<|close|>"), ev.text("tools"), ev.marker("<|sep|>"), ev.marker("<|close|>"), ev.text("message"), ev.marker("<|sep|>");
  ev.marker("<|end_of_msg|>");
  ev.end("stop");
  net::stream_setup s;
  s.id = "chatcmpl-test";
  s.k3 = true;
  s.thinking = true;
  s.tools_declared = true;
  s.tokenizer = &t;
  const auto st = stream(s, ev.list), wh = whole(s, ev.list);
  CHECK(st.reasoning == "Let me look.");
  CHECK(st.content == "Checking both.");
  REQUIRE(st.calls.size() == 2u);
  CHECK(st.calls[0].first == "get_weather");
  CHECK(st.calls[0].second == "{\"city\": \"São \\\"Paulo\\\"\\n\", \"days\": 3}");
  CHECK(st.calls[1].second == "{}");
  CHECK(st.finish == "tool_calls");
  CHECK(st.calls == wh.calls); // streamed deltas concatenated = the non-streamed arguments, exactly
  CHECK(st.ids == wh.ids);
  CHECK(st.content == wh.content);
  CHECK(st.reasoning == wh.reasoning);
  CHECK(wh.finish == "tool_calls");
  // The string value streams as it is generated: "Paulo" reaches the client before the
  // argument closes (before the "days" key exists).
  bool partial = false;
  for (std::size_t n = 1; n <= ev.list.size() && !partial; ++n) {
    const auto so_far = stream(s, std::vector<actors::stream_event>(ev.list.begin(), ev.list.begin() + static_cast<std::ptrdiff_t>(n)));
    if (!so_far.calls.empty() && so_far.calls[0].second.find("Paulo") != std::string::npos)
      partial = so_far.calls[0].second.find("days") == std::string::npos;
  }
  CHECK(partial);
}

TEST_CASE("stream: K2 tool-call arguments stream as raw JSON text", "[net][stream]") {
  test::temp_dir d("stream_k2");
  model::make_model(test::tiny_options(model::family::kimi_linear), d.str());
  const auto t = tok::kimi_tokenizer::load(d.str());
  events ev{t, {}, tok::incremental_decoder(t.bpe())};
  ev.text("Sure.");
  ev.marker("<|tool_calls_section_begin|>"), ev.marker("<|tool_call_begin|>"), ev.text("functions.lookup:0"),
      ev.marker("<|tool_call_argument_begin|>"), ev.text("{\"q\": \"naïve\", \"n\": [1, 2]}"), ev.marker("<|tool_call_end|>");
  ev.marker("<|tool_calls_section_end|>"), ev.marker("<|im_end|>");
  ev.end("stop");
  net::stream_setup s;
  s.id = "chatcmpl-k2";
  s.k3 = false;
  s.thinking = false;
  s.tools_declared = true;
  s.tokenizer = &t;
  const auto st = stream(s, ev.list), wh = whole(s, ev.list);
  CHECK(st.content == "Sure.");
  REQUIRE(st.calls.size() == 1u);
  CHECK(st.calls[0].first == "lookup");
  CHECK(st.calls[0].second == "{\"q\": \"naïve\", \"n\": [1, 2]}");
  CHECK(st.calls == wh.calls);
  CHECK(st.finish == "tool_calls");
}
