// The JSON Schema compiler's K3 part (json_schema.hpp): tool arguments as XTML
// `<|open|>argument key="…" type="…"<|sep|>…` segments, one per property, with each value's
// JSON type chosen from the schema's variants.
#include "runtime/grammar/json_schema.hpp"

#include <algorithm>
#include <map>

#include "runtime/chat/k3_xtml.hpp"
#include "runtime/grammar/json_schema_detail.hpp"

namespace k3::grammar {
using namespace schema_detail;

std::vector<std::pair<std::string, json::value>> schema_compiler::variants(const json::value& s0, const std::string& path, int depth) {
  if (depth > 32) throw schema_error("$ref", path, "reference chain too deep for a tool argument");
  std::vector<std::pair<std::string, json::value>> out;
  static const char* all_types[] = {"string", "number", "boolean", "null", "object", "array"};
  if (s0.k == kind::boolean) {
    if (!s0.b) throw schema_error("false", path, "the schema false accepts nothing");
    for (const char* t : all_types) out.emplace_back(t, json::value{});
    return out;
  }
  if (!s0.is_object()) throw schema_error("type", path, "a schema must be an object or a boolean");
  check_keywords(s0, path);
  json::value s = (get(s0, "$ref") || get(s0, "allOf")) ? merged(s0, path) : s0;
  if (get(s, "$ref") || get(s, "allOf")) return variants(s, path, depth + 1);
  for (const char* key : {"anyOf", "oneOf"})
    if (const auto* br = get(s, key)) {
      if (br->k != kind::array || br->items.empty()) throw schema_error(key, path + "." + key, std::string(key) + " must be a non-empty array");
      const json::value siblings = object_without(s, {"anyOf", "oneOf"});
      for (std::size_t i = 0; i < br->items.size(); ++i) {
        json::value b = br->items[i];
        if (has_constraints(siblings) && b.is_object()) {
          json::value combo;
          combo.k = kind::object;
          json::value list;
          list.k = kind::array;
          list.items = {siblings, b};
          combo.members.emplace_back("allOf", list);
          b = combo;
        }
        auto v = variants(b, path + "." + key + "[" + std::to_string(i) + "]", depth + 1);
        out.insert(out.end(), v.begin(), v.end());
      }
      return out;
    }
  auto type_of = [](const json::value& v) -> std::string {
    switch (v.k) {
      case kind::string: return "string";
      case kind::integer:
      case kind::real: return "number";
      case kind::boolean: return "boolean";
      case kind::null: return "null";
      case kind::array: return "array";
      case kind::object: return "object";
    }
    return "string";
  };
  if (const auto* c = get(s, "const")) {
    json::value e;
    e.k = kind::object;
    json::value list;
    list.k = kind::array;
    list.items = {*c};
    e.members.emplace_back("enum", list);
    out.emplace_back(type_of(*c), e);
    return out;
  }
  if (const auto* en = get(s, "enum")) {
    if (en->k != kind::array || en->items.empty()) throw schema_error("enum", path + ".enum", "enum must be a non-empty array");
    std::map<std::string, json::value> by_type;
    for (const auto& v : en->items) {
      auto& e = by_type[type_of(v)];
      if (e.k != kind::object) {
        e.k = kind::object;
        json::value list;
        list.k = kind::array;
        e.members.emplace_back("enum", list);
      }
      const_cast<json::value*>(e.find("enum"))->items.push_back(v);
    }
    for (auto& [t, e] : by_type) out.emplace_back(t, e);
    return out;
  }
  std::vector<std::string> types;
  if (const auto* t = get(s, "type")) {
    if (t->is_string()) types.push_back(t->s);
    else for (const auto& x : t->items) types.push_back(x.s);
  } else {
    types.assign(std::begin(all_types), std::end(all_types));
  }
  if (const auto* n = get(s, "nullable"); n && n->k == kind::boolean && n->b) types.push_back("null");
  for (const auto& t : types) {
    json::value v = s;
    if (get(v, "type")) {
      for (auto& [k, x] : v.members)
        if (k == "type") x = json::value::string_value(t);
    } else {
      v.members.emplace_back("type", json::value::string_value(t));
    }
    out.emplace_back(t == "integer" ? "number" : t, v);
  }
  return out;
}

frag schema_compiler::xtml_value(const json::value& prop, const std::string& path) {
  std::vector<frag> alts;
  for (auto& [type, s] : variants(prop, path)) {
    frag v;
    if (type == "string") {
      if (const auto* e = get(s, "enum")) {
        std::vector<frag> lits;
        for (const auto& x : e->items) lits.push_back(b_.literal(x.s));
        v = b_.alt(lits);
      } else {
        v = s.k == kind::null ? any_string_body(true) : string(s, path, true);
      }
    } else if (s.k == kind::null) {
      v = type == "number" ? number(json::value{}, path, false)
          : type == "boolean" ? b_.alt({b_.literal("true"), b_.literal("false")})
          : type == "null"    ? b_.literal("null")
                              : b_.call(any_value_rule()); // any object / array: the parser re-checks the type
    } else {
      v = emit_value(s, path);
    }
    // `<|open|>argument key="K" type="T"<|sep|>` is emitted by the caller with the key.
    alts.push_back(b_.seq({b_.literal("\" type=\"" + type + "\""), b_.sym(m_.sep), v}));
  }
  return alts.size() == 1 ? alts[0] : b_.alt(alts);
}

frag schema_compiler::xtml_arguments(const xtml_symbols& m) {
  m_ = m;
  json::value s = doc_.is_object() && (get(doc_, "$ref") || get(doc_, "allOf")) ? merged(doc_, path_) : doc_;
  if (s.k == kind::boolean) return xtml_any_arguments(b_, m, any_value_rule());
  if (!s.is_object()) throw schema_error("type", path_, "parameters must be a JSON Schema object");
  check_keywords(s, path_);
  if (const auto* t = get(s, "type"); t && !(t->is_string() && t->s == "object"))
    throw schema_error("type", path_ + ".type", "tool parameters must describe an object");
  if (get(s, "anyOf") || get(s, "oneOf"))
    throw schema_error(get(s, "anyOf") ? "anyOf" : "oneOf", path_, "alternatives of whole argument objects are not enforced");
  std::set<std::string> req;
  if (const auto* r = get(s, "required"))
    for (const auto& x : r->items) req.insert(x.s);
  struct prop {
    std::string key;
    const json::value* schema;
    bool required;
  };
  std::vector<prop> props;
  const auto* ps = get(s, "properties");
  if (ps)
    for (const auto& [k, v] : ps->members) props.push_back({k, &v, req.count(k) > 0});
  static const json::value any_schema = [] {
    json::value v;
    v.k = kind::boolean;
    v.b = true;
    return v;
  }();
  const auto* add = get(s, "additionalProperties");
  for (const auto& k : req)
    if (std::none_of(props.begin(), props.end(), [&](const prop& p) { return p.key == k; })) {
      if (add && add->k == kind::boolean && !add->b)
        throw schema_error("required", path_ + ".required", "required key '" + k + "' is not allowed by additionalProperties: false");
      props.push_back({k, add && add->is_object() ? add : &any_schema, true});
    }
  const json::value* extra = add && add->is_object() ? add : (add && add->k == kind::boolean && add->b) || (!add && !ps) ? &any_schema : nullptr;
  std::vector<std::string> names;
  for (const auto& p : props) names.push_back(p.key);
  auto element = [&](frag key_text, const json::value& schema, const std::string& path) {
    return b_.seq({b_.sym(m.open), b_.literal("argument key=\""), key_text, xtml_value(schema, path), b_.sym(m.close),
                   b_.literal("argument"), b_.sym(m.sep)});
  };
  std::vector<std::uint32_t> st(props.size() + 1);
  for (auto& x : st) x = b_.empty().in;
  for (std::size_t i = 0; i < props.size(); ++i) {
    if (!props[i].required) b_.link(st[i], st[i + 1]);
    const frag e = element(b_.literal(chat::escape_attr(props[i].key)), *props[i].schema, path_ + ".properties." + props[i].key);
    b_.link(st[i], e.in);
    b_.link(e.out, st[i + 1]);
  }
  const auto end = st.back();
  if (extra) {
    const frag e = element(key_not_in(b_, names), *extra, path_ + ".additionalProperties");
    b_.link(end, e.in);
    b_.link(e.out, end);
  }
  return {st.front(), end};
}

frag schema_compiler::xtml_any_arguments(builder& b, const xtml_symbols& m, std::uint32_t any_value) {
  byte_bits all;
  all.fill(~std::uint64_t{0});
  auto element = [&] {
    const frag number = b.seq({b.opt(b.sym('-')), b.alt({b.sym('0'), b.seq({b.range('1', '9'), b.star(b.range('0', '9'))})}),
                               b.opt(b.seq({b.sym('.'), b.plus([&] { return b.range('0', '9'); })}))});
    const frag typed = b.alt({b.seq({b.literal("\" type=\"string\""), b.sym(m.sep), b.star(b.byte_set(all))}),
                              b.seq({b.literal("\" type=\"number\""), b.sym(m.sep), number}),
                              b.seq({b.literal("\" type=\"boolean\""), b.sym(m.sep), b.alt({b.literal("true"), b.literal("false")})}),
                              b.seq({b.literal("\" type=\"null\""), b.sym(m.sep), b.literal("null")}),
                              b.seq({b.literal("\" type=\"object\""), b.sym(m.sep), b.call(any_value)}),
                              b.seq({b.literal("\" type=\"array\""), b.sym(m.sep), b.call(any_value)})});
    return b.seq({b.sym(m.open), b.literal("argument key=\""), key_not_in(b, {}), typed, b.sym(m.close), b.literal("argument"),
                  b.sym(m.sep)});
  };
  return b.star(element());
}

} // namespace k3::grammar
