#include "runtime/grammar/json_schema.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <set>

#include "runtime/grammar/json_schema_detail.hpp"
#include "runtime/grammar/regex.hpp"

namespace k3::grammar {
using namespace schema_detail;

schema_compiler::schema_compiler(builder& b, const json::value& document, std::string path)
    : b_(b), doc_(document), path_(std::move(path)) {}

void schema_compiler::check_keywords(const json::value& s, const std::string& path) {
  for (const auto& [k, v] : s.members) {
    if (is_annotation(k) || supported.count(k)) continue;
    throw schema_error(k, path + "." + k, "the schema keyword '" + k + "' cannot be enforced by constrained decoding");
  }
  if (const auto* u = get(s, "uniqueItems"); u && u->k == kind::boolean && u->b)
    throw schema_error("uniqueItems", path + ".uniqueItems", "uniqueItems: true cannot be enforced by constrained decoding");
}

const json::value& schema_compiler::resolve(const std::string& ref, const std::string& path) {
  if (ref.empty() || ref[0] != '#') throw schema_error("$ref", path + ".$ref", "only local references (#/...) are supported, got " + ref);
  const json::value* at = &doc_;
  std::size_t i = 1;
  while (i < ref.size()) {
    if (ref[i] != '/') throw schema_error("$ref", path + ".$ref", "malformed reference " + ref);
    const auto next = ref.find('/', i + 1);
    std::string part = ref.substr(i + 1, next == std::string::npos ? std::string::npos : next - i - 1);
    for (std::size_t p; (p = part.find("~1")) != std::string::npos;) part.replace(p, 2, "/");
    for (std::size_t p; (p = part.find("~0")) != std::string::npos;) part.replace(p, 2, "~");
    const json::value* n = nullptr;
    if (at->is_object()) n = at->find(part);
    else if (at->k == kind::array) {
      char* end = nullptr;
      const auto idx = std::strtoul(part.c_str(), &end, 10);
      if (*end == '\0' && idx < at->items.size()) n = &at->items[idx];
    }
    if (!n) throw schema_error("$ref", path + ".$ref", "reference " + ref + " points nowhere");
    at = n;
    i = next == std::string::npos ? ref.size() : next;
  }
  return *at;
}

// allOf (and $ref with siblings) folded into one schema; conflicts are refused.
json::value schema_compiler::merged(const json::value& s, const std::string& path) {
  std::vector<json::value> parts;
  json::value base = object_without(s, {"allOf"});
  if (const auto* r = get(base, "$ref")) {
    const auto target = resolve(r->s, path);
    base = object_without(base, {"$ref"});
    parts.push_back(target.k == kind::boolean ? target : merged(target, path));
  }
  if (const auto* all = get(s, "allOf")) {
    if (all->k != kind::array) throw schema_error("allOf", path + ".allOf", "allOf must be an array");
    for (std::size_t i = 0; i < all->items.size(); ++i) {
      const auto& x = all->items[i];
      if (x.k == kind::boolean) {
        if (!x.b) throw schema_error("allOf", path + ".allOf", "allOf contains false");
        continue;
      }
      parts.push_back(merged(x, path + ".allOf[" + std::to_string(i) + "]"));
    }
  }
  // additionalProperties in one part sees only that part's properties: merging is exact only
  // when no part restricts extra keys that another part declares.
  {
    std::vector<const json::value*> all_parts{&base};
    for (const auto& p : parts) all_parts.push_back(&p);
    for (const auto* p : all_parts) {
      const auto* add = p->is_object() ? p->find("additionalProperties") : nullptr;
      if (!add || (add->k == kind::boolean && add->b)) continue;
      const auto* own = p->find("properties");
      for (const auto* q : all_parts) {
        const auto* qp = q == p || !q->is_object() ? nullptr : q->find("properties");
        if (!qp) continue;
        for (const auto& [k, v] : qp->members)
          if (!own || !own->find(k))
            throw schema_error("allOf", path + ".allOf",
                               "additionalProperties in one part forbids property '" + k + "' of another; this combination is not enforced");
      }
    }
  }
  json::value out = base;
  for (const auto& p : parts) {
    if (p.k == kind::boolean) continue;
    for (const auto& [k, v] : p.members) {
      auto* mine = const_cast<json::value*>(out.find(k));
      if (!mine) {
        out.members.emplace_back(k, v);
        continue;
      }
      if (k == "properties") {
        for (const auto& [pk, pv] : v.members) {
          auto* had = const_cast<json::value*>(mine->find(pk));
          if (!had) {
            mine->members.emplace_back(pk, pv);
          } else if (json::dump(*had) != json::dump(pv)) {
            json::value both;
            both.k = kind::object;
            json::value list;
            list.k = kind::array;
            list.items = {*had, pv};
            both.members.emplace_back("allOf", list);
            *had = both;
          }
        }
      } else if (k == "required") {
        for (const auto& r : v.items)
          if (std::none_of(mine->items.begin(), mine->items.end(), [&](const json::value& x) { return x.s == r.s; }))
            mine->items.push_back(r);
      } else if (k == "additionalProperties") {
        if (v.k == kind::boolean && !v.b) *mine = v;
        else if (!(mine->k == kind::boolean && !mine->b) && json::dump(*mine) != json::dump(v))
          throw schema_error("allOf", path + ".allOf", "allOf with different additionalProperties schemas cannot be merged");
      } else if (is_annotation(k)) {
        continue;
      } else if (json::dump(*mine) != json::dump(v)) {
        throw schema_error("allOf", path + ".allOf", "allOf with conflicting '" + k + "' cannot be merged");
      }
    }
  }
  return out;
}

std::uint32_t schema_compiler::any_value_rule() {
  if (any_rule_ != 0xffffffffu) return any_rule_;
  any_rule_ = b_.declare("any_value");
  b_.define(any_rule_, [this](builder& b) {
    const std::uint32_t self = any_rule_;
    auto obj = [&] {
      auto pair = [&] { return b.seq({b.literal("\""), any_string_body(false), b.literal("\""), json_colon(b), b.call(self)}); };
      return b.seq({b.literal("{"), b.opt(b.seq({pair(), b.star(b.seq({json_sep(b), pair()}))})), b.literal("}")});
    };
    auto arr = [&] {
      return b.seq({b.literal("["), b.opt(b.seq({b.call(self), b.star(b.seq({json_sep(b), b.call(self)}))})), b.literal("]")});
    };
    return b.alt({obj(), arr(), b.seq({b.literal("\""), any_string_body(false), b.literal("\"")}), number(json::value{}, "", false),
                  b.literal("true"), b.literal("false"), b.literal("null")});
  });
  return any_rule_;
}

frag schema_compiler::any_string_body(bool raw) {
  if (raw) { // any bytes: the json::value ends at the <|close|> token, whatever it holds
    byte_bits all;
    all.fill(~std::uint64_t{0});
    return b_.star(b_.byte_set(all));
  }
  // Valid UTF-8 only (a JSON text must be), '"', '\\' and control characters as escapes; the
  // loop node keeps plain ASCII as its self-loop, which the token caches exploit.
  return b_.star(any_char(b_, text_mode::json));
}

std::uint32_t schema_compiler::value_rule() {
  const auto r = b_.declare("value");
  b_.define(r, [this](builder&) { return emit_value(doc_, path_); });
  ref_rules_["#"] = r;
  return r;
}

frag schema_compiler::emit_value(const json::value& s, const std::string& path) {
  if (s.k == kind::boolean) {
    if (!s.b) throw schema_error("false", path, "the schema false accepts nothing");
    return b_.call(any_value_rule());
  }
  if (!s.is_object()) throw schema_error("type", path, "a schema must be an object or a boolean");
  check_keywords(s, path);
  if (const auto* r = get(s, "$ref")) {
    if (!r->is_string()) throw schema_error("$ref", path + ".$ref", "$ref must be a string");
    bool siblings = false;
    for (const auto& [k, v] : s.members) siblings = siblings || (k != "$ref" && !is_annotation(k));
    if (siblings) return emit_value(merged(s, path), path);
    auto it = ref_rules_.find(r->s);
    if (it == ref_rules_.end()) {
      const auto& target = resolve(r->s, path);
      const auto id = b_.declare("ref " + r->s);
      ref_rules_[r->s] = id;
      b_.define(id, [this, &target, ref = r->s](builder&) { return emit_value(target, ref); });
      return b_.call(id);
    }
    return b_.call(it->second);
  }
  if (get(s, "allOf")) return emit_value(merged(s, path), path);
  for (const char* key : {"anyOf", "oneOf"}) {
    const auto* branches = get(s, key);
    if (!branches) continue;
    if (branches->k != kind::array || branches->items.empty())
      throw schema_error(key, path + "." + key, std::string(key) + " must be a non-empty array");
    const json::value siblings = object_without(s, {"anyOf", "oneOf"});
    std::vector<frag> alts;
    for (std::size_t i = 0; i < branches->items.size(); ++i) {
      const std::string bp = path + "." + key + "[" + std::to_string(i) + "]";
      const auto& br = branches->items[i];
      if (has_constraints(siblings) && br.is_object()) {
        json::value combo;
        combo.k = kind::object;
        json::value list;
        list.k = kind::array;
        list.items = {siblings, br};
        combo.members.emplace_back("allOf", list);
        alts.push_back(emit_value(combo, bp));
      } else {
        alts.push_back(emit_value(br, bp));
      }
    }
    return b_.alt(alts);
  }
  if (const auto* c = get(s, "const")) return b_.literal(json::dump(*c));
  if (const auto* e = get(s, "enum")) {
    if (e->k != kind::array || e->items.empty()) throw schema_error("enum", path + ".enum", "enum must be a non-empty array");
    std::vector<frag> alts;
    for (const auto& v : e->items) alts.push_back(b_.literal(json::dump(v)));
    return b_.alt(alts);
  }
  std::vector<std::string> types;
  if (const auto* t = get(s, "type")) {
    if (t->is_string()) types.push_back(t->s);
    else if (t->k == kind::array)
      for (const auto& x : t->items) types.push_back(x.s);
    else throw schema_error("type", path + ".type", "type must be a string or a list of strings");
  } else if (get(s, "properties") || get(s, "additionalProperties") || get(s, "required")) {
    types = {"object"};
  } else if (get(s, "items") || get(s, "prefixItems") || get(s, "minItems") || get(s, "maxItems")) {
    types = {"array"};
  } else if (get(s, "pattern") || get(s, "format") || get(s, "minLength") || get(s, "maxLength")) {
    types = {"string"};
  } else if (get(s, "minimum") || get(s, "maximum") || get(s, "exclusiveMinimum") || get(s, "exclusiveMaximum")) {
    types = {"number"};
  } else {
    return b_.call(any_value_rule());
  }
  if (const auto* n = get(s, "nullable"); n && n->k == kind::boolean && n->b && std::find(types.begin(), types.end(), "null") == types.end())
    types.push_back("null");
  std::vector<frag> alts;
  for (const auto& t : types) alts.push_back(typed(s, t, path));
  return alts.size() == 1 ? alts[0] : b_.alt(alts);
}

frag schema_compiler::typed(const json::value& s, const std::string& t, const std::string& path) {
  if (t == "object") return object(s, path);
  if (t == "array") return array(s, path);
  if (t == "string") return string(s, path, false);
  if (t == "integer") return number(s, path, true);
  if (t == "number") return number(s, path, false);
  if (t == "boolean") return b_.alt({b_.literal("true"), b_.literal("false")});
  if (t == "null") return b_.literal("null");
  throw schema_error("type", path + ".type", "unknown type '" + t + "'");
}

frag schema_compiler::object(const json::value& s, const std::string& path) {
  struct prop {
    std::string key;
    const json::value* schema;
    bool required;
  };
  std::vector<prop> props;
  std::set<std::string> req;
  if (const auto* r = get(s, "required")) {
    if (r->k != kind::array) throw schema_error("required", path + ".required", "required must be an array");
    for (const auto& x : r->items) req.insert(x.s);
  }
  const auto* ps = get(s, "properties");
  if (ps && !ps->is_object()) throw schema_error("properties", path + ".properties", "properties must be an object");
  if (ps)
    for (const auto& [k, v] : ps->members) props.push_back({k, &v, req.count(k) > 0});
  const auto* add = get(s, "additionalProperties");
  static const json::value any_schema = [] {
    json::value v;
    v.k = kind::boolean;
    v.b = true;
    return v;
  }();
  // Required keys the properties do not describe still have to appear.
  for (const auto& k : req)
    if (std::none_of(props.begin(), props.end(), [&](const prop& p) { return p.key == k; })) {
      if (add && add->k == kind::boolean && !add->b)
        throw schema_error("required", path + ".required", "required key '" + k + "' is not allowed by additionalProperties: false");
      props.push_back({k, add && add->is_object() ? add : &any_schema, true});
    }
  // Extra keys: allowed by an explicit additionalProperties, or when nothing is declared.
  const json::value* extra = nullptr;
  if (add && add->is_object()) extra = add;
  else if (add && add->k == kind::boolean && add->b) extra = &any_schema;
  else if (!add && !ps) extra = &any_schema;
  std::vector<std::string> names;
  for (const auto& p : props) names.push_back(p.key);

  const frag open = b_.literal("{"), close = b_.literal("}");
  const std::size_t k = props.size();
  std::vector<std::array<std::uint32_t, 2>> st(k + 1);
  for (auto& x : st) x = {b_.empty().in, b_.empty().in};
  b_.link(open.out, st[0][0]);
  for (std::size_t i = 0; i < k; ++i)
    for (int f = 0; f < 2; ++f) {
      if (!props[i].required) b_.link(st[i][f], st[i + 1][f]);
      std::vector<frag> parts;
      if (f) parts.push_back(json_sep(b_));
      parts.push_back(b_.literal(json::quote(props[i].key)));
      parts.push_back(json_colon(b_));
      parts.push_back(emit_value(*props[i].schema, path + ".properties." + props[i].key));
      const frag pair = b_.seq(parts);
      b_.link(st[i][f], pair.in);
      b_.link(pair.out, st[i + 1][1]);
    }
  if (extra)
    for (int f = 0; f < 2; ++f) {
      std::vector<frag> parts;
      if (f) parts.push_back(json_sep(b_));
      parts.push_back(b_.literal("\""));
      parts.push_back(key_not_in(b_, names));
      parts.push_back(b_.literal("\""));
      parts.push_back(json_colon(b_));
      parts.push_back(emit_value(*extra, path + ".additionalProperties"));
      const frag pair = b_.seq(parts);
      b_.link(st[k][f], pair.in);
      b_.link(pair.out, st[k][1]);
    }
  b_.link(st[k][0], close.in);
  b_.link(st[k][1], close.in);
  return {open.in, close.out};
}

frag schema_compiler::array(const json::value& s, const std::string& path) {
  const std::int64_t min = get(s, "minItems") ? to_int(*get(s, "minItems"), "minItems", path + ".minItems", 0, 256) : 0;
  const std::int64_t max = get(s, "maxItems") ? to_int(*get(s, "maxItems"), "maxItems", path + ".maxItems", 0) : -1;
  if (max > 256) throw schema_error("maxItems", path + ".maxItems", "maxItems above 256 is not enforced");
  if (max >= 0 && max < min) throw schema_error("maxItems", path + ".maxItems", "maxItems is below minItems");
  std::vector<const json::value*> prefix;
  if (const auto* p = get(s, "prefixItems")) {
    if (p->k != kind::array) throw schema_error("prefixItems", path + ".prefixItems", "prefixItems must be an array");
    for (const auto& x : p->items) prefix.push_back(&x);
  }
  const json::value* items = get(s, "items");
  if (items && items->k == kind::array) { // draft-04 tuple form
    for (const auto& x : items->items) prefix.push_back(&x);
    items = get(s, "additionalItems");
  }
  const bool more = !(items && items->k == kind::boolean && !items->b);
  static const json::value any_schema = [] {
    json::value v;
    v.k = kind::boolean;
    v.b = true;
    return v;
  }();
  const json::value& item_schema = items && !(items->k == kind::boolean) ? *items : any_schema;
  const auto np = static_cast<std::int64_t>(prefix.size());
  if (max >= 0 && np > max) throw schema_error("maxItems", path + ".maxItems", "maxItems is below the prefixItems count");
  // [p0, p1, …, items…]: all prefix items, then min..max more.
  std::vector<frag> elems;
  for (std::size_t i = 0; i < prefix.size(); ++i) elems.push_back(emit_value(*prefix[i], path + ".prefixItems[" + std::to_string(i) + "]"));
  const std::int64_t rest_min = std::max<std::int64_t>(0, min - np);
  const std::int64_t rest_max = !more ? 0 : max < 0 ? -1 : max - np;
  if (!more && rest_min > 0) throw schema_error("minItems", path + ".minItems", "minItems needs more items than the schema allows");
  auto item = [&] { return emit_value(item_schema, path + ".items"); };
  frag body;
  if (elems.empty()) {
    if (rest_max == 0) {
      body = b_.empty();
    } else {
      // first item, then (sep item) with the count shifted by one
      const frag nonempty = b_.seq({item(), b_.repeat([&] { return b_.seq({json_sep(b_), item()}); }, static_cast<int>(std::max<std::int64_t>(0, rest_min - 1)),
                                                      rest_max < 0 ? -1 : static_cast<int>(rest_max - 1))});
      body = rest_min == 0 ? b_.opt(nonempty) : nonempty;
    }
  } else {
    std::vector<frag> parts;
    for (std::size_t i = 0; i < elems.size(); ++i) {
      if (i) parts.push_back(json_sep(b_));
      parts.push_back(elems[i]);
    }
    if (rest_max != 0)
      parts.push_back(b_.repeat([&] { return b_.seq({json_sep(b_), item()}); }, static_cast<int>(rest_min),
                                rest_max < 0 ? -1 : static_cast<int>(rest_max)));
    body = b_.seq(parts);
  }
  return b_.seq({b_.literal("["), body, b_.literal("]")});
}

frag schema_compiler::string(const json::value& s, const std::string& path, bool raw) {
  const auto mode = raw ? text_mode::raw : text_mode::json;
  const auto* pat = get(s, "pattern");
  const auto* fmt = get(s, "format");
  const auto* mn = get(s, "minLength");
  const auto* mx = get(s, "maxLength");
  frag body;
  try {
    if (fmt && (pat || mn || mx))
      throw schema_error(pat ? "pattern" : "minLength", path, "format combined with pattern or a length is not enforced");
    if (pat && (mn || mx)) throw schema_error(mn ? "minLength" : "maxLength", path + (mn ? ".minLength" : ".maxLength"),
                                              "pattern combined with minLength/maxLength is not enforced");
    if (fmt) {
      if (!fmt->is_string()) throw schema_error("format", path + ".format", "format must be a string");
      body = format(b_, fmt->s, mode);
    } else if (pat) {
      if (!pat->is_string()) throw schema_error("pattern", path + ".pattern", "pattern must be a string");
      body = regex(b_, pat->s, mode);
    } else if (mn || mx) {
      const auto lo = mn ? to_int(*mn, "minLength", path + ".minLength", 0) : 0;
      auto hi = mx ? to_int(*mx, "maxLength", path + ".maxLength", 0) : -1;
      if (lo > 256) throw schema_error("minLength", path + ".minLength", "minLength above 256 is not enforced");
      if (hi > 256) hi = 256; // a shorter string still validates
      if (hi >= 0 && hi < lo) throw schema_error("maxLength", path + ".maxLength", "maxLength is below minLength");
      body = b_.repeat([&] { return any_char(b_, mode); }, static_cast<int>(lo), static_cast<int>(hi));
    } else {
      body = any_string_body(raw);
    }
  } catch (const regex_error& e) {
    throw schema_error(fmt ? "format" : "pattern", path + (fmt ? ".format" : ".pattern"), e.what());
  }
  if (raw) return body;
  return b_.seq({b_.literal("\""), body, b_.literal("\"")});
}

frag schema_compiler::number(const json::value& s, const std::string& path, bool integer) {
  // Bounds (draft 4 booleans or draft 6+ numbers), as inclusive integer bounds.
  bool has_lo = false, has_hi = false, lo_excl = false, hi_excl = false;
  double lo = 0, hi = 0;
  if (const auto* v = get(s, "minimum"); is_number(v)) has_lo = true, lo = num(*v);
  if (const auto* v = get(s, "maximum"); is_number(v)) has_hi = true, hi = num(*v);
  if (const auto* v = get(s, "exclusiveMinimum")) {
    if (v->k == kind::boolean) lo_excl = v->b;
    else if (is_number(v) && (!has_lo || num(*v) >= lo)) has_lo = true, lo = num(*v), lo_excl = true;
  }
  if (const auto* v = get(s, "exclusiveMaximum")) {
    if (v->k == kind::boolean) hi_excl = v->b;
    else if (is_number(v) && (!has_hi || num(*v) <= hi)) has_hi = true, hi = num(*v), hi_excl = true;
  }
  const double big = 9.0e18;
  if ((has_lo && std::fabs(lo) > big) || (has_hi && std::fabs(hi) > big))
    throw schema_error("minimum", path, "bounds beyond ±9e18 are not enforced");
  const frag frac_nonzero = b_.seq({b_.sym('.'), b_.star(b_.range('0', '9')), b_.range('1', '9')});
  if (integer || (!has_lo && !has_hi)) {
    if (integer) {
      std::int64_t ilo = 0, ihi = 0;
      if (has_lo) ilo = static_cast<std::int64_t>(lo_excl ? std::floor(lo) + 1 : std::ceil(lo));
      if (has_hi) ihi = static_cast<std::int64_t>(hi_excl ? std::ceil(hi) - 1 : std::floor(hi));
      if (has_lo && has_hi) {
        if (ilo > ihi) throw schema_error("minimum", path, "no integer lies between minimum and maximum");
        return integer_range(b_, ilo, ihi);
      }
      if (has_lo) return integer_at_least(b_, ilo);
      if (has_hi) return integer_at_most(b_, ihi);
      return b_.seq({b_.opt(b_.sym('-')), b_.alt({b_.sym('0'), b_.seq({b_.range('1', '9'), b_.star(b_.range('0', '9'))})})});
    }
    return b_.seq({b_.opt(b_.sym('-')), b_.alt({b_.sym('0'), b_.seq({b_.range('1', '9'), b_.star(b_.range('0', '9'))})}),
                   b_.opt(b_.seq({b_.sym('.'), b_.plus([&] { return b_.range('0', '9'); })}))});
  }
  // Numbers with bounds: integer-valued bounds only. A json::value is an integer D (within the
  // bounds) or D.f with a non-zero fraction (strictly between D and D ± 1).
  if ((has_lo && lo != std::floor(lo)) || (has_hi && hi != std::floor(hi)))
    throw schema_error(has_lo && lo != std::floor(lo) ? "minimum" : "maximum", path,
                       "non-integer bounds on a number are not enforced (use integer bounds or type integer)");
  const auto L = static_cast<std::int64_t>(lo), H = static_cast<std::int64_t>(hi);
  std::vector<frag> alts;
  // Integers.
  {
    const std::int64_t a = has_lo ? (lo_excl ? L + 1 : L) : INT64_MIN, z = has_hi ? (hi_excl ? H - 1 : H) : INT64_MAX;
    if (a <= z) {
      if (has_lo && has_hi) alts.push_back(integer_range(b_, a, z));
      else if (has_lo) alts.push_back(integer_at_least(b_, a));
      else alts.push_back(integer_at_most(b_, z));
    }
  }
  // Non-negative D.f, f ≠ 0: D ≥ max(lo, 0), D + 1 ≤ hi.
  {
    const std::int64_t a = std::max<std::int64_t>(has_lo ? L : 0, 0);
    const bool bounded = has_hi;
    const std::int64_t z = has_hi ? H - 1 : INT64_MAX;
    if (!bounded || a <= z)
      alts.push_back(b_.seq({bounded ? integer_range(b_, a, z) : integer_at_least(b_, a), frac_nonzero}));
  }
  // Negative −D.f, f ≠ 0: json::value in (−(D+1), −D): need −(D+1) ≥ lo and −D ≤ hi.
  {
    const std::int64_t a = has_hi ? std::max<std::int64_t>(0, -H) : 0;
    const bool bounded = has_lo;
    const std::int64_t z = has_lo ? -L - 1 : INT64_MAX;
    if (!bounded || a <= z)
      alts.push_back(b_.seq({b_.sym('-'), bounded ? integer_range(b_, a, z) : integer_at_least(b_, a), frac_nonzero}));
  }
  if (alts.empty()) throw schema_error("minimum", path, "no number lies between minimum and maximum");
  return alts.size() == 1 ? alts[0] : b_.alt(alts);
}

void check_schema(const json::value& schema, const std::string& path) {
  builder b;
  schema_compiler c(b, schema, path);
  const auto r = c.value_rule();
  (void)b.finish(r);
}

} // namespace k3::grammar
