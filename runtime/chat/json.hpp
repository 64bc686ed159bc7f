#pragma once
// A small ordered JSON value for the chat formats, parsed with simdjson and printed the way
// Python's json.dumps prints it (the reference renderers are Python): ensure_ascii=False,
// either default separators (", ", ": ") or compact (",", ":"), optional deep key sort, ints
// kept exact (64-bit range), floats printed like Python's repr.
//
// Objects keep insertion order (json.loads does); a duplicate key keeps its first position and
// takes the last value, as Python's dict does.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace k3::json {

struct value {
  // Special members are defined out of line (json.cpp), where value is complete: computing
  // them inside the class would instantiate std::pair<std::string, value> while value is still
  // incomplete, which clang rejects.
  value();
  value(const value&);
  value(value&&) noexcept;
  value& operator=(const value&);
  value& operator=(value&&) noexcept;
  ~value();

  enum class kind { null, boolean, integer, real, string, array, object };
  kind k = kind::null;
  bool b = false;
  std::string s; ///< string contents, or the number as Python prints it
  std::vector<value> items;
  std::vector<std::pair<std::string, value>> members;

  static value string_value(std::string text) {
    value v;
    v.k = kind::string;
    v.s = std::move(text);
    return v;
  }
  [[nodiscard]] bool is_object() const noexcept { return k == kind::object; }
  [[nodiscard]] bool is_string() const noexcept { return k == kind::string; }
  /// Member by key, or nullptr.
  [[nodiscard]] const value* find(std::string_view key) const noexcept;
};

struct parse_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Parses one JSON document. Throws parse_error with simdjson's reason.
[[nodiscard]] value parse(std::string_view text);

struct dump_options {
  bool compact = false;   ///< separators (",", ":") instead of (", ", ": ")
  bool sort_keys = false; ///< deep key sort (sort_keys=True)
};

[[nodiscard]] std::string dump(const value& v, const dump_options& opt = {});

/// JSON string literal with Python's ensure_ascii=False escaping.
[[nodiscard]] std::string quote(std::string_view s);

/// Python repr() of a double (what json.dumps prints for floats).
[[nodiscard]] std::string python_float_repr(double d);

/// Copy with object keys sorted recursively.
[[nodiscard]] value deep_sorted(const value& v);

} // namespace k3::json
