#pragma once
// A chat request as the renderers see it (OpenAI chat-completions shape, already decoded
// from JSON by the server). Wire-format concerns (field names, HTTP errors) stay in net/.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/chat/json.hpp"

namespace k3::chat {

struct content_part {
  std::string type; ///< "text", "image_url", "image", ...
  std::string text;
  std::string url = {};  ///< image parts: the image_url's url
  /// Image parts, filled by the server once the image is decoded: its original size and the
  /// number of <|media_pad|> tokens it takes (spec vision.md §6.2, §7).
  int media_w = 0, media_h = 0;
  std::int64_t media_tokens = 0;
};

struct tool_call {
  std::string id;
  std::string name;
  std::string arguments; ///< the OpenAI `function.arguments` JSON string
};

struct message {
  std::string role; ///< system, user, assistant, tool
  std::string content;
  std::optional<std::vector<content_part>> parts; ///< when content was a list of parts
  std::string reasoning_content;
  std::string name;
  std::string tool_call_id;
  std::vector<tool_call> tool_calls;
  std::optional<json::value> tools; ///< a system message carrying tools (dynamic declare)
  std::string tool;                 ///< K3: tool name on a tool message (set by normalisation)
};

struct conversation {
  std::vector<message> messages;
  std::optional<json::value> tools; ///< array of tool definitions
  bool thinking = true;             ///< K3 default: thinking on
  std::string thinking_effort = "max";
  std::string tool_choice;                    ///< "", "auto", "required", "none"
  std::optional<json::value> response_format; ///< {"type": ...}
  bool add_generation_prompt = true;
};

/// Message text: the content string, or its parts concatenated with image parts replaced by
/// `image_placeholder` (each format has its own).
[[nodiscard]] inline std::string flatten_content(const message& m, std::string_view image_placeholder) {
  if (!m.parts) return m.content;
  std::string out;
  for (const auto& p : *m.parts) {
    if (p.type == "image_url" || p.type == "image") out += image_placeholder;
    else out += p.text;
  }
  return out;
}

/// A conversation the format cannot express: message says which message/field and why.
struct render_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

} // namespace k3::chat
