// Chat rendering (K3 XTML, K2 / Kimi Linear) pinned to the spec's rules, and Python-compatible
// JSON printing.
#include <catch2/catch.hpp>

#include <algorithm>

#include "runtime/chat/json.hpp"
#include "runtime/chat/k2_format.hpp"
#include "runtime/chat/k3_xtml.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"

using namespace k3::chat;

namespace {

message msg(std::string role, std::string content) {
  message m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

const std::string effort_max =
    "<|open|>message role=\"system\" type=\"thinking-effort\"<|sep|>`thinking_effort` guides on how much to think in "
    "your thinking channel (not including the response channel), supported values include `low`, `medium`, `high`, "
    "and `max`.\nNow the system is invoked with `thinking_effort=max`.<|close|>message<|sep|><|end_of_msg|>";

} // namespace

TEST_CASE("json prints like Python json.dumps", "[chat][json]") {
  using k3::json::python_float_repr;
  CHECK(python_float_repr(1.0) == "1.0");
  CHECK(python_float_repr(100.0) == "100.0");
  CHECK(python_float_repr(3.14) == "3.14");
  CHECK(python_float_repr(1e-5) == "1e-05");
  CHECK(python_float_repr(0.0001) == "0.0001");
  CHECK(python_float_repr(1e16) == "1e+16");
  CHECK(python_float_repr(1e15) == "1000000000000000.0");
  CHECK(python_float_repr(-0.0) == "-0.0");
  CHECK(python_float_repr(1.5e300) == "1.5e+300");
  CHECK(python_float_repr(123456789.125) == "123456789.125");
  const auto v = k3::json::parse(R"({"b": [1, 2.50, true, null], "a": {"y": "é\n\"", "x": -0}, "c": 1E2})");
  CHECK(k3::json::dump(v) == R"({"b": [1, 2.5, true, null], "a": {"y": "é\n\"", "x": 0}, "c": 100.0})");
  CHECK(k3::json::dump(v, {true, true}) == R"({"a":{"x":0,"y":"é\n\""},"b":[1,2.5,true,null],"c":100.0})");
  CHECK(k3::json::quote(std::string("\x01\t", 2)) == "\"\\u0001\\t\"");
  CHECK_THROWS_AS(k3::json::parse("{\"a\": }"), k3::json::parse_error);
}

TEST_CASE("K3 XTML: the spec's worked example (thinking on, effort max, one user turn)", "[chat][k3]") {
  conversation c;
  c.messages = {msg("user", "hi")};
  const auto segs = render_k3(c);
  CHECK(join(segs) == effort_max +
                          "<|open|>message role=\"user\"<|sep|>hi<|close|>message<|sep|><|end_of_msg|>"
                          "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>");
  // Markers are control segments, everything else text; the last three segments are the
  // generation opener left out of prompt_tokens.
  for (const auto& s : segs) {
    const bool marker = s.text == "<|open|>" || s.text == "<|close|>" || s.text == "<|sep|>" || s.text == "<|end_of_msg|>";
    CHECK(s.control == marker);
  }
  REQUIRE(segs.size() >= 3);
  CHECK(segs[segs.size() - 2].text == "think");
}

TEST_CASE("K3 XTML: thinking off, history with and without reasoning", "[chat][k3]") {
  conversation c;
  c.thinking = false;
  c.messages = {msg("system", "Be brief."), msg("user", "a"), msg("assistant", "b"), msg("user", "c")};
  c.messages[2].reasoning_content = "hidden";
  CHECK(join(render_k3(c)) ==
        "<|open|>message role=\"system\"<|sep|>Be brief.<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"user\"<|sep|>a<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>b<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"user\"<|sep|>c<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>");
  c.thinking = true;
  c.add_generation_prompt = false;
  c.messages = {msg("user", "a"), msg("assistant", "b"), msg("assistant", "d")};
  c.messages[1].reasoning_content = "why";
  c.messages[2].reasoning_content = "  \n";
  CHECK(join(render_k3(c)) == effort_max +
        "<|open|>message role=\"user\"<|sep|>a<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>why<|close|>think<|sep|><|open|>response<|sep|>b<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|><|close|>think<|sep|><|open|>response<|sep|>d<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>");
}

TEST_CASE("K3 XTML: tool declaration is deep-sorted compact JSON", "[chat][k3]") {
  conversation c;
  c.thinking = false;
  c.add_generation_prompt = false;
  c.tools = k3::json::parse(R"([{"type":"function","function":{"name":"get","parameters":{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"}}},"description":"Get ünïcode"}}])");
  c.messages = {msg("user", "x")};
  const std::string out = join(render_k3(c));
  CHECK(out.rfind("<|open|>message role=\"system\" type=\"tool-declare\"<|sep|># Tools\nHere are the available tools, "
                  "described in JSONSchema.\n\n```json\n[{\"function\":{\"description\":\"Get ünïcode\",\"name\":\"get\","
                  "\"parameters\":{\"properties\":{\"a\":{\"type\":\"integer\"},\"z\":{\"type\":\"string\"}},\"type\":\"object\"}},"
                  "\"type\":\"function\"}]\n```<|close|>message<|sep|><|end_of_msg|>", 0) == 0);
}

TEST_CASE("K3 XTML: tool calls with every argument type, raw JSON block, results reordered", "[chat][k3]") {
  conversation c;
  c.thinking = false;
  c.add_generation_prompt = false;
  message a = msg("assistant", "calling");
  a.tool_calls = {{"id1", "f", R"({"s": "text", "n": 1.50, "b": true, "z": null, "o": {"k": [1, "v"]}, "l": [1, 2]})"},
                  {"id2", "g", "not json {"}};
  message r2 = msg("tool", "R2");
  r2.tool_call_id = "id2";
  message r1 = msg("tool", "R1");
  r1.tool_call_id = "id1";
  c.messages = {msg("user", "go"), a, r2, r1};
  CHECK(join(render_k3(c)) ==
        "<|open|>message role=\"user\"<|sep|>go<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>calling<|close|>response<|sep|>"
        "<|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|>"
        "<|open|>argument key=\"s\" type=\"string\"<|sep|>text<|close|>argument<|sep|>"
        "<|open|>argument key=\"n\" type=\"number\"<|sep|>1.5<|close|>argument<|sep|>"
        "<|open|>argument key=\"b\" type=\"boolean\"<|sep|>true<|close|>argument<|sep|>"
        "<|open|>argument key=\"z\" type=\"null\"<|sep|>null<|close|>argument<|sep|>"
        "<|open|>argument key=\"o\" type=\"object\"<|sep|>{\"k\": [1, \"v\"]}<|close|>argument<|sep|>"
        "<|open|>argument key=\"l\" type=\"array\"<|sep|>[1, 2]<|close|>argument<|sep|>"
        "<|close|>call<|sep|><|open|>call tool=\"g\" index=\"2\"<|sep|><|open|>json type=\"object\"<|sep|>not json {"
        "<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"tool\" tool=\"f\" index=\"1\"<|sep|>R1<|close|>message<|sep|><|end_of_msg|>"
        "<|open|>message role=\"tool\" tool=\"g\" index=\"2\"<|sep|>R2<|close|>message<|sep|><|end_of_msg|>");
}

TEST_CASE("K3 XTML: errors for unresolvable tools, bad arguments, roles and effort", "[chat][k3]") {
  conversation c;
  c.messages = {msg("user", "x"), msg("tool", "orphan")};
  CHECK_THROWS_WITH(render_k3(c), Catch::Contains("messages[1]"));
  message a = msg("assistant", "");
  a.tool_calls = {{"i", "f", "[1, 2]"}};
  c.messages = {a};
  CHECK_THROWS_WITH(render_k3(c), Catch::Contains("must be a JSON object"));
  c.messages = {msg("developer", "x")};
  CHECK_THROWS_WITH(render_k3(c), Catch::Contains("role 'developer'"));
  c.messages = {msg("user", "x")};
  c.thinking_effort = "medium";
  CHECK_THROWS_WITH(render_k3(c), Catch::Contains("thinking_effort"));
}

TEST_CASE("K3 XTML: tool_choice, response_format, images, attribute escaping, literal markers", "[chat][k3]") {
  conversation c;
  c.thinking = false;
  c.add_generation_prompt = false;
  message u = msg("user", "");
  u.name = "a&\"b";
  content_part img{"image_url", "", "data:,"};
  img.media_w = 1536, img.media_h = 1024, img.media_tokens = 3;
  u.parts = std::vector<content_part>{{"text", "see "}, img, {"text", " <|open|>x"}};
  c.messages = {u};
  {
    conversation bare = c;
    (*bare.messages[0].parts)[1].media_tokens = 0; // not decoded: refuse rather than guess a count
    CHECK_THROWS_AS(render_k3(bare), render_error);
  }
  c.tool_choice = "required";
  c.response_format = k3::json::parse(R"({"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}})");
  const auto segs = render_k3(c);
  const std::string out = join(segs);
  CHECK(out == "<|open|>message role=\"user\" name=\"a&amp;&quot;b\"<|sep|>see <|media_begin|>image 1536x1024<|media_content|>"
               "<|media_pad|><|media_pad|><|media_pad|><|media_end|> <|open|>x"
               "<|close|>message<|sep|><|end_of_msg|>"
               "<|open|>message role=\"system\" type=\"tool-choice\"<|sep|>The system is invoked with "
               "`tool_choice=required`.\nYou MUST call tools in the next message.<|close|>message<|sep|><|end_of_msg|>"
               "<|open|>message role=\"system\" type=\"response-format\"<|sep|>The system is invoked with "
               "`response_format=json_schema`.\nYour response must be raw JSON data without markdown code blocks "
               "(```json) or any additional formatting.\nThe JSON data must match the following schema:\n```json\n"
               "{\"type\":\"object\"}\n```<|close|>message<|sep|><|end_of_msg|>");
  // The user's literal "<|open|>" is inside a text segment, never a control one.
  bool in_text = false;
  for (const auto& s : segs)
    if (!s.control && s.text.find("<|open|>x") != std::string::npos) in_text = true;
  CHECK(in_text);
  // The media block is one control segment between the two text parts (no separators).
  bool media_ctrl = false;
  for (std::size_t i = 1; i + 1 < segs.size(); ++i)
    if (segs[i].control && segs[i].text.rfind("<|media_begin|>image 1536x1024", 0) == 0)
      media_ctrl = segs[i - 1].text == "see " && segs[i + 1].text == " <|open|>x";
  CHECK(media_ctrl);
  CHECK(unescape_attr(escape_attr("a&quot;\"&")) == "a&quot;\"&");
}

TEST_CASE("K2 / Kimi Linear format: default system, tools, calls, results, prompt", "[chat][k2]") {
  conversation c;
  c.tools = k3::json::parse(R"([{"type":"function","function":{"name":"f"}}])");
  message a = msg("assistant", "ok");
  a.tool_calls = {{"call_abc", "f", R"({"x": 1})"}};
  message t = msg("tool", "42");
  t.tool_call_id = "call_abc";
  c.messages = {msg("user", "hi"), a, t};
  CHECK(join(render_k2(c)) ==
        "<|im_system|>tool_declare<|im_middle|>[{\"function\":{\"name\":\"f\"},\"type\":\"function\"}]<|im_end|>"
        "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>\n"
        "<|im_user|>user<|im_middle|>hi<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|>ok<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
        "<|tool_call_argument_begin|>{\"x\": 1}<|tool_call_end|><|tool_calls_section_end|><|im_end|>"
        "<|im_system|>tool<|im_middle|>## Return of functions.f:0\n42<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|>");
  conversation s;
  s.messages = {msg("system", "S")};
  s.messages[0].name = "custom";
  s.add_generation_prompt = false;
  CHECK(join(render_k2(s)) == "<|im_system|>custom<|im_middle|>S<|im_end|>");
}

// ---- Golden segment lists for the 2026-12-03 rules (spec §16.6 corrections) -------------------
// Each list is (control?, text) in order, checked by hand against encoding_k3.py's rules.

namespace {
using seg = std::pair<bool, std::string>;
std::vector<seg> segs_of(const std::vector<k3::tok::segment>& s) {
  std::vector<seg> out;
  for (const auto& x : s) out.emplace_back(x.control, x.text);
  return out;
}
const seg O{true, "<|open|>"}, C{true, "<|close|>"}, S{true, "<|sep|>"}, E{true, "<|end_of_msg|>"};
seg T(std::string t) { return {false, std::move(t)}; }
} // namespace

TEST_CASE("K3 XTML golden segments: an attribute is four text segments ( key, =\", value, \")", "[chat][k3][golden]") {
  conversation c;
  c.thinking = false;
  c.add_generation_prompt = false;
  message u = msg("user", "hi");
  u.name = "Ann Lee "; // a value ending in a space: one segment would let BPE merge ` "` across it
  c.messages = {u};
  const std::vector<seg> want = {O, T("message"), T(" role"), T("=\""), T("user"), T("\""), T(" name"), T("=\""), T("Ann Lee "),
                                 T("\""), S, T("hi"), C, T("message"), S, E};
  CHECK(segs_of(render_k3(c)) == want);
}

TEST_CASE("K3 XTML golden segments: an assistant message with a name carries name=", "[chat][k3][golden]") {
  conversation c;
  c.thinking = false;
  c.add_generation_prompt = false;
  message a = msg("assistant", "ok");
  a.name = "kimi";
  c.messages = {a};
  const std::vector<seg> want = {O, T("message"), T(" role"), T("=\""), T("assistant"), T("\""), T(" name"), T("=\""), T("kimi"),
                                 T("\""), S, O, T("response"), S, T("ok"), C, T("response"), S, C, T("message"), S, E};
  CHECK(segs_of(render_k3(c)) == want);
}

TEST_CASE("K3 XTML golden segments: a system message carrying tools is the dynamic tool-declare message", "[chat][k3][golden]") {
  conversation c;
  c.thinking = false;
  c.add_generation_prompt = false;
  message sys = msg("system", "ignored body");
  sys.tools = k3::json::parse(R"([{"type":"function","function":{"parameters":{"type":"object"},"name":"late"}}])");
  c.messages = {sys, msg("user", "u")};
  const std::string body = "## New Tools Available\nThe system dynamically extends the toolset via lazy-loading.\nYou have "
                           "access to all existing and extended tools.\nHere are the specs for the extended tools.\n\n```json\n"
                           "[{\"function\":{\"name\":\"late\",\"parameters\":{\"type\":\"object\"}},\"type\":\"function\"}]\n```";
  const std::vector<seg> want = {O, T("message"), T(" role"), T("=\""), T("system"), T("\""), T(" type"), T("=\""), T("tool-declare"),
                                 T("\""), S, T(body), C, T("message"), S, E,
                                 O, T("message"), T(" role"), T("=\""), T("user"), T("\""), S, T("u"), C, T("message"), S, E};
  CHECK(segs_of(render_k3(c)) == want);
}

TEST_CASE("K3 XTML golden segments: the response-format schema is deep-sorted", "[chat][k3][golden]") {
  conversation c;
  c.thinking = false;
  c.add_generation_prompt = false;
  c.messages = {msg("user", "u")};
  c.response_format = k3::json::parse(
      R"({"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer","maximum":3}}}}})");
  const auto out = segs_of(render_k3(c));
  REQUIRE(out.size() >= 16);
  CHECK(out[out.size() - 5].second ==
        "The system is invoked with `response_format=json_schema`.\nYour response must be raw JSON data without markdown "
        "code blocks (```json) or any additional formatting.\nThe JSON data must match the following schema:\n```json\n"
        "{\"properties\":{\"a\":{\"maximum\":3,\"type\":\"integer\"},\"z\":{\"type\":\"string\"}},\"type\":\"object\"}\n```");
}

TEST_CASE("K3 XTML golden segments: empty or whitespace-only arguments render a call with no arguments", "[chat][k3][golden]") {
  conversation c;
  c.thinking = false;
  c.add_generation_prompt = false;
  message a = msg("assistant", "");
  a.tool_calls = {{"i1", "now", "  \n\t"}, {"i2", "later", ""}};
  c.messages = {a};
  const std::vector<seg> want = {O, T("message"), T(" role"), T("=\""), T("assistant"), T("\""), S, O, T("response"), S, C,
                                 T("response"), S, O, T("tools"), S,
                                 O, T("call"), T(" tool"), T("=\""), T("now"), T("\""), T(" index"), T("=\""), T("1"), T("\""), S, C,
                                 T("call"), S,
                                 O, T("call"), T(" tool"), T("=\""), T("later"), T("\""), T(" index"), T("=\""), T("2"), T("\""), S, C,
                                 T("call"), S, C, T("tools"), S, C, T("message"), S, E};
  CHECK(segs_of(render_k3(c)) == want);
}

TEST_CASE("K3 XTML: attribute segments change the ids where one segment would merge", "[chat][k3][golden]") {
  // A vocabulary that knows ` "` lets BPE merge across a single ` name="Ann "` segment; the
  // four-segment form cannot.
  std::vector<std::string> base;
  for (int b = 0; b < 256; ++b) base.emplace_back(1, static_cast<char>(b));
  base.emplace_back(" \"");
  const auto n = static_cast<std::int32_t>(base.size());
  const k3::tok::kimi_tokenizer tok(base, {{n + 2, "<|end_of_msg|>"}, {n + 3, "<|open|>"}, {n + 4, "<|close|>"}, {n + 5, "<|sep|>"}});
  conversation c;
  c.thinking = false;
  c.add_generation_prompt = false;
  message u = msg("user", "x");
  u.name = "Ann ";
  c.messages = {u};
  const auto segs = render_k3(c);
  const auto ids = tok.encode(segs);
  CHECK(std::count(ids.begin(), ids.end(), n - 1) == 0); // ` "` never formed
  CHECK(tok.decode(ids) == join(segs));
  const auto merged = tok.encode(join(segs), true); // what encoding the joined string would give
  CHECK(std::count(merged.begin(), merged.end(), n - 1) == 1);
}

TEST_CASE("K2 golden: results labelled by position from one counter, unknown ids, verbatim arguments", "[chat][k2][golden]") {
  conversation c;
  message a = msg("assistant", "");
  a.tool_calls = {{"x", "f", ""}, {"y", "g", "{ \"a\" : 1 }"}};
  message r1 = msg("tool", "R1");
  r1.tool_call_id = "y"; // out of order: still labelled by position (the first queued id)
  message r2 = msg("tool", "R2");
  r2.tool_call_id = "nope";
  message r3 = msg("tool", "R3"); // queue empty: name, else unknown, with the current counter
  r3.name = "h";
  message r4 = msg("tool", "R4");
  message a2 = msg("assistant", "more");
  a2.tool_calls = {{"functions.z:9", "z", "{}"}};
  message r5 = msg("tool", "R5");
  c.messages = {msg("system", "S"), a, r1, r2, r3, r4, a2, r5};
  c.add_generation_prompt = false;
  CHECK(join(render_k2(c)) ==
        "<|im_system|>system<|im_middle|>S<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><|tool_calls_section_begin|>"
        "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|><|tool_call_end|>"
        "<|tool_call_begin|>functions.g:1<|tool_call_argument_begin|>{ \"a\" : 1 }<|tool_call_end|>"
        "<|tool_calls_section_end|><|im_end|>"
        "<|im_system|>tool<|im_middle|>## Return of functions.f:0\nR1<|im_end|>"
        "<|im_system|>tool<|im_middle|>## Return of functions.g:1\nR2<|im_end|>"
        "<|im_system|>h<|im_middle|>## Return of functions.h:2\nR3<|im_end|>"
        "<|im_system|>tool<|im_middle|>## Return of functions.unknown:2\nR4<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|>more<|tool_calls_section_begin|>"
        "<|tool_call_begin|>functions.z:2<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|><|im_end|>"
        "<|im_system|>tool<|im_middle|>## Return of functions.z:2\nR5<|im_end|>");
}

#include "runtime/tokenizer/kimi_tokenizer.hpp"

TEST_CASE("rendered K3 prompt encodes markers as special ids and user-typed markers as text", "[chat][k3][tokenizer]") {
  std::vector<std::string> base;
  for (int b = 0; b < 256; ++b) base.emplace_back(1, static_cast<char>(b));
  for (const char* m : {"message", " role", "user", "assistant", "think"}) base.emplace_back(m);
  const auto n = static_cast<std::int32_t>(base.size());
  const k3::tok::kimi_tokenizer tok(base, {{n + 2, "<|end_of_msg|>"}, {n + 3, "<|open|>"}, {n + 4, "<|close|>"}, {n + 5, "<|sep|>"}});
  conversation c;
  c.messages = {msg("user", "please type <|open|> and <|sep|> literally")};
  const auto ids = tok.encode(render_k3(c));
  const auto opens = std::count(ids.begin(), ids.end(), n + 3);
  const auto seps = std::count(ids.begin(), ids.end(), n + 5);
  CHECK(opens == 4); // effort message, user message, assistant, think — not the user's literal one
  CHECK(seps == 6);  // the 4 opens + 2 closes
  CHECK(tok.decode(ids) == join(render_k3(c)));
}
