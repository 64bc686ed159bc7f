#pragma once
// Helpers shared by the JSON Schema compiler's parts (json_schema.cpp: JSON values;
// json_schema_xtml.cpp: K3 XTML arguments). Internal to runtime/grammar.

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/grammar/json_schema.hpp"

namespace k3::grammar::schema_detail {

using kind = json::value::kind;

inline const std::set<std::string> annotations = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                                  "deprecated", "readOnly", "writeOnly", "markdownDescription", "$defs",
                                           "definitions", "$anchor", "example", "strict"};
inline const std::set<std::string> supported = {"type", "properties", "required", "additionalProperties", "enum", "const",
                                         "anyOf", "oneOf", "allOf", "$ref", "items", "prefixItems", "minItems",
                                         "maxItems", "minLength", "maxLength", "pattern", "format", "minimum",
                                         "maximum", "exclusiveMinimum", "exclusiveMaximum", "nullable", "uniqueItems"};

inline bool is_annotation(const std::string& k) { return annotations.count(k) || k.rfind("x-", 0) == 0; }

inline const json::value* get(const json::value& s, std::string_view k) { return s.is_object() ? s.find(k) : nullptr; }

inline double num(const json::value& v) { return std::strtod(v.s.c_str(), nullptr); }

inline bool is_number(const json::value* v) { return v && (v->k == kind::integer || v->k == kind::real); }

inline std::int64_t to_int(const json::value& v, const std::string& kw, const std::string& path, std::int64_t lo = 0,
                     std::int64_t hi = INT64_MAX) {
  if (v.k != kind::integer) throw schema_error(kw, path, kw + " must be an integer");
  errno = 0;
  const long long x = std::strtoll(v.s.c_str(), nullptr, 10);
  if (errno == ERANGE || x < lo || x > hi) throw schema_error(kw, path, kw + " is out of range");
  return x;
}

inline json::value object_without(const json::value& s, std::initializer_list<std::string_view> drop) {
  json::value out;
  out.k = kind::object;
  for (const auto& [k, v] : s.members)
    if (std::find(drop.begin(), drop.end(), k) == drop.end()) out.members.emplace_back(k, v);
  return out;
}

inline bool has_constraints(const json::value& s) {
  if (!s.is_object()) return false;
  for (const auto& [k, v] : s.members)
    if (!is_annotation(k)) return true;
  return false;
}

/// Plain key characters of generated extra properties.
inline byte_bits key_bytes() {
  byte_bits b{};
  for (unsigned c = 'a'; c <= 'z'; ++c) set_bit(b, c);
  for (unsigned c = 'A'; c <= 'Z'; ++c) set_bit(b, c);
  for (unsigned c = '0'; c <= '9'; ++c) set_bit(b, c);
  set_bit(b, '_');
  return b;
}

/// Non-empty strings over key_bytes() that are none of `taken` (a trie's complement).
inline frag key_not_in(builder& b, const std::vector<std::string>& taken) {
  struct tnode {
    std::map<unsigned char, int> kids;
    bool terminal = false;
  };
  std::vector<tnode> t(1);
  for (const auto& s : taken) {
    int at = 0;
    bool plain = !s.empty();
    for (unsigned char c : s) plain = plain && has_bit(key_bytes(), c);
    if (!plain) continue; // a declared key with other characters cannot collide
    for (unsigned char c : s) {
      auto it = t[at].kids.find(c);
      if (it == t[at].kids.end()) {
        t.push_back({});
        const int n = static_cast<int>(t.size() - 1);
        t[at].kids[c] = n;
        at = n;
      } else {
        at = it->second;
      }
    }
    t[at].terminal = true;
  }
  const auto all = key_bytes();
  const frag out = b.empty();
  std::vector<std::uint32_t> node(t.size());
  for (std::size_t i = 0; i < t.size(); ++i) node[i] = b.empty().in;
  const frag free = b.empty();
  // free: any further key characters, then done.
  {
    const frag loop = b.byte_set(all);
    b.link(free.in, loop.in);
    b.link(loop.out, free.in);
    b.link(free.in, out.in);
  }
  for (std::size_t i = 0; i < t.size(); ++i) {
    byte_bits rest = all;
    for (const auto& [c, k] : t[i].kids) {
      rest[c >> 6] &= ~(std::uint64_t{1} << (c & 63));
      const frag e = b.sym(c);
      b.link(node[i], e.in);
      b.link(e.out, node[static_cast<std::size_t>(k)]);
    }
    if (rest != byte_bits{}) {
      const frag e = b.byte_set(rest);
      b.link(node[i], e.in);
      b.link(e.out, free.in);
    }
    if (i != 0 && !t[i].terminal) b.link(node[i], out.in);
  }
  return {node[0], out.out};
}

inline frag json_sep(builder& b) { return b.alt({b.literal(","), b.literal(", ")}); }
inline frag json_colon(builder& b) { return b.alt({b.literal(":"), b.literal(": ")}); }

} // namespace k3::grammar::schema_detail
