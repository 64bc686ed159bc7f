#pragma once
// A JSON Schema validator for the keyword set json_schema.hpp enforces (the same semantics,
// written separately from the grammar compiler so each checks the other): type, properties,
// required, additionalProperties, enum, const, anyOf, oneOf (exactly one), allOf, $ref (local),
// items, prefixItems, minItems, maxItems, minLength, maxLength (code points), pattern (the same
// regex subset, matched with std::regex on ECMAScript syntax over ASCII-safe input), format,
// minimum/maximum/exclusive*, nullable. Used by the tests and `k3 bench grammar`.

#include <string>

#include "runtime/chat/json.hpp"

namespace k3::grammar {

/// Empty when `v` is valid under `schema`; otherwise the first reason, with a path.
[[nodiscard]] std::string validate_json(const json::value& v, const json::value& schema);

} // namespace k3::grammar
