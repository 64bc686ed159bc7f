#pragma once
// Text languages as grammar fragments: code-point sets in UTF-8, a regular-expression subset (the
// JSON Schema `pattern` dialect that can be enforced), the `format`s that can be enforced, and
// decimal integer ranges.
//
// Regex subset: literals, `.`, classes `[...]` / `[^...]` with ranges, `\d \w \s \D \W \S`, escapes
// of metacharacters and `\n \t \r \f \v \uXXXX`, groups `( )` / `(?: )`, alternation, quantifiers
// `* + ? {m} {m,} {m,n}` (and their lazy forms, same language), anchors `^ $` at the ends. A JSON
// Schema pattern is unanchored ("search"): an end without its anchor accepts anything around.
// Backreferences, lookaround, named groups and inline flags are refused (regex_error) — a pattern
// that cannot be enforced is never silently ignored.
//
// `escape` decides how a code point is written: raw UTF-8 (K3 string arguments) or inside a JSON
// string (`"` and `\` and control characters escaped).

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/grammar/grammar.hpp"

namespace k3::grammar {

struct regex_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class text_mode { raw, json };

/// Sorted, disjoint inclusive code-point ranges.
using cp_set = std::vector<std::pair<std::uint32_t, std::uint32_t>>;
[[nodiscard]] cp_set cp_complement(const cp_set& s);
[[nodiscard]] cp_set cp_union(cp_set a, const cp_set& b);

/// One code point of `set`, written per `mode`.
frag code_point(builder& b, const cp_set& set, text_mode mode);
/// Any one character (a code point in raw mode; an unescaped character or an escape in JSON).
frag any_char(builder& b, text_mode mode);

/// A pattern (JSON Schema semantics: unanchored unless anchored). Throws regex_error.
frag regex(builder& b, std::string_view pattern, text_mode mode);

/// format: date, time, date-time, email, uuid, ipv4, uri, hostname. Throws regex_error for others.
frag format(builder& b, std::string_view name, text_mode mode);

/// Decimal integers in [lo, hi] (no leading zeros, "-0" never), as JSON writes them.
frag integer_range(builder& b, std::int64_t lo, std::int64_t hi);
/// Any decimal integer of at least `min_digits` digits that is ≥ 10^(k) … unbounded helpers.
frag integer_at_least(builder& b, std::int64_t lo);
frag integer_at_most(builder& b, std::int64_t hi);

} // namespace k3::grammar
