#pragma once
// JSON Schema → grammar fragments: the JSON text of a valid value, and (for K3 tool calls) the
// XTML argument elements of a valid arguments object.
//
// Supported: `type` (and lists), `properties`, `required`, `additionalProperties` (bool or
// schema; absent generates no extra keys, which still validates), `enum`, `const`, `anyOf`,
// `oneOf` (as anyOf: branches should be disjoint), `allOf` (merged), `$ref` into `$defs` /
// `definitions` / the root (recursion included), `items`, `prefixItems`, `minItems`/`maxItems`
// (≤ 256), `minLength`/`maxLength` (lengths above 256 are capped at 256, which still validates),
// `pattern` (regex.hpp's subset), `format` (date, time, date-time, email, uuid, ipv4, uri,
// hostname), integer vs number, `minimum`/`maximum`/`exclusive*` (any bound on integers;
// integer-valued bounds on numbers), `nullable`, and the annotations (title, description,
// default, examples, …) which change nothing. Anything else that constrains values — `not`,
// `if`/`then`/`else`, `patternProperties`, `multipleOf`, `uniqueItems: true`, `contains`,
// `dependentRequired`, `minProperties`, … — is a schema_error naming the keyword and its path:
// never silently ignored.
//
// JSON text: no whitespace except an optional space after `,` and `:` (both json.dumps and
// compact output parse), numbers without exponents.

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>

#include "runtime/chat/json.hpp"
#include "runtime/grammar/grammar.hpp"

namespace k3::grammar {

struct schema_error : std::runtime_error {
  schema_error(std::string kw, std::string p, const std::string& what)
      : std::runtime_error(p + (p.empty() ? "" : ": ") + what), keyword(std::move(kw)), path(std::move(p)) {}
  std::string keyword; ///< the schema keyword that cannot be enforced (or is malformed)
  std::string path;    ///< where, e.g. tools[0].function.parameters.properties.when.format
};

/// The special symbols XTML arguments use (K3).
struct xtml_symbols {
  symbol open = 0, close = 0, sep = 0;
};

class schema_compiler {
public:
  /// `document` is the schema `#` refers to; `path` names it in errors.
  schema_compiler(builder& b, const json::value& document, std::string path);

  /// The JSON text of a value valid under the document (a rule).
  std::uint32_t value_rule();
  /// K3: the argument elements of a call whose arguments object must be valid under the
  /// document (`<|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>` per
  /// property; string values raw, others JSON).
  frag xtml_arguments(const xtml_symbols& m);
  /// K3 argument elements of any object (a tool without a schema, or a non-strict one).
  static frag xtml_any_arguments(builder& b, const xtml_symbols& m, std::uint32_t any_value);
  /// Any JSON value (a rule, memoized per builder use).
  std::uint32_t any_value_rule();

private:
  frag emit_value(const json::value& s, const std::string& path);
  frag typed(const json::value& s, const std::string& type, const std::string& path);
  frag object(const json::value& s, const std::string& path);
  frag array(const json::value& s, const std::string& path);
  frag string(const json::value& s, const std::string& path, bool raw);
  frag number(const json::value& s, const std::string& path, bool integer);
  frag any_string_body(bool raw);
  const json::value& resolve(const std::string& ref, const std::string& path);
  json::value merged(const json::value& s, const std::string& path);
  void check_keywords(const json::value& s, const std::string& path);
  /// (type attribute, schema) pairs a K3 argument value can take.
  std::vector<std::pair<std::string, json::value>> variants(const json::value& s, const std::string& path, int depth = 0);
  frag xtml_value(const json::value& prop, const std::string& path);

  builder& b_;
  const json::value& doc_;
  std::string path_;
  std::map<std::string, std::uint32_t> ref_rules_;
  std::uint32_t any_rule_ = 0xffffffffu;
  xtml_symbols m_{};
};

/// Checks `schema` can be enforced (compiles it into a throwaway grammar). Throws schema_error.
void check_schema(const json::value& schema, const std::string& path);

} // namespace k3::grammar
