#include "runtime/grammar/schema_validator.hpp"

#include <cmath>
#include <regex>

namespace k3::grammar {
namespace {

using json::value;
using kind = json::value::kind;

std::size_t code_points(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool equal(const value& a, const value& b) {
  const bool an = a.k == kind::integer || a.k == kind::real, bn = b.k == kind::integer || b.k == kind::real;
  if (an && bn) return std::strtod(a.s.c_str(), nullptr) == std::strtod(b.s.c_str(), nullptr);
  return json::dump(json::deep_sorted(a)) == json::dump(json::deep_sorted(b));
}

bool is_type(const value& v, const std::string& t) {
  if (t == "object") return v.k == kind::object;
  if (t == "array") return v.k == kind::array;
  if (t == "string") return v.k == kind::string;
  if (t == "boolean") return v.k == kind::boolean;
  if (t == "null") return v.k == kind::null;
  if (t == "number") return v.k == kind::integer || v.k == kind::real;
  if (t == "integer") {
    if (v.k == kind::integer) return true;
    if (v.k != kind::real) return false;
    const double d = std::strtod(v.s.c_str(), nullptr);
    return d == std::floor(d);
  }
  return false;
}

bool format_ok(const std::string& f, const std::string& s) {
  static const std::string date = "[0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-9]))";
  static const std::string time = "([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]+)?([zZ]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])?";
  std::string rx;
  if (f == "date") rx = date;
  else if (f == "time") rx = time;
  else if (f == "date-time") rx = date + "[Tt ]" + time;
  else if (f == "email") rx = "[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9-]+(\\.[A-Za-z0-9-]+)+";
  else if (f == "uuid") rx = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
  else if (f == "ipv4") rx = "((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  else if (f == "uri") rx = "[A-Za-z][A-Za-z0-9+.-]*:[^\\s]+";
  else if (f == "hostname") rx = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*";
  else return true; // unknown formats are annotations to a validator
  return std::regex_match(s, std::regex(rx));
}

class validator {
public:
  explicit validator(const value& root) : root_(root) {}
  std::string check(const value& v, const value& s, const std::string& path, int depth = 0) {
    if (depth > 64) return path + ": schema recursion too deep";
    if (s.k == kind::boolean) return s.b ? "" : path + ": false schema";
    if (!s.is_object()) return "";
    if (const auto* r = s.find("$ref")) {
      const value* t = resolve(r->s);
      if (!t) return path + ": unresolvable $ref " + r->s;
      if (auto e = check(v, *t, path, depth + 1); !e.empty()) return e;
    }
    if (const auto* n = s.find("nullable"); n && n->k == kind::boolean && n->b && v.k == kind::null) return "";
    if (const auto* t = s.find("type")) {
      bool ok = false;
      if (t->is_string()) ok = is_type(v, t->s);
      else for (const auto& x : t->items) ok = ok || is_type(v, x.s);
      if (!ok) return path + ": wrong type " + json::dump(v).substr(0, 60);
    }
    if (const auto* c = s.find("const"); c && !equal(v, *c)) return path + ": not the const";
    if (const auto* e = s.find("enum")) {
      bool ok = false;
      for (const auto& x : e->items) ok = ok || equal(v, x);
      if (!ok) return path + ": not in enum";
    }
    if (const auto* a = s.find("allOf"))
      for (const auto& x : a->items)
        if (auto e = check(v, x, path, depth + 1); !e.empty()) return e;
    if (const auto* a = s.find("anyOf")) {
      bool ok = false;
      for (const auto& x : a->items) ok = ok || check(v, x, path, depth + 1).empty();
      if (!ok) return path + ": matches no anyOf branch";
    }
    if (const auto* a = s.find("oneOf")) {
      int n = 0;
      for (const auto& x : a->items) n += check(v, x, path, depth + 1).empty();
      if (n != 1) return path + ": matches " + std::to_string(n) + " oneOf branches";
    }
    if (v.k == kind::object) {
      const auto* props = s.find("properties");
      if (const auto* r = s.find("required"))
        for (const auto& k : r->items)
          if (!v.find(k.s)) return path + ": missing required " + k.s;
      for (const auto& [k, x] : v.members) {
        const value* ps = props ? props->find(k) : nullptr;
        if (ps) {
          if (auto e = check(x, *ps, path + "." + k, depth + 1); !e.empty()) return e;
        } else if (const auto* add = s.find("additionalProperties")) {
          if (auto e = check(x, *add, path + "." + k, depth + 1); !e.empty()) return path + ": additional property " + k + ": " + e;
        }
      }
    }
    if (v.k == kind::array) {
      const auto n = v.items.size();
      if (const auto* m = s.find("minItems"); m && n < std::stoull(m->s)) return path + ": too few items";
      if (const auto* m = s.find("maxItems"); m && n > std::stoull(m->s)) return path + ": too many items";
      std::size_t first = 0;
      if (const auto* p = s.find("prefixItems"))
        for (; first < p->items.size() && first < n; ++first)
          if (auto e = check(v.items[first], p->items[first], path + "[" + std::to_string(first) + "]", depth + 1); !e.empty()) return e;
      if (const auto* it = s.find("items"))
        for (std::size_t i = first; i < n; ++i)
          if (auto e = check(v.items[i], *it, path + "[" + std::to_string(i) + "]", depth + 1); !e.empty()) return e;
    }
    if (v.k == kind::string) {
      const auto n = code_points(v.s);
      if (const auto* m = s.find("minLength"); m && n < std::stoull(m->s)) return path + ": too short";
      if (const auto* m = s.find("maxLength"); m && n > std::stoull(m->s)) return path + ": too long";
      if (const auto* p = s.find("pattern")) {
        bool ascii = true;
        for (unsigned char c : v.s) ascii = ascii && c < 0x80;
        if (ascii && !std::regex_search(v.s, std::regex(p->s, std::regex::ECMAScript))) return path + ": does not match " + p->s;
      }
      if (const auto* f = s.find("format"); f && !format_ok(f->s, v.s)) return path + ": not a " + f->s;
    }
    if (v.k == kind::integer || v.k == kind::real) {
      const double d = std::strtod(v.s.c_str(), nullptr);
      const auto* emin = s.find("exclusiveMinimum");
      const auto* emax = s.find("exclusiveMaximum");
      if (const auto* m = s.find("minimum")) {
        const double b = std::strtod(m->s.c_str(), nullptr);
        if (d < b || (emin && emin->k == kind::boolean && emin->b && d == b)) return path + ": below minimum";
      }
      if (const auto* m = s.find("maximum")) {
        const double b = std::strtod(m->s.c_str(), nullptr);
        if (d > b || (emax && emax->k == kind::boolean && emax->b && d == b)) return path + ": above maximum";
      }
      if (emin && emin->k != kind::boolean && d <= std::strtod(emin->s.c_str(), nullptr)) return path + ": not above exclusiveMinimum";
      if (emax && emax->k != kind::boolean && d >= std::strtod(emax->s.c_str(), nullptr)) return path + ": not below exclusiveMaximum";
    }
    return "";
  }

private:
  const value* resolve(const std::string& ref) {
    if (ref.empty() || ref[0] != '#') return nullptr;
    const value* at = &root_;
    std::size_t i = 1;
    while (i < ref.size()) {
      const auto next = ref.find('/', i + 1);
      const std::string part = ref.substr(i + 1, next == std::string::npos ? std::string::npos : next - i - 1);
      at = at->is_object() ? at->find(part) : nullptr;
      if (!at) return nullptr;
      i = next == std::string::npos ? ref.size() : next;
    }
    return at;
  }
  const value& root_;
};

} // namespace

std::string validate_json(const json::value& v, const json::value& schema) { return validator(schema).check(v, schema, "$"); }

} // namespace k3::grammar
