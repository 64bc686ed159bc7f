#include "runtime/chat/output_parser.hpp"

#include <algorithm>

#include "runtime/chat/json.hpp"
#include "runtime/chat/k3_xtml.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"

namespace k3::chat {
namespace {

std::string_view tag_name(std::string_view header) {
  std::size_t a = 0;
  while (a < header.size() && header[a] == ' ') ++a;
  std::size_t b = a;
  while (b < header.size() && header[b] != ' ') ++b;
  return header.substr(a, b - a);
}

std::string attr(const std::vector<std::pair<std::string, std::string>>& a, std::string_view key) {
  for (const auto& [k, v] : a)
    if (k == key) return v;
  return {};
}

/// JSON string body (no quotes) of text: safe to split anywhere between characters.
std::string escaped(std::string_view t) {
  std::string q = json::quote(t);
  return q.substr(1, q.size() - 2);
}

call_delta& last_call(parse_delta& d, std::size_t index) {
  if (d.calls.empty() || d.calls.back().index != index) {
    d.calls.emplace_back();
    d.calls.back().index = index;
  }
  return d.calls.back();
}

} // namespace

void parse_delta::append(parse_delta&& d) {
  reasoning += d.reasoning;
  content += d.content;
  for (auto& c : d.calls) {
    if (!calls.empty() && calls.back().index == c.index && !c.begin) calls.back().arguments += c.arguments;
    else calls.push_back(std::move(c));
  }
}

std::vector<std::pair<std::string, std::string>> parse_attributes(std::string_view h) {
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t i = 0; // past the tag name
  while (i < h.size() && h[i] == ' ') ++i;
  while (i < h.size() && h[i] != ' ') ++i;
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

// ---- K3 ------------------------------------------------------------------------------------

k3_output_parser::marker_ids k3_output_parser::ids_of(const tok::kimi_tokenizer& t) {
  marker_ids m;
  m.open = t.id_of("<|open|>");
  m.close = t.id_of("<|close|>");
  m.sep = t.id_of("<|sep|>");
  m.end_of_msg = t.id_of("<|end_of_msg|>");
  m.eos = t.id_of("[EOS]");
  return m;
}

k3_output_parser::k3_output_parser(marker_ids ids, bool starts_in_reasoning, bool report_calls)
    : ids_(ids), report_(report_calls), mode_(starts_in_reasoning ? mode::reasoning : mode::content) {}

void k3_output_parser::args(parse_delta& d, std::string s) {
  if (s.empty() || !report_) return;
  last_call(d, calls_ - 1).arguments += s;
}

void k3_output_parser::text(std::string_view t, parse_delta& d) {
  if (t.empty()) return;
  if (in_header_) {
    header_.append(t);
    return;
  }
  switch (mode_) {
    case mode::reasoning: d.reasoning.append(t); return;
    case mode::content: d.content.append(t); return;
    case mode::between:
    case mode::after_content: {
      // Whitespace between channels is layout; other text is the answer (models sometimes skip
      // the response tag), leading whitespace dropped.
      std::size_t ws = 0;
      while (ws < t.size() && (t[ws] == ' ' || t[ws] == '\n' || t[ws] == '\r' || t[ws] == '\t')) ++ws;
      if (ws == t.size()) return;
      mode_ = mode::content;
      d.content.append(t.substr(ws));
      return;
    }
    case mode::argument:
      if (arg_string_) args(d, escaped(t));
      else arg_raw_.append(t);
      return;
    case mode::json: args(d, std::string(t)); return;
    case mode::tools:
    case mode::call:
    case mode::dropped_call:
    case mode::closed:
    case mode::done: return; // layout between calls, text after the message: not content
  }
}

void k3_output_parser::close_argument(parse_delta& d) {
  if (mode_ != mode::argument) return;
  if (arg_string_) {
    args(d, "\"");
  } else {
    // Re-serialized like json.dumps; malformed JSON keeps its text as a string.
    std::string out;
    try {
      out = json::dump(json::parse(arg_raw_));
    } catch (const json::parse_error&) {
      out = json::quote(arg_raw_);
    }
    args(d, out);
  }
  arg_raw_.clear();
  mode_ = mode::call;
}

void k3_output_parser::close_call(parse_delta& d) {
  if (mode_ == mode::argument) close_argument(d);
  if (call_open_) args(d, any_arg_ ? "}" : "{}");
  call_open_ = false;
  mode_ = mode::tools;
}

void k3_output_parser::header(parse_delta& d) {
  in_header_ = false;
  const std::string h = std::move(header_);
  header_.clear();
  const auto name = tag_name(h);
  // Switching channel in the middle of a call closes the call first (its arguments stay JSON).
  auto leave_call = [&] {
    if (call_open_ || mode_ == mode::call || mode_ == mode::argument || mode_ == mode::json || mode_ == mode::dropped_call)
      close_call(d);
  };
  if (!header_close_) {
    if (name == "think") {
      if (mode_ != mode::reasoning) { // a repeated opener is consumed
        leave_call();
        mode_ = mode::reasoning;
      }
    } else if (name == "response") {
      leave_call();
      mode_ = mode::content;
    } else if (name == "tools") {
      leave_call();
      mode_ = mode::tools; // also straight out of think: the model may skip response
    } else if (name == "call") {
      leave_call();
      const auto a = parse_attributes(h);
      const std::string tool = attr(a, "tool");
      if (tool.empty() || !report_) {
        mode_ = mode::dropped_call; // a call without a tool name is dropped (spec §16.7 rule 5)
        return;
      }
      call_open_ = true;
      any_arg_ = false;
      ++calls_;
      auto& c = last_call(d, calls_ - 1);
      c.begin = true;
      c.name = tool;
      mode_ = mode::call;
    } else if (name == "argument") {
      if (mode_ == mode::argument) close_argument(d);
      if (mode_ != mode::call) return; // not inside a call: ignore
      const auto a = parse_attributes(h);
      args(d, std::string(any_arg_ ? ", " : "{") + json::quote(attr(a, "key")) + ": ");
      any_arg_ = true;
      arg_string_ = attr(a, "type") == "string";
      if (arg_string_) args(d, "\"");
      mode_ = mode::argument;
    } else if (name == "json") {
      // A raw JSON block is honoured only as the whole call body.
      if (mode_ == mode::call && !any_arg_) {
        any_arg_ = true;
        call_open_ = false; // the block is the arguments: nothing to close
        mode_ = mode::json;
      }
    }
    // `message` and unknown tags: no channel change.
    return;
  }
  if (name == "think") {
    if (mode_ == mode::reasoning) mode_ = mode::between;
  } else if (name == "response") {
    if (mode_ == mode::content || mode_ == mode::reasoning) mode_ = mode::after_content;
  } else if (name == "argument") {
    close_argument(d);
  } else if (name == "json") {
    if (mode_ == mode::json) mode_ = mode::call;
  } else if (name == "call") {
    close_call(d);
  } else if (name == "tools" || name == "message") {
    leave_call();
    mode_ = mode::closed;
  }
}

parse_delta k3_output_parser::feed(std::int32_t token, std::string_view t) {
  parse_delta d;
  if (mode_ == mode::done) return d;
  text(t, d);
  if (token < 0) return d;
  if (token == ids_.open || token == ids_.close) {
    in_header_ = true; // an unterminated earlier header is dropped
    header_close_ = token == ids_.close;
    header_.clear();
  } else if (token == ids_.sep) {
    if (in_header_) header(d);
  } else if (token == ids_.end_of_msg || token == ids_.eos) {
    in_header_ = false;
    if (call_open_ || mode_ == mode::json) close_call(d);
    mode_ = mode::done;
  }
  return d;
}

parse_delta k3_output_parser::finish() {
  parse_delta d;
  in_header_ = false; // cut inside a marker: the partial header is structure, not text
  header_.clear();
  if (call_open_ || mode_ == mode::json || mode_ == mode::argument) close_call(d);
  return d;
}

// ---- K2 / Kimi Linear ---------------------------------------------------------------------

k2_output_parser::marker_ids k2_output_parser::ids_of(const tok::kimi_tokenizer& t) {
  marker_ids m;
  m.section_begin = t.id_of("<|tool_calls_section_begin|>");
  m.section_end = t.id_of("<|tool_calls_section_end|>");
  m.call_begin = t.id_of("<|tool_call_begin|>");
  m.arg_begin = t.id_of("<|tool_call_argument_begin|>");
  m.call_end = t.id_of("<|tool_call_end|>");
  m.im_end = t.id_of("<|im_end|>");
  m.eos = t.id_of("[EOS]");
  m.eot = t.id_of("[EOT]");
  return m;
}

parse_delta k2_output_parser::feed(std::int32_t token, std::string_view t) {
  parse_delta d;
  if (mode_ == mode::done) return d;
  if (!t.empty()) {
    switch (mode_) {
      case mode::content: d.content.append(t); break;
      case mode::call_id: id_.append(t); break;
      case mode::args: last_call(d, calls_ - 1).arguments.append(t); break;
      default: break; // between calls: layout
    }
  }
  if (token < 0) return d;
  if (token == ids_.section_begin) {
    if (mode_ == mode::content) mode_ = mode::section;
  } else if (token == ids_.call_begin) {
    if (mode_ != mode::content) {
      mode_ = mode::call_id;
      id_.clear();
    }
  } else if (token == ids_.arg_begin) {
    if (mode_ == mode::call_id) {
      // functions.NAME:IDX -> NAME (vLLM: id.split(":")[0].split(".")[-1])
      std::string name = id_.substr(0, id_.find(':'));
      if (const auto dot = name.rfind('.'); dot != std::string::npos) name = name.substr(dot + 1);
      while (!name.empty() && (name.back() == ' ' || name.back() == '\n')) name.pop_back();
      while (!name.empty() && (name.front() == ' ' || name.front() == '\n')) name.erase(0, 1);
      if (name.empty() || !report_) {
        mode_ = mode::dropped_call;
      } else {
        ++calls_;
        auto& c = last_call(d, calls_ - 1);
        c.begin = true;
        c.name = name;
        mode_ = mode::args;
      }
    }
  } else if (token == ids_.call_end) {
    if (mode_ == mode::args || mode_ == mode::dropped_call || mode_ == mode::call_id) mode_ = mode::section;
  } else if (token == ids_.section_end) {
    mode_ = mode::content;
  } else if (token == ids_.im_end || token == ids_.eos || token == ids_.eot) {
    mode_ = mode::done;
  }
  return d;
}

parse_delta k2_output_parser::finish() { return {}; }

} // namespace k3::chat
