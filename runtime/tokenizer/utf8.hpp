#pragma once
// UTF-8 helpers shared by the tokenizer, detokenizer and chat code.

#include <cstdint>
#include <string>
#include <string_view>

namespace k3::utf8 {

/// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 if the bytes there are not
/// a complete, well-formed sequence (overlong forms, surrogates and > U+10FFFF are invalid).
[[nodiscard]] int sequence_length(std::string_view s, std::size_t i) noexcept;

/// Decodes the code point at s[i] (REQUIRES sequence_length(s, i) > 0).
[[nodiscard]] char32_t decode_at(std::string_view s, std::size_t i) noexcept;

/// True if every byte of s belongs to a well-formed sequence.
[[nodiscard]] bool valid(std::string_view s) noexcept;

/// Byte offset of the first invalid byte, or npos.
[[nodiscard]] std::size_t first_invalid(std::string_view s) noexcept;

/// Python's str.isspace for one code point (Zs, and bidi classes WS, B, S).
[[nodiscard]] bool python_isspace(char32_t c) noexcept;

/// Appends the UTF-8 encoding of c.
void append(std::string& out, char32_t c);

/// Replaces invalid bytes with U+FFFD (for display and JSON output; never used on token ids).
[[nodiscard]] std::string sanitize(std::string_view s);

} // namespace k3::utf8
