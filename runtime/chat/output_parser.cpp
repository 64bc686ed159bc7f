#include "runtime/chat/output_parser.hpp"

#include <algorithm>
#include <initializer_list>

#include "runtime/chat/json.hpp"
#include "runtime/chat/k3_xtml.hpp"

namespace k3::chat {
namespace {

constexpr std::string_view think_open = "<|open|>think<|sep|>";
constexpr std::string_view think_close = "<|close|>think<|sep|>";
constexpr std::string_view resp_open = "<|open|>response<|sep|>";
constexpr std::string_view resp_close = "<|close|>response<|sep|>";
constexpr std::string_view tools_open = "<|open|>tools<|sep|>";
constexpr std::string_view tools_close = "<|close|>tools<|sep|>";
constexpr std::string_view msg_close = "<|close|>message<|sep|>";
constexpr std::string_view call_open = "<|open|>call";
constexpr std::string_view call_close = "<|close|>call<|sep|>";
constexpr std::string_view end_msg = "<|end_of_msg|>";
constexpr std::string_view eos = "[EOS]";

constexpr std::string_view k3_markers[] = {think_open, think_close, resp_open,  resp_close, tools_open,
                                           tools_close, msg_close,  call_close, end_msg,    eos};

// Length of the longest suffix of s that is a proper prefix of some marker (to hold back).
template <std::size_t N>
std::size_t held_suffix(std::string_view s, const std::string_view (&markers)[N]) {
  std::size_t best = 0;
  for (auto m : markers)
    for (std::size_t len = std::min(s.size(), m.size() - 1); len > best; --len)
      if (s.substr(s.size() - len) == m.substr(0, len)) {
        best = len;
        break;
      }
  return best;
}

struct hit {
  std::size_t pos = std::string_view::npos;
  std::string_view marker;
};

hit earliest(std::string_view s, std::initializer_list<std::string_view> markers) {
  hit h;
  for (auto m : markers) {
    const auto p = s.find(m);
    if (p < h.pos) h = {p, m};
  }
  return h;
}

// Moves buf's text before the earliest stop marker into out and drops the marker; with no stop
// in sight, moves everything except a held-back possible marker prefix (or all, when final).
template <std::size_t N>
hit take_until(std::string& buf, std::string& out, std::initializer_list<std::string_view> stops,
               const std::string_view (&markers)[N], bool final) {
  const std::string_view b = buf;
  const hit h = earliest(b, stops);
  if (h.pos == std::string_view::npos) {
    const std::size_t n = b.size() - (final ? 0 : held_suffix(b, markers));
    out.append(b.substr(0, n));
    buf.erase(0, n);
  } else {
    out.append(b.substr(0, h.pos));
    buf.erase(0, h.pos + h.marker.size());
  }
  return h;
}

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; });
}

// key="value" pairs of a tag header (values unescaped).
std::vector<std::pair<std::string, std::string>> attributes(std::string_view h) {
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t i = 0;
  while (i < h.size()) {
    while (i < h.size() && h[i] == ' ') ++i;
    const auto eq = h.find("=\"", i);
    if (eq == std::string_view::npos) break;
    const auto end = h.find('"', eq + 2);
    if (end == std::string_view::npos) break;
    out.emplace_back(std::string(h.substr(i, eq - i)), unescape_attr(h.substr(eq + 2, end - eq - 2)));
    i = end + 1;
  }
  return out;
}

std::string attr(const std::vector<std::pair<std::string, std::string>>& a, std::string_view key) {
  for (const auto& [k, v] : a)
    if (k == key) return v;
  return {};
}

} // namespace

void parse_delta::append(parse_delta&& d) {
  reasoning += d.reasoning;
  content += d.content;
  for (auto& c : d.calls) calls.push_back(std::move(c));
}

bool parse_k3_call(std::string_view call, parsed_call& out) {
  // call = "<|open|>call ATTRS<|sep|>BODY<|close|>call<|sep|>"
  constexpr std::string_view sep = "<|sep|>";
  if (call.substr(0, call_open.size()) != call_open) return false;
  const auto hdr_end = call.find(sep);
  if (hdr_end == std::string_view::npos) return false;
  const auto attrs = attributes(call.substr(call_open.size(), hdr_end - call_open.size()));
  out.name = attr(attrs, "tool");
  if (out.name.empty()) return false;
  std::string_view body = call.substr(hdr_end + sep.size());
  if (body.size() >= call_close.size() && body.substr(body.size() - call_close.size()) == call_close)
    body.remove_suffix(call_close.size());
  // A raw JSON block is honoured only as the whole body.
  constexpr std::string_view json_open = "<|open|>json";
  constexpr std::string_view json_close = "<|close|>json<|sep|>";
  if (body.substr(0, json_open.size()) == json_open && body.size() >= json_close.size() &&
      body.substr(body.size() - json_close.size()) == json_close) {
    const auto s = body.find(sep);
    if (s != std::string_view::npos && s + sep.size() <= body.size() - json_close.size()) {
      out.arguments = std::string(body.substr(s + sep.size(), body.size() - json_close.size() - s - sep.size()));
      return true;
    }
  }
  json::value args;
  args.k = json::value::kind::object;
  constexpr std::string_view arg_open = "<|open|>argument";
  constexpr std::string_view arg_close = "<|close|>argument<|sep|>";
  std::size_t i = 0;
  while ((i = body.find(arg_open, i)) != std::string_view::npos) {
    const auto h = body.find(sep, i);
    if (h == std::string_view::npos) break;
    const auto a = attributes(body.substr(i + arg_open.size(), h - i - arg_open.size()));
    const auto vend = body.find(arg_close, h + sep.size());
    if (vend == std::string_view::npos) break;
    const std::string raw(body.substr(h + sep.size(), vend - h - sep.size()));
    const std::string key = attr(a, "key"), type = attr(a, "type");
    json::value v = json::value::string_value(raw);
    if (type != "string") {
      try {
        v = json::parse(raw);
      } catch (const json::parse_error&) {
        v = json::value::string_value(raw); // malformed: keep the text
      }
    }
    auto it = std::find_if(args.members.begin(), args.members.end(), [&](const auto& m) { return m.first == key; });
    if (it != args.members.end()) it->second = std::move(v);
    else args.members.emplace_back(key, std::move(v));
    i = vend + arg_close.size();
  }
  out.arguments = json::dump(args);
  return true;
}

parse_delta k3_output_parser::feed(std::string_view text) {
  buf_.append(text);
  return run(false);
}

parse_delta k3_output_parser::finish() { return run(true); }

parse_delta k3_output_parser::run(bool final) {
  parse_delta d;
  for (;;) {
    std::string_view b = buf_;
    auto consume = [&](std::size_t n) { buf_.erase(0, n); };
    switch (state_) {
      case state::reasoning: {
        if (!think_prefix_checked_) {
          // Tolerate the model repeating the opener the prompt already contained.
          if (b.size() < think_open.size() && think_open.substr(0, b.size()) == b && !final) return d;
          think_prefix_checked_ = true;
          if (b.substr(0, think_open.size()) == think_open) {
            consume(think_open.size());
            continue;
          }
        }
        const hit h = take_until(buf_, d.reasoning, {think_close, resp_open, tools_open, msg_close, end_msg, eos},
                                 k3_markers, final);
        if (h.pos == std::string_view::npos) return d;
        state_ = h.marker == think_close ? state::between
                 : h.marker == resp_open ? state::content
                 : h.marker == tools_open ? state::tools
                 : h.marker == msg_close  ? state::closed
                                          : state::done;
        continue;
      }
      case state::between:
      case state::after_content: {
        std::size_t ws = 0;
        while (ws < b.size() && (b[ws] == '\n' || b[ws] == ' ' || b[ws] == '\r' || b[ws] == '\t')) ++ws;
        const std::string_view rest = b.substr(ws);
        bool matched = false;
        for (auto m : {resp_open, tools_open, msg_close, end_msg, eos}) {
          if (state_ == state::after_content && m == resp_open) continue;
          if (rest.substr(0, m.size()) == m) {
            consume(ws + m.size());
            state_ = m == resp_open ? state::content : m == tools_open ? state::tools : m == msg_close ? state::closed : state::done;
            matched = true;
            break;
          }
        }
        if (matched) continue;
        if (!final && (rest.empty() || held_suffix(rest, k3_markers) == rest.size())) return d; // undecided
        if (state_ == state::after_content && blank(b)) {
          consume(b.size());
          return d;
        }
        // Text without a response opener: it is the answer (models sometimes skip the tag).
        state_ = state::content;
        continue;
      }
      case state::content: {
        const hit h = take_until(buf_, d.content, {resp_close, tools_open, msg_close, end_msg, eos}, k3_markers, final);
        if (h.pos == std::string_view::npos) return d;
        state_ = h.marker == resp_close ? state::after_content
                 : h.marker == tools_open ? state::tools
                 : h.marker == msg_close  ? state::closed
                                          : state::done;
        continue;
      }
      case state::tools: {
        const auto c = b.find(call_close);
        const hit h = earliest(b, {tools_close, end_msg, eos, msg_close});
        if (c != std::string_view::npos && c < h.pos) {
          const auto start = b.find(call_open);
          if (start != std::string_view::npos && start < c) {
            parsed_call pc;
            if (parse_k3_call(b.substr(start, c + call_close.size() - start), pc)) d.calls.push_back(std::move(pc));
          }
          consume(c + call_close.size());
          continue;
        }
        if (h.pos != std::string_view::npos) {
          consume(h.pos + h.marker.size());
          state_ = h.marker == tools_close || h.marker == msg_close ? state::closed : state::done;
          continue;
        }
        if (final) consume(b.size()); // a call cut off mid-way is dropped
        return d;
      }
      case state::closed: {
        const hit h = earliest(b, {end_msg, eos});
        if (h.pos != std::string_view::npos) {
          consume(h.pos + h.marker.size());
          state_ = state::done;
          continue;
        }
        const std::size_t keep = final ? 0 : held_suffix(b, k3_markers);
        consume(b.size() - keep); // stray text after the message closed is not content
        return d;
      }
      case state::done:
        buf_.clear();
        return d;
    }
  }
}

// ---- K2 / Kimi Linear ---------------------------------------------------------------------

namespace {
constexpr std::string_view k2_section = "<|tool_calls_section_begin|>";
constexpr std::string_view k2_section_singular = "<|tool_call_section_begin|>";
constexpr std::string_view k2_section_end = "<|tool_calls_section_end|>";
constexpr std::string_view k2_call = "<|tool_call_begin|>";
constexpr std::string_view k2_args = "<|tool_call_argument_begin|>";
constexpr std::string_view k2_call_end = "<|tool_call_end|>";
constexpr std::string_view k2_im_end = "<|im_end|>";
constexpr std::string_view k2_eot = "[EOT]";
constexpr std::string_view k2_markers[] = {k2_section, k2_section_singular, k2_section_end, k2_call, k2_args,
                                           k2_call_end, k2_im_end, eos, k2_eot};
} // namespace

parse_delta k2_output_parser::feed(std::string_view text) {
  buf_.append(text);
  return run(false);
}

parse_delta k2_output_parser::finish() { return run(true); }

parse_delta k2_output_parser::run(bool final) {
  parse_delta d;
  for (;;) {
    std::string_view b = buf_;
    if (state_ == state::content) {
      const hit h = take_until(buf_, d.content, {k2_section, k2_section_singular, k2_im_end, eos, k2_eot}, k2_markers, final);
      if (h.pos == std::string_view::npos) return d;
      state_ = h.marker == k2_section || h.marker == k2_section_singular ? state::calls : state::done;
      continue;
    }
    if (state_ == state::calls) {
      const auto c = b.find(k2_call_end);
      const hit h = earliest(b, {k2_section_end, k2_im_end, eos, k2_eot});
      if (c != std::string_view::npos && c < h.pos) {
        const auto s = b.find(k2_call);
        const auto a = b.find(k2_args);
        if (s != std::string_view::npos && a != std::string_view::npos && s < a && a < c) {
          const std::string id(b.substr(s + k2_call.size(), a - s - k2_call.size()));
          std::string name = id.substr(0, id.find(':'));
          if (const auto dot = name.rfind('.'); dot != std::string::npos) name = name.substr(dot + 1);
          if (!name.empty())
            d.calls.push_back({name, std::string(b.substr(a + k2_args.size(), c - a - k2_args.size()))});
        }
        buf_.erase(0, c + k2_call_end.size());
        continue;
      }
      if (h.pos != std::string_view::npos) {
        buf_.erase(0, h.pos + h.marker.size());
        state_ = h.marker == k2_section_end ? state::content : state::done;
        continue;
      }
      if (final) buf_.clear();
      return d;
    }
    buf_.clear();
    return d;
  }
}

} // namespace k3::chat
