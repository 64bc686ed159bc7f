#include "runtime/chat/k2_format.hpp"

#include <deque>

namespace k3::chat {
namespace {

std::string body_text(const message& m) {
  return flatten_content(m, "<|media_start|>image<|media_content|><|media_pad|><|media_end|>");
}

} // namespace

std::vector<tok::segment> render_k2(const conversation& conv) {
  // As the HF Kimi-K2-Instruct template renders under transformers (trim_blocks, lstrip_blocks),
  // spec §16.5 and its 2026-12-03 notes.
  std::vector<tok::segment> s;
  auto ctrl = [&](const char* t) { s.push_back({t, true}); };
  auto text = [&](const std::string& t) {
    if (!t.empty()) s.push_back({t, false});
  };
  if (conv.tools && !conv.tools->items.empty()) {
    ctrl("<|im_system|>");
    text("tool_declare");
    ctrl("<|im_middle|>");
    text(json::dump(json::deep_sorted(*conv.tools), {true, false}));
    ctrl("<|im_end|>");
  }
  if (conv.messages.empty() || conv.messages.front().role != "system") {
    ctrl("<|im_system|>");
    text("system");
    ctrl("<|im_middle|>");
    text("You are Kimi, an AI assistant created by Moonshot AI.");
    ctrl("<|im_end|>");
    text("\n"); // the template's text before {% endif %} keeps this newline
  }
  // Every assistant tool call is labelled functions.NAME:COUNTER (one counter for the whole
  // conversation) and queued; each tool result takes the label at the front of the queue, so
  // results are labelled by position, never by the client's tool_call_id.
  std::deque<std::string> pending;
  int counter = 0;
  for (std::size_t i = 0; i < conv.messages.size(); ++i) {
    const message& m = conv.messages[i];
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
      throw render_error("messages[" + std::to_string(i) + "].role '" + m.role +
                         "' is not supported (system, user, assistant, tool)");
    ctrl(m.role == "user" ? "<|im_user|>" : m.role == "assistant" ? "<|im_assistant|>" : "<|im_system|>");
    text(!m.name.empty() ? m.name : m.role);
    ctrl("<|im_middle|>");
    if (m.role == "assistant" && !m.tool_calls.empty()) {
      text(body_text(m));
      ctrl("<|tool_calls_section_begin|>");
      for (const auto& c : m.tool_calls) {
        const std::string id = "functions." + c.name + ":" + std::to_string(counter++);
        pending.push_back(id);
        ctrl("<|tool_call_begin|>");
        text(id);
        ctrl("<|tool_call_argument_begin|>");
        text(c.arguments); // a string is rendered verbatim, the empty string included
        ctrl("<|tool_call_end|>");
      }
      ctrl("<|tool_calls_section_end|>");
    } else if (m.role == "tool") {
      std::string id;
      if (!pending.empty()) {
        id = pending.front();
        pending.pop_front();
      } else {
        id = "functions.";
        id.append(m.name.empty() ? std::string_view("unknown") : std::string_view(m.name));
        id.append(":");
        id.append(std::to_string(counter));
      }
      text("## Return of " + id + "\n" + body_text(m));
    } else {
      text(body_text(m));
    }
    ctrl("<|im_end|>");
  }
  if (conv.add_generation_prompt) {
    ctrl("<|im_assistant|>");
    text("assistant");
    ctrl("<|im_middle|>");
  }
  return s;
}

} // namespace k3::chat
