// Output parsing on token ids: golden cases (the known failure modes of other engines among
// them), and streaming at every token split equals parsing the whole.
#include <catch2/catch.hpp>

#include <map>

#include "runtime/chat/json.hpp"
#include "runtime/chat/output_parser.hpp"

using namespace k3::chat;

namespace {

// Ids of the test "vocabulary": markers are their own ids, every other piece of text is an
// ordinary token (id 1000) carrying that text.
constexpr int OPEN = 1, CLOSE = 2, SEP = 3, EOM = 4, EOS = 5;
constexpr int SEC = 11, SEC_END = 12, CALL = 13, ARGS = 14, CALL_END = 15, IM_END = 16, EOT = 17;
constexpr int TEXT = 1000;

const k3_output_parser::marker_ids k3_ids{OPEN, CLOSE, SEP, EOM, EOS};
const k2_output_parser::marker_ids k2_ids{SEC, SEC_END, CALL, ARGS, CALL_END, IM_END, EOS, EOT};

struct tok {
  int id;
  std::string text;
};

// "<|open|>think<|sep|>..." -> tokens; text between markers becomes one token each.
std::vector<tok> tokens(const std::string& s) {
  static const std::map<std::string, int> markers = {
      {"<|open|>", OPEN},  {"<|close|>", CLOSE}, {"<|sep|>", SEP}, {"<|end_of_msg|>", EOM}, {"[EOS]", EOS},
      {"<|tool_calls_section_begin|>", SEC}, {"<|tool_calls_section_end|>", SEC_END}, {"<|tool_call_begin|>", CALL},
      {"<|tool_call_argument_begin|>", ARGS}, {"<|tool_call_end|>", CALL_END}, {"<|im_end|>", IM_END}, {"[EOT]", EOT}};
  std::vector<tok> out;
  std::string text;
  for (std::size_t i = 0; i < s.size();) {
    bool hit = false;
    for (const auto& [m, id] : markers)
      if (s.compare(i, m.size(), m) == 0) {
        if (!text.empty()) out.push_back({TEXT, text}), text.clear();
        out.push_back({id, ""});
        i += m.size();
        hit = true;
        break;
      }
    if (!hit) text += s[i++];
  }
  if (!text.empty()) out.push_back({TEXT, text});
  return out;
}

struct result {
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls; // name, arguments
};

result collect(const parse_delta& d) {
  result r{d.reasoning, d.content, {}};
  for (const auto& c : d.calls) {
    if (c.begin) r.calls.emplace_back(c.name, "");
    REQUIRE(c.index < r.calls.size());
    r.calls[c.index].second += c.arguments;
  }
  return r;
}

template <class P>
result run(P p, const std::vector<tok>& ts) {
  parse_delta d;
  for (const auto& t : ts) d.append(p.feed(t.id, t.text));
  d.append(p.finish());
  return collect(d);
}

void same(const result& a, const result& b) {
  REQUIRE(a.reasoning == b.reasoning);
  REQUIRE(a.content == b.content);
  REQUIRE(a.calls == b.calls);
}

// Every ordinary token split in two at every byte (ASCII test text), and all one-byte tokens,
// give the same result as the whole; deltas are never merged across calls.
template <class P>
result check_every_split(const std::string& s, const P& proto) {
  const auto ts = tokens(s);
  const result ref = run(proto, ts);
  for (std::size_t k = 0; k < ts.size(); ++k) {
    if (ts[k].id != TEXT) continue;
    for (std::size_t cut = 1; cut < ts[k].text.size(); ++cut) {
      auto split = ts;
      split[k].text = ts[k].text.substr(0, cut);
      split.insert(split.begin() + static_cast<std::ptrdiff_t>(k) + 1, tok{TEXT, ts[k].text.substr(cut)});
      INFO("token " << k << " split at " << cut);
      same(run(proto, split), ref);
    }
  }
  std::vector<tok> bytes;
  for (const auto& t : ts) {
    if (t.id != TEXT) bytes.push_back(t);
    else
      for (char c : t.text) bytes.push_back({TEXT, std::string(1, c)});
  }
  same(run(proto, bytes), ref);
  return ref;
}

} // namespace

TEST_CASE("K3 parser: think -> response", "[chat][parser]") {
  const auto r = check_every_split("Let me think.<|close|>think<|sep|><|open|>response<|sep|>Hello!<|close|>response<|sep|>"
                                   "<|close|>message<|sep|><|end_of_msg|>",
                                   k3_output_parser(k3_ids, true));
  CHECK(r.reasoning == "Let me think.");
  CHECK(r.content == "Hello!");
  CHECK(r.calls.empty());
}

TEST_CASE("K3 parser: think -> response -> two tool calls, arguments streamed argument by argument", "[chat][parser]") {
  const std::string t =
      "plan<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|><|open|>tools<|sep|>"
      "<|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>Pa\"ris\n"
      "<|close|>argument<|sep|><|open|>argument key=\"days\" type=\"number\"<|sep|>3<|close|>argument<|sep|>"
      "<|close|>call<|sep|><|open|>call tool=\"a&amp;b\" index=\"2\"<|sep|><|open|>argument key=\"flags\" "
      "type=\"object\"<|sep|>{\"x\":true}<|close|>argument<|sep|><|open|>argument key=\"bad\" type=\"number\"<|sep|>"
      "1.2.3<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>";
  const auto r = check_every_split(t, k3_output_parser(k3_ids, true));
  CHECK(r.reasoning == "plan");
  CHECK(r.content == "Checking.");
  REQUIRE(r.calls.size() == 2);
  CHECK(r.calls[0].first == "get_weather");
  CHECK(r.calls[0].second == R"({"city": "Pa\"ris\n", "days": 3})");
  CHECK(r.calls[1].first == "a&b");
  // Non-string values re-serialized like json.dumps; malformed JSON kept as a string.
  CHECK(r.calls[1].second == R"({"flags": {"x": true}, "bad": "1.2.3"})");
  for (const auto& c : r.calls) CHECK_NOTHROW(k3::json::parse(c.second));

  // The string value really streams: its first characters arrive before the argument closes.
  k3_output_parser p(k3_ids, false);
  const auto ts = tokens("<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|>"
                         "<|open|>argument key=\"text\" type=\"string\"<|sep|>");
  parse_delta d;
  for (const auto& x : ts) d.append(p.feed(x.id, x.text));
  REQUIRE(d.calls.size() == 1);
  CHECK(d.calls[0].begin);
  CHECK(d.calls[0].name == "f");
  CHECK(d.calls[0].arguments == "{\"text\": \"");
  const auto more = p.feed(TEXT, "hello");
  REQUIRE(more.calls.size() == 1);
  CHECK(more.calls[0].arguments == "hello");
}

TEST_CASE("K3 parser: markers spelled with ordinary tokens are text, not structure", "[chat][parser]") {
  // The model writes "<|close|>think<|sep|>" as BPE pieces: it stays reasoning text.
  k3_output_parser p(k3_ids, true);
  parse_delta d = p.feed(TEXT, "a<|close|>think<|sep|>b");
  d.append(p.feed(TEXT, " <|open|>response<|sep|>c"));
  d.append(p.finish());
  CHECK(d.reasoning == "a<|close|>think<|sep|>b <|open|>response<|sep|>c");
  CHECK(d.content.empty());
}

TEST_CASE("K3 parser: truncation inside think, inside a marker, inside a tool call", "[chat][parser]") {
  auto r = check_every_split("still thinking about it", k3_output_parser(k3_ids, true));
  CHECK(r.reasoning == "still thinking about it");
  CHECK(r.content.empty());
  // max_tokens cut in the middle of the closing marker: the partial header is dropped.
  r = check_every_split("done<|close|>thi", k3_output_parser(k3_ids, true));
  CHECK(r.reasoning == "done");
  CHECK(r.content.empty());
  // Cut inside a string argument: the call is closed so its arguments stay valid JSON.
  r = check_every_split("<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|>"
                        "<|open|>argument key=\"q\" type=\"string\"<|sep|>par",
                        k3_output_parser(k3_ids, true));
  REQUIRE(r.calls.size() == 1);
  CHECK(r.calls[0].second == R"({"q": "par"})");
  // Cut inside a number argument, and inside an argument header.
  r = check_every_split("<|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|><|open|>argument key=\"n\" "
                        "type=\"number\"<|sep|>12<|close|>argument<|sep|><|open|>argument key=\"m\" typ",
                        k3_output_parser(k3_ids, false));
  REQUIRE(r.calls.size() == 1);
  CHECK(r.calls[0].second == R"({"n": 12})");
  CHECK_NOTHROW(k3::json::parse(r.calls[0].second));
}

TEST_CASE("K3 parser: leaves think by opening tools, repeats the think opener, forgets to close response", "[chat][parser]") {
  // Straight from think into tools (no response channel).
  auto r = check_every_split("why<|open|>tools<|sep|><|open|>call tool=\"t\" index=\"1\"<|sep|><|close|>call<|sep|>"
                             "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>",
                             k3_output_parser(k3_ids, true));
  CHECK(r.reasoning == "why");
  CHECK(r.content.empty());
  REQUIRE(r.calls.size() == 1);
  CHECK(r.calls[0].second == "{}");
  // A repeated <|open|>think<|sep|> is consumed; [EOS] ends like <|end_of_msg|>.
  k3_output_parser a(k3_ids, true);
  r = check_every_split("<|open|>think<|sep|>r<|close|>think<|sep|><|open|>response<|sep|>c<|close|>response<|sep|>"
                        "<|close|>message<|sep|>[EOS]",
                        a);
  CHECK(r.reasoning == "r");
  CHECK(r.content == "c");
  // Ends with <|close|>message<|sep|> without closing response; trailing text is dropped.
  r = check_every_split("r<|close|>think<|sep|><|open|>response<|sep|>answer<|close|>message<|sep|><|end_of_msg|>trailing",
                        k3_output_parser(k3_ids, true));
  CHECK(r.content == "answer");
  // The model forgot to close think.
  r = check_every_split("r<|open|>response<|sep|>c<|close|>response<|sep|>", k3_output_parser(k3_ids, true));
  CHECK(r.reasoning == "r");
  CHECK(r.content == "c");
  // Text without a response opener after think is the answer.
  r = check_every_split("r<|close|>think<|sep|>\n\nplain answer", k3_output_parser(k3_ids, true));
  CHECK(r.content == "plain answer");
}

TEST_CASE("K3 parser: non-thinking mode, raw JSON block, calls without a tool name, unreported calls", "[chat][parser]") {
  auto r = check_every_split("answer<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"t\" index=\"1\"<|sep|>"
                             "<|open|>json type=\"object\"<|sep|>{\"raw\": 1}<|close|>json<|sep|><|close|>call<|sep|>"
                             "<|open|>call index=\"2\"<|sep|><|open|>argument key=\"x\" type=\"string\"<|sep|>y<|close|>argument<|sep|>"
                             "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>",
                             k3_output_parser(k3_ids, false));
  CHECK(r.reasoning.empty());
  CHECK(r.content == "answer");
  REQUIRE(r.calls.size() == 1); // the call without tool= is dropped
  CHECK(r.calls[0].second == "{\"raw\": 1}");
  // tool_choice none / no tools: calls are parsed (so they never leak into content) but not reported.
  r = check_every_split("a<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"t\" index=\"1\"<|sep|>"
                        "<|open|>argument key=\"x\" type=\"string\"<|sep|>y<|close|>argument<|sep|><|close|>call<|sep|>",
                        k3_output_parser(k3_ids, false, false));
  CHECK(r.content == "a");
  CHECK(r.calls.empty());
}

TEST_CASE("K2 parser: content, tool call section, raw arguments streamed, end markers", "[chat][parser]") {
  const std::string t = "Sure.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
                        "{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.lookup:1<|tool_call_argument_begin|>"
                        "{}<|tool_call_end|><|tool_calls_section_end|><|im_end|>ignored";
  k2_output_parser p(k2_ids);
  const auto r = check_every_split(t, p);
  CHECK(r.content == "Sure.");
  REQUIRE(r.calls.size() == 2);
  CHECK(r.calls[0].first == "get_weather");
  CHECK(r.calls[0].second == "{\"city\": \"Paris\"}");
  CHECK(r.calls[1].first == "lookup");
  CHECK(r.calls[1].second == "{}");
  // A section-begin spelled as text is content.
  k2_output_parser q(k2_ids);
  auto d = q.feed(TEXT, "x<|tool_calls_section_begin|>y");
  CHECK(d.content == "x<|tool_calls_section_begin|>y");
  CHECK(d.calls.empty());
  // Unreported when no tools were declared.
  const auto none = run(k2_output_parser(k2_ids, false), tokens(t));
  CHECK(none.calls.empty());
  CHECK(none.content == "Sure.");
}

TEST_CASE("K3 attributes unescape &quot, then &amp,", "[chat][parser]") {
  const auto a = parse_attributes("call tool=\"a&amp;quot;b&quot;\" index=\"1\"");
  REQUIRE(a.size() == 2);
  CHECK(a[0].first == "tool");
  CHECK(a[0].second == "a&quot;b\"");
  CHECK(a[1].second == "1");
}
