#include "runtime/chat/k2_format.hpp"

#include <map>

namespace k3::chat {
namespace {

bool k2_style_id(const std::string& id) {
  return id.rfind("functions.", 0) == 0 && id.find(':') != std::string::npos;
}

std::string body_text(const message& m) {
  return flatten_content(m, "<|media_start|>image<|media_content|><|media_pad|><|media_end|>");
}

} // namespace

std::vector<tok::segment> render_k2(const conversation& conv) {
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
  }
  std::map<std::string, std::string> id_map; // client id -> rendered id
  int counter = 0;
  for (std::size_t i = 0; i < conv.messages.size(); ++i) {
    const message& m = conv.messages[i];
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
      throw render_error("messages[" + std::to_string(i) + "].role '" + m.role +
                         "' is not supported (system, user, assistant, tool)");
    ctrl(m.role == "user" ? "<|im_user|>" : m.role == "assistant" ? "<|im_assistant|>" : "<|im_system|>");
    text(!m.name.empty() ? m.name : m.role);
    ctrl("<|im_middle|>");
    if (m.role == "tool") {
      const auto it = id_map.find(m.tool_call_id);
      text("## Return of " + (it != id_map.end() ? it->second : m.tool_call_id) + "\n" + body_text(m));
    } else {
      text(body_text(m));
    }
    if (m.role == "assistant" && !m.tool_calls.empty()) {
      ctrl("<|tool_calls_section_begin|>");
      for (const auto& c : m.tool_calls) {
        const std::string id = k2_style_id(c.id) ? c.id : "functions." + c.name + ":" + std::to_string(counter);
        ++counter;
        if (!c.id.empty()) id_map[c.id] = id;
        ctrl("<|tool_call_begin|>");
        text(id);
        ctrl("<|tool_call_argument_begin|>");
        text(c.arguments.empty() ? "{}" : c.arguments);
        ctrl("<|tool_call_end|>");
      }
      ctrl("<|tool_calls_section_end|>");
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
