// Output parsing: golden cases, and streaming at every split point equals parsing the whole.
#include <catch2/catch.hpp>

#include "runtime/chat/output_parser.hpp"

using namespace k3::chat;

namespace {

template <class P>
parse_delta whole(const std::string& text, P& p) {
  parse_delta d = p.feed(text);
  d.append(p.finish());
  return d;
}

template <class P>
void check_every_split(const std::string& text, const P& proto) {
  P first = proto;
  const parse_delta ref = whole(text, first);
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    P p = proto;
    parse_delta d = p.feed(text.substr(0, cut));
    d.append(p.feed(text.substr(cut)));
    d.append(p.finish());
    INFO("split at " << cut);
    REQUIRE(d.reasoning == ref.reasoning);
    REQUIRE(d.content == ref.content);
    REQUIRE(d.calls.size() == ref.calls.size());
    for (std::size_t i = 0; i < d.calls.size(); ++i) {
      REQUIRE(d.calls[i].name == ref.calls[i].name);
      REQUIRE(d.calls[i].arguments == ref.calls[i].arguments);
    }
  }
  P p = proto; // one character at a time, and no delta ever contains a marker fragment
  parse_delta d;
  for (char c : text) {
    parse_delta step = p.feed(std::string(1, c));
    CHECK(step.content.find("<|") == std::string::npos);
    d.append(std::move(step));
  }
  d.append(p.finish());
  CHECK(d.content == ref.content);
  CHECK(d.reasoning == ref.reasoning);
}

} // namespace

TEST_CASE("K3 parser: think -> response", "[chat][parser]") {
  const std::string t = "Let me think.<|close|>think<|sep|><|open|>response<|sep|>Hello!<|close|>response<|sep|>"
                        "<|close|>message<|sep|><|end_of_msg|>";
  k3_output_parser p;
  const auto d = whole(t, p);
  CHECK(d.reasoning == "Let me think.");
  CHECK(d.content == "Hello!");
  CHECK(d.calls.empty());
  check_every_split(t, k3_output_parser{});
}

TEST_CASE("K3 parser: think -> response -> two tool calls", "[chat][parser]") {
  const std::string t =
      "plan<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|><|open|>tools<|sep|>"
      "<|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>Paris"
      "<|close|>argument<|sep|><|open|>argument key=\"days\" type=\"number\"<|sep|>3<|close|>argument<|sep|>"
      "<|close|>call<|sep|><|open|>call tool=\"a&amp;b\" index=\"2\"<|sep|><|open|>argument key=\"flags\" "
      "type=\"object\"<|sep|>{\"x\":true}<|close|>argument<|sep|><|open|>argument key=\"bad\" type=\"number\"<|sep|>"
      "1.2.3<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>";
  k3_output_parser p;
  const auto d = whole(t, p);
  CHECK(d.reasoning == "plan");
  CHECK(d.content == "Checking.");
  REQUIRE(d.calls.size() == 2);
  CHECK(d.calls[0].name == "get_weather");
  CHECK(d.calls[0].arguments == R"({"city": "Paris", "days": 3})");
  CHECK(d.calls[1].name == "a&b");
  CHECK(d.calls[1].arguments == R"({"flags": {"x": true}, "bad": "1.2.3"})");
  check_every_split(t, k3_output_parser{});
}

TEST_CASE("K3 parser: truncation inside think and mid-marker", "[chat][parser]") {
  k3_output_parser p1;
  auto d = whole(std::string("still thinking about it"), p1);
  CHECK(d.reasoning == "still thinking about it");
  CHECK(d.content.empty());
  CHECK(p1.in_reasoning());
  k3_output_parser p2; // max_tokens cut in the middle of the closing marker
  d = p2.feed("done<|close|>thi");
  CHECK(d.reasoning == "done");
  d.append(p2.finish());
  CHECK(d.reasoning == "done<|close|>thi");
  CHECK(d.content.empty());
}

TEST_CASE("K3 parser: repeated opener, missing think close, [EOS], non-thinking mode", "[chat][parser]") {
  k3_output_parser a;
  auto d = whole(std::string("<|open|>think<|sep|>r<|close|>think<|sep|><|open|>response<|sep|>c<|close|>response<|sep|><|close|>message<|sep|>[EOS]"), a);
  CHECK(d.reasoning == "r");
  CHECK(d.content == "c");
  CHECK(a.ended());
  k3_output_parser b; // the model forgot to close think
  d = whole(std::string("r<|open|>response<|sep|>c<|close|>response<|sep|>"), b);
  CHECK(d.reasoning == "r");
  CHECK(d.content == "c");
  k3_output_parser c(false); // non-thinking: the prompt opened response
  d = whole(std::string("answer<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>trailing"), c);
  CHECK(d.reasoning.empty());
  CHECK(d.content == "answer");
  check_every_split(std::string("answer<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"t\" index=\"1\"<|sep|>"
                                "<|open|>json type=\"object\"<|sep|>{\"raw\": 1}<|close|>json<|sep|><|close|>call<|sep|>"
                                "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"),
                    k3_output_parser(false));
  k3_output_parser e(false);
  d = whole(std::string("x<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"t\" index=\"1\"<|sep|>"
                        "<|open|>json type=\"object\"<|sep|>{\"raw\": 1}<|close|>json<|sep|><|close|>call<|sep|>"),
            e);
  REQUIRE(d.calls.size() == 1);
  CHECK(d.calls[0].arguments == "{\"raw\": 1}");
}

TEST_CASE("K2 parser: content, tool call section (plural and singular), end markers", "[chat][parser]") {
  const std::string t = "Sure.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
                        "{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.lookup:1<|tool_call_argument_begin|>"
                        "{}<|tool_call_end|><|tool_calls_section_end|><|im_end|>";
  k2_output_parser p;
  const auto d = whole(t, p);
  CHECK(d.content == "Sure.");
  REQUIRE(d.calls.size() == 2);
  CHECK(d.calls[0].name == "get_weather");
  CHECK(d.calls[0].arguments == "{\"city\": \"Paris\"}");
  CHECK(d.calls[1].name == "lookup");
  CHECK(p.ended());
  check_every_split(t, k2_output_parser{});
  k2_output_parser q;
  const auto e = whole(std::string("<|tool_call_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|>"), q);
  REQUIRE(e.calls.size() == 1);
  CHECK(e.calls[0].name == "f");
}
