// libFuzzer: the K3 and K2 output parsers on arbitrary token streams (markers and text pieces
// drawn from the bytes). Invariants: feeding the stream split at any point gives the same
// result as feeding it whole (streaming = non-streaming), completed K3 tool-call arguments are
// valid JSON objects, and no delta ever refers to a call that was not begun.
#include <string>
#include <vector>

#include "fuzz/fuzz_util.hpp"
#include "runtime/chat/json.hpp"
#include "runtime/chat/output_parser.hpp"

namespace {

using namespace k3::chat;

struct tok {
  int id;
  std::string text;
};

struct outcome {
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;
  bool operator==(const outcome&) const = default;
};

template <class P>
outcome run(P p, const std::vector<tok>& ts, std::size_t split_token, std::size_t split_byte) {
  outcome o;
  auto take = [&](parse_delta&& d) {
    o.reasoning += d.reasoning;
    o.content += d.content;
    for (auto& c : d.calls) {
      if (c.begin) {
        K3_FUZZ_CHECK(c.index == o.calls.size());
        o.calls.emplace_back(c.name, "");
      }
      K3_FUZZ_CHECK(c.index < o.calls.size());
      o.calls[c.index].second += c.arguments;
    }
  };
  for (std::size_t i = 0; i < ts.size(); ++i) {
    if (i == split_token && ts[i].id == 1000 && split_byte < ts[i].text.size()) {
      take(p.feed(1000, ts[i].text.substr(0, split_byte)));
      take(p.feed(1000, ts[i].text.substr(split_byte)));
    } else {
      take(p.feed(ts[i].id, ts[i].text));
    }
  }
  take(p.finish());
  return o;
}

// Text pieces biased towards the words the formats use, so headers often parse.
const char* const words[] = {"think", "response", "tools", "call tool=\"f\" index=\"1\"", "argument key=\"k\" type=\"string\"",
                             "argument key=\"n\" type=\"number\"", "json type=\"object\"", "message", "{\"a\": 1}", "12",
                             "x\"y", "functions.f:0", "{}", " ", "\n", "é"};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  std::vector<tok> ts;
  for (std::size_t i = 2; i < size; ++i) {
    const std::uint8_t b = data[i];
    if (b < 8) ts.push_back({1 + b, ""}); // K3 markers 1..5, K2 markers overlap below
    else if (b < 16) ts.push_back({10 + (b - 8), ""});
    else if (b < 64) ts.push_back({1000, words[b % (sizeof words / sizeof *words)]});
    else if (b < 128) ts.push_back({1000, std::string(1, static_cast<char>(b))});
    else ts.push_back({1000, std::string{static_cast<char>(0xC0 | (b >> 6)), static_cast<char>(0x80 | (b & 0x3F))}}); // text is UTF-8 (the request actor sanitizes)
  }
  const std::size_t split_token = ts.empty() ? 0 : data[0] % ts.size();
  const std::size_t split_byte = data[1] % 8;
  const k3_output_parser::marker_ids k3_ids{1, 2, 3, 4, 5};
  const k2_output_parser::marker_ids k2_ids{10, 11, 12, 13, 14, 15, 5, 16};
  for (bool thinking : {true, false}) {
    const k3_output_parser p(k3_ids, thinking);
    const auto whole = run(p, ts, SIZE_MAX, 0);
    K3_FUZZ_CHECK(run(p, ts, split_token, split_byte) == whole);
    // Without a raw JSON block in the stream every call's arguments were serialized by the
    // parser: they must be one JSON object, even when the stream was cut mid-call.
    std::string all_text;
    for (const auto& t : ts) all_text += t.text;
    const bool raw_block = all_text.find("json") != std::string::npos;
    for (const auto& [name, args] : whole.calls) {
      K3_FUZZ_CHECK(!name.empty());
      if (raw_block) continue;
      bool ok = true;
      try {
        ok = k3::json::parse(args).is_object();
      } catch (const k3::json::parse_error&) {
        ok = false;
      }
      K3_FUZZ_CHECK(ok);
    }
  }
  const k2_output_parser q(k2_ids);
  K3_FUZZ_CHECK(run(q, ts, split_token, split_byte) == run(q, ts, SIZE_MAX, 0));
  return 0;
}
