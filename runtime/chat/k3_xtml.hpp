#pragma once
// Kimi K3 "XTML" chat rendering (spec §16.6, after encoding_k3.py's build_chat_segments).
//
// Output is a list of segments: the four markers <|open|>, <|close|>, <|sep|>, <|end_of_msg|>
// are control segments, everything else (tag names, attributes, bodies) is text, so the
// tokenizer can encode segment by segment: user text that spells a marker stays plain bytes,
// and BPE never merges across a boundary. Bodies are not escaped; attribute values escape
// & and " (&amp; first).
//
// render() throws render_error for what the reference rejects (unresolvable tool messages,
// non-object tool arguments, unknown roles, bad thinking_effort).

#include <string>
#include <vector>

#include "runtime/chat/conversation.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"

namespace k3::chat {

[[nodiscard]] std::vector<tok::segment> render_k3(const conversation& conv);

/// Concatenated text of segments (for display and golden tests).
[[nodiscard]] std::string join(const std::vector<tok::segment>& segs);

/// Tokens of the trailing generation opener (<|open|> think|response <|sep|>) that Moonshot's
/// usage accounting leaves out of prompt_tokens.
inline constexpr int k3_generation_opener_tokens = 3;

/// Attribute escaping: & -> &amp;, then " -> &quot;.
[[nodiscard]] std::string escape_attr(std::string_view s);
[[nodiscard]] std::string unescape_attr(std::string_view s);

} // namespace k3::chat
