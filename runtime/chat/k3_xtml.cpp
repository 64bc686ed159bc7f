#include "runtime/chat/k3_xtml.hpp"

#include <algorithm>
#include <cctype>

namespace k3::chat {
namespace {

using seg_list = std::vector<tok::segment>;

struct builder {
  seg_list segs;
  void ctrl(std::string_view s) { segs.push_back({std::string(s), true}); }
  void text(std::string_view s) {
    if (!s.empty()) segs.push_back({std::string(s), false});
  }
  // An attribute is four text segments — ` key`, `="`, the escaped value, `"` — exactly as
  // encoding_k3.py emits them, so BPE never merges across those boundaries (spec §16.6).
  void open(std::string_view tag, const std::vector<std::pair<std::string, std::string>>& attrs = {}) {
    ctrl("<|open|>");
    text(tag);
    for (const auto& [k, v] : attrs) {
      text(" " + k);
      text("=\"");
      text(escape_attr(v));
      text("\"");
    }
    ctrl("<|sep|>");
  }
  void close(std::string_view tag) {
    ctrl("<|close|>");
    text(tag);
    ctrl("<|sep|>");
  }
  void end_of_msg() { ctrl("<|end_of_msg|>"); }
  void system_message(std::string_view kind, std::string_view body) {
    open("message", {{"role", "system"}, {"type", std::string(kind)}});
    text(strip(body));
    close("message");
    end_of_msg();
  }
  static std::string_view strip(std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
  }
};

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
}


// A message's content in order (encoding_k3.py _render_content): text parts as ordinary text,
// each image as its media block — `<|media_begin|>image {W}x{H}<|media_content|>`, one
// <|media_pad|> per embedding token, `<|media_end|>` — with special tokens allowed only there.
void render_content(builder& b, const message& m) {
  if (!m.parts) return b.text(m.content);
  std::string pending;
  for (const auto& p : *m.parts) {
    if (p.type != "image_url" && p.type != "image") {
      pending += p.text;
      continue;
    }
    b.text(pending);
    pending.clear();
    if (p.media_tokens <= 0 || p.media_w <= 0 || p.media_h <= 0)
      throw render_error("an image part was not decoded before rendering (no size or token count)");
    std::string blk = "<|media_begin|>image " + std::to_string(p.media_w) + "x" + std::to_string(p.media_h) + "<|media_content|>";
    blk.reserve(blk.size() + static_cast<std::size_t>(p.media_tokens) * 13 + 13);
    for (std::int64_t i = 0; i < p.media_tokens; ++i) blk += "<|media_pad|>";
    blk += "<|media_end|>";
    b.ctrl(blk);
  }
  b.text(pending);
}

std::string compact_tools(const json::value& tools) {
  return json::dump(json::deep_sorted(tools), {true, false});
}

// Step 1 of build_chat_segments: reorder runs of tool messages to the order of the preceding
// assistant's calls (only when every message in the run resolves by id) and name them.
std::vector<message> normalise(const std::vector<message>& in) {
  std::vector<message> out = in;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i].role != "assistant" || out[i].tool_calls.empty()) continue;
    std::size_t j = i + 1;
    while (j < out.size() && out[j].role == "tool") ++j;
    if (j == i + 1) continue;
    const auto& calls = out[i].tool_calls;
    std::vector<std::pair<std::size_t, message>> keyed;
    bool all = true;
    for (std::size_t t = i + 1; t < j; ++t) {
      auto it = std::find_if(calls.begin(), calls.end(), [&](const tool_call& c) { return !c.id.empty() && c.id == out[t].tool_call_id; });
      if (it == calls.end()) {
        all = false;
        break;
      }
      message m = out[t];
      if (m.tool.empty()) m.tool = it->name;
      keyed.emplace_back(static_cast<std::size_t>(it - calls.begin()), std::move(m));
    }
    if (!all) continue;
    std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (std::size_t t = i + 1; t < j; ++t) out[t] = std::move(keyed[t - i - 1].second);
  }
  return out;
}

const char* json_type_name(const json::value& v) {
  switch (v.k) {
    case json::value::kind::boolean: return "boolean";
    case json::value::kind::null: return "null";
    case json::value::kind::integer:
    case json::value::kind::real: return "number";
    case json::value::kind::string: return "string";
    case json::value::kind::array: return "array";
    case json::value::kind::object: return "object";
  }
  return "string";
}

void render_tool_calls(builder& b, const message& m, std::size_t msg_index) {
  b.open("tools");
  for (std::size_t c = 0; c < m.tool_calls.size(); ++c) {
    const auto& call = m.tool_calls[c];
    b.open("call", {{"tool", call.name}, {"index", std::to_string(c + 1)}});
    if (blank(call.arguments)) { // empty or whitespace-only arguments: a call with no arguments
      b.close("call");
      continue;
    }
    json::value args;
    bool parsed = true;
    try {
      args = json::parse(call.arguments);
    } catch (const json::parse_error&) {
      parsed = false;
    }
    if (!parsed) {
      b.open("json", {{"type", "object"}}); // unparsable: keep the raw text as a JSON block
      b.text(call.arguments);
      b.close("json");
    } else {
      if (!args.is_object())
        throw render_error("messages[" + std::to_string(msg_index) + "].tool_calls[" + std::to_string(c) +
                           "].function.arguments must be a JSON object");
      for (const auto& [key, val] : args.members) {
        b.open("argument", {{"key", key}, {"type", json_type_name(val)}});
        b.text(val.is_string() ? val.s : json::dump(val));
        b.close("argument");
      }
    }
    b.close("call");
  }
  b.close("tools");
}

} // namespace

std::string escape_attr(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

std::string unescape_attr(std::string_view s) {
  std::string a;
  for (std::size_t i = 0; i < s.size();) {
    if (s.compare(i, 6, "&quot;") == 0) {
      a += '"';
      i += 6;
    } else {
      a += s[i++];
    }
  }
  std::string out;
  for (std::size_t i = 0; i < a.size();) {
    if (a.compare(i, 5, "&amp;") == 0) {
      out += '&';
      i += 5;
    } else {
      out += a[i++];
    }
  }
  return out;
}

std::string join(const std::vector<tok::segment>& segs) {
  std::string out;
  for (const auto& s : segs) out += s.text;
  return out;
}

std::vector<tok::segment> render_k3(const conversation& conv) {
  builder b;
  const auto msgs = normalise(conv.messages);
  if (conv.tools && !conv.tools->items.empty())
    b.system_message("tool-declare", "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n" +
                                         compact_tools(*conv.tools) + "\n```");
  if (conv.thinking && !conv.thinking_effort.empty()) {
    if (conv.thinking_effort != "low" && conv.thinking_effort != "high" && conv.thinking_effort != "max")
      throw render_error("thinking_effort must be low, high or max, got '" + conv.thinking_effort + "'");
    b.system_message("thinking-effort",
                     "`thinking_effort` guides on how much to think in your thinking channel (not including the "
                     "response channel), supported values include `low`, `medium`, `high`, and `max`.\nNow the "
                     "system is invoked with `thinking_effort=" + conv.thinking_effort + "`.");
  }
  std::size_t tool_index = 0;
  const message* last_assistant = nullptr;
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    const message& m = msgs[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (m.role == "system" && m.tools) {
      b.system_message("tool-declare",
                       "## New Tools Available\nThe system dynamically extends the toolset via lazy-loading.\nYou "
                       "have access to all existing and extended tools.\nHere are the specs for the extended "
                       "tools.\n\n```json\n" + compact_tools(*m.tools) + "\n```");
    } else if (m.role == "system" || m.role == "user") {
      std::vector<std::pair<std::string, std::string>> attrs{{"role", m.role}};
      if (!m.name.empty()) attrs.emplace_back("name", m.name);
      b.open("message", attrs);
      render_content(b, m);
      b.close("message");
      b.end_of_msg();
    } else if (m.role == "assistant") {
      std::vector<std::pair<std::string, std::string>> attrs{{"role", "assistant"}};
      if (!m.name.empty()) attrs.emplace_back("name", m.name);
      b.open("message", attrs);
      if (conv.thinking) {
        b.open("think");
        if (!blank(m.reasoning_content)) b.text(m.reasoning_content);
        b.close("think");
      }
      b.open("response");
      render_content(b, m);
      b.close("response");
      if (!m.tool_calls.empty()) render_tool_calls(b, m, i);
      b.close("message");
      b.end_of_msg();
      last_assistant = &m;
      tool_index = 0;
    } else if (m.role == "tool") {
      ++tool_index;
      std::string name = !m.tool.empty() ? m.tool : m.name;
      if (name.empty() && last_assistant && tool_index <= last_assistant->tool_calls.size())
        name = last_assistant->tool_calls[tool_index - 1].name;
      if (name.empty())
        throw render_error(where + ": cannot tell which tool this result belongs to (no tool_call_id match, "
                                   "name, or call at this position)");
      b.open("message", {{"role", "tool"}, {"tool", name}, {"index", std::to_string(tool_index)}});
      render_content(b, m);
      b.close("message");
      b.end_of_msg();
    } else {
      throw render_error(where + ".role '" + m.role + "' is not supported (system, user, assistant, tool)");
    }
  }
  if (conv.tool_choice == "required")
    b.system_message("tool-choice", "The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message.");
  else if (conv.tool_choice == "none")
    b.system_message("tool-choice", "The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next message.");
  if (conv.response_format) {
    const json::value* type = conv.response_format->find("type");
    const std::string t = type && type->is_string() ? type->s : "";
    const std::string head = "Your response must be raw JSON data without markdown code blocks (```json) or any additional formatting.";
    if (t == "json_object") {
      b.system_message("response-format", "The system is invoked with `response_format=json_object`.\n" + head);
    } else if (t == "json_schema") {
      const json::value* js = conv.response_format->find("json_schema");
      const json::value* schema = nullptr;
      if (js && js->is_object()) {
        schema = js->find("schema");
        if (!schema) schema = js->find("json_schema");
        if (!schema) schema = js;
      }
      const std::string body = schema ? json::dump(json::deep_sorted(*schema), {true, false}) : "{}";
      b.system_message("response-format", "The system is invoked with `response_format=json_schema`.\n" + head +
                                              "\nThe JSON data must match the following schema:\n```json\n" + body + "\n```");
    }
  }
  if (conv.add_generation_prompt) {
    b.open("message", {{"role", "assistant"}});
    b.open(conv.thinking ? "think" : "response");
  }
  return b.segs;
}

} // namespace k3::chat
