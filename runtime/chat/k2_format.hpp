#pragma once
// Kimi K2 / Kimi Linear chat format (spec §16.5): <|im_user|> / <|im_assistant|> /
// <|im_system|> openers, role or name, <|im_middle|>, body, <|im_end|>; tool declarations as
// compact deep-sorted JSON; tool calls in the <|tool_calls_section_begin|> envelope with ids
// `functions.NAME:IDX`; tool results as "## Return of ID". Segments as for K3: markers are
// control, the rest text.
//
// Call ids: a client id already of the form functions.NAME:IDX is kept verbatim (K2-Thinking
// behaviour); otherwise the id is derived as functions.NAME:N with a conversation-wide
// 0-based counter (later K2-Instruct behaviour), and tool results that referenced the
// client's id are rendered with the derived id so the pairing survives.

#include <vector>

#include "runtime/chat/conversation.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"

namespace k3::chat {

[[nodiscard]] std::vector<tok::segment> render_k2(const conversation& conv);

} // namespace k3::chat
