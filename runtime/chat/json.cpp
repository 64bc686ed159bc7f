#include "runtime/chat/json.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include <simdjson.h>

namespace k3::json {

value::value() = default;
value::value(const value&) = default;
value::value(value&&) noexcept = default;
value& value::operator=(const value&) = default;
value& value::operator=(value&&) noexcept = default;
value::~value() = default;

namespace {

namespace od = simdjson::ondemand;

[[noreturn]] void fail(simdjson::error_code e) { throw parse_error(simdjson::error_message(e)); }

template <class T>
T need(simdjson::simdjson_result<T>&& r) {
  T v;
  if (auto e = std::move(r).get(v)) fail(e);
  return v;
}

// A number token: integers keep their exact text (any size, as Python's int does; JSON forbids
// leading zeros, so the text is canonical), others go through the double parser and print like
// Python's repr.
value number(std::string_view raw, simdjson::simdjson_result<double> as_double) {
  while (!raw.empty() && (raw.back() == ' ' || raw.back() == '\n' || raw.back() == '\r' || raw.back() == '\t'))
    raw.remove_suffix(1);
  value out;
  const bool integral = raw.find_first_of(".eE") == std::string_view::npos;
  if (integral) {
    std::size_t i = raw.size() && raw[0] == '-' ? 1 : 0;
    const bool ok = i < raw.size() && (raw[i] != '0' || raw.size() == i + 1) &&
                    std::all_of(raw.begin() + static_cast<std::ptrdiff_t>(i), raw.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!ok) throw parse_error("invalid number " + std::string(raw.substr(0, 40)));
    out.k = value::kind::integer;
    out.s = std::string(raw);
    return out;
  }
  double d;
  if (auto e = std::move(as_double).get(d)) fail(e);
  out.k = value::kind::real;
  out.s = python_float_repr(d);
  return out;
}

value convert(od::value v, int depth) {
  if (depth > 256) throw parse_error("JSON nested too deeply");
  value out;
  switch (need(v.type())) {
    case od::json_type::null:
      if (!need(v.is_null())) throw parse_error("invalid literal");
      out.k = value::kind::null;
      break;
    case od::json_type::boolean:
      out.k = value::kind::boolean;
      out.b = need(v.get_bool());
      break;
    case od::json_type::number: return number(v.raw_json_token(), v.get_double());
    case od::json_type::string:
      out.k = value::kind::string;
      out.s = std::string(need(v.get_string()));
      break;
    case od::json_type::array:
      out.k = value::kind::array;
      for (auto item : need(v.get_array())) out.items.push_back(convert(need(std::move(item)), depth + 1));
      break;
    case od::json_type::object:
      out.k = value::kind::object;
      for (auto f : need(v.get_object())) {
        od::field field = need(std::move(f));
        const std::string key(need(field.unescaped_key()));
        value cv = convert(field.value(), depth + 1);
        // A duplicate key keeps its first position and takes the last value (Python's dict).
        auto it = std::find_if(out.members.begin(), out.members.end(), [&](const auto& m) { return m.first == key; });
        if (it != out.members.end()) it->second = std::move(cv);
        else out.members.emplace_back(key, std::move(cv));
      }
      break;
  }
  return out;
}

void dump_into(const value& v, const dump_options& opt, std::string& out) {
  switch (v.k) {
    case value::kind::null: out += "null"; return;
    case value::kind::boolean: out += v.b ? "true" : "false"; return;
    case value::kind::integer: {
      // json.loads gives a Python int: "-0" prints as 0.
      std::string_view s = v.s;
      if (s == "-0") s = "0";
      out += s;
      return;
    }
    case value::kind::real: out += v.s; return; // already Python's repr
    case value::kind::string: out += quote(v.s); return;
    case value::kind::array: {
      out += '[';
      for (std::size_t i = 0; i < v.items.size(); ++i) {
        if (i) out += opt.compact ? "," : ", ";
        dump_into(v.items[i], opt, out);
      }
      out += ']';
      return;
    }
    case value::kind::object: {
      std::vector<const std::pair<std::string, value>*> m;
      for (const auto& p : v.members) m.push_back(&p);
      if (opt.sort_keys)
        std::sort(m.begin(), m.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (std::size_t i = 0; i < m.size(); ++i) {
        if (i) out += opt.compact ? "," : ", ";
        out += quote(m[i]->first);
        out += opt.compact ? ":" : ": ";
        dump_into(m[i]->second, opt, out);
      }
      out += '}';
      return;
    }
  }
}

} // namespace

const value* value::find(std::string_view key) const noexcept {
  for (const auto& [k2, v] : members)
    if (k2 == key) return &v;
  return nullptr;
}

value parse(std::string_view text) {
  // On-demand API (dispatched at run time to the best SIMD kernel): it validates UTF-8 and the
  // structure of the whole input first, and gives number tokens raw, so integers of any size
  // stay exact and a too-large value can be refused by the field that holds it.
  thread_local od::parser parser;
  const simdjson::padded_string padded(text);
  od::document doc;
  if (auto e = parser.iterate(padded).get(doc)) fail(e);
  value out;
  switch (need(doc.type())) {
    case od::json_type::array:
    case od::json_type::object: {
      od::value root = need(doc.get_value());
      out = convert(root, 0);
      break;
    }
    case od::json_type::number: out = number(need(doc.raw_json_token()), doc.get_double()); break;
    case od::json_type::string:
      out.k = value::kind::string;
      out.s = std::string(need(doc.get_string()));
      break;
    case od::json_type::boolean:
      out.k = value::kind::boolean;
      out.b = need(doc.get_bool());
      break;
    case od::json_type::null:
      if (!need(doc.is_null())) throw parse_error("invalid literal");
      break;
  }
  // Past the root value nothing may follow (scalar roots are checked by their getters).
  if (const char* at = nullptr; doc.current_location().get(at) == simdjson::SUCCESS)
    throw parse_error("trailing content after the JSON value");
  return out;
}

std::string dump(const value& v, const dump_options& opt) {
  std::string out;
  dump_into(v, opt, out);
  return out;
}

std::string quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  // Shortest round-trip digits, then Python's layout: fixed for 1e-4 <= |d| < 1e16, else
  // scientific with a signed exponent of at least two digits.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const auto e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp10 = std::stoi(sci.substr(e + 1));
  bool neg = false;
  if (!mant.empty() && mant[0] == '-') {
    neg = true;
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp10 >= -4 && exp10 < 16) {
    if (exp10 >= 0) {
      const std::size_t int_len = static_cast<std::size_t>(exp10) + 1;
      if (digits.size() <= int_len) {
        out += digits + std::string(int_len - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, int_len) + "." + digits.substr(int_len);
      }
    } else {
      out += "0." + std::string(static_cast<std::size_t>(-exp10 - 1), '0') + digits;
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += eb;
  }
  return out;
}

value deep_sorted(const value& v) {
  value out = v;
  if (out.k == value::kind::object) {
    for (auto& [k2, child] : out.members) child = deep_sorted(child);
    // Sorted through an index: clang checks std::stable_sort's temporary buffer against the
    // still-incomplete recursive member type.
    std::vector<std::size_t> order(out.members.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return out.members[a].first < out.members[b].first; });
    std::vector<std::pair<std::string, value>> sorted;
    sorted.reserve(order.size());
    for (std::size_t i : order) sorted.push_back(std::move(out.members[i]));
    out.members = std::move(sorted);
  } else if (out.k == value::kind::array) {
    for (auto& child : out.items) child = deep_sorted(child);
  }
  return out;
}

} // namespace k3::json
