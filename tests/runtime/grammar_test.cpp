// Constrained decoding without a model: grammars, the matcher, token masks against the demo
// vocabulary, JSON Schema → grammar, and whole-message output grammars. Random walks sample
// uniformly among the allowed tokens (seeded); every completed output must parse and validate.
#include <catch2/catch.hpp>

#include <random>

#include "runtime/chat/json.hpp"
#include "runtime/chat/output_parser.hpp"
#include "runtime/grammar/json_schema.hpp"
#include "runtime/grammar/output_grammar.hpp"
#include "runtime/grammar/regex.hpp"
#include "runtime/grammar/schema_validator.hpp"
#include "runtime/model/make_model.hpp"
#include "runtime/tokenizer/detokenizer.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"
#include "tests/model/model_fixture.hpp"

using namespace k3;
using namespace k3::grammar;

namespace {

std::vector<symbol> bytes(std::string_view s) {
  std::vector<symbol> out;
  for (unsigned char c : s) out.push_back(c);
  return out;
}

// A grammar with one rule built by `body`, compiled against `t`.
struct fixture {
  fixture() : dir("grammar_tok") {
    model::make_model(test::tiny_options(model::family::kimi_k3), dir.str());
    tok = std::make_unique<tok::kimi_tokenizer>(tok::kimi_tokenizer::load(dir.str()));
    kl_dir = std::make_unique<test::temp_dir>("grammar_tok_kl");
    model::make_model(test::tiny_options(model::family::kimi_linear), kl_dir->str());
    kl = std::make_unique<tok::kimi_tokenizer>(tok::kimi_tokenizer::load(kl_dir->str()));
  }
  std::shared_ptr<const compiled_grammar> compile(const std::function<frag(builder&)>& body) const {
    builder b;
    const auto r = b.rule("root", body);
    return std::make_shared<const compiled_grammar>(b.finish(r), token_vocab::get(*tok, tok->vocab_size()));
  }
  std::shared_ptr<const compiled_grammar> schema(const std::string& s) const {
    builder b;
    const auto doc = std::make_shared<json::value>(json::parse(s));
    docs.push_back(doc);
    schema_compiler c(b, *doc, "schema");
    const auto r = c.value_rule();
    return std::make_shared<const compiled_grammar>(b.finish(r), token_vocab::get(*tok, tok->vocab_size()));
  }
  test::temp_dir dir;
  std::unique_ptr<test::temp_dir> kl_dir;
  std::unique_ptr<tok::kimi_tokenizer> tok, kl;
  mutable std::vector<std::shared_ptr<json::value>> docs;
};

const fixture& fx() {
  static const fixture f;
  return f;
}

bool accepts(const std::shared_ptr<const compiled_grammar>& g, std::string_view s) {
  matcher m(g);
  return m.accept_symbols(bytes(s)) && m.accepting();
}

/// A random walk over allowed tokens (uniform), steered to finish within `budget` tokens.
struct walk_result {
  std::vector<std::int32_t> ids;
  bool complete = false;
};
walk_result walk(const std::shared_ptr<const compiled_grammar>& g, std::uint64_t seed, int budget) {
  matcher m(g);
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> mask(g->vocab().words());
  walk_result r;
  for (int i = 0; i < budget && !m.terminated(); ++i) {
    m.fill_mask(mask, budget - i);
    std::vector<std::int32_t> allowed;
    for (std::size_t w = 0; w < mask.size(); ++w)
      for (std::uint64_t x = mask[w]; x; x &= x - 1) allowed.push_back(static_cast<std::int32_t>(w * 64 + static_cast<std::size_t>(__builtin_ctzll(x))));
    REQUIRE(!allowed.empty());
    const auto pick = allowed[rng() % allowed.size()];
    REQUIRE(m.accept_token(pick));
    r.ids.push_back(pick);
    if (m.accepting() && rng() % 3 == 0) break; // stop early sometimes where the grammar allows it
  }
  r.complete = m.accepting();
  return r;
}

std::string text(const std::vector<std::int32_t>& ids) { return fx().tok->decode(ids); }

/// Feeds a parser the way the request actor does: UTF-8-safe incremental text (invalid bytes as
/// U+FFFD), markers (specials) releasing no text of their own.
template <class Parser>
chat::parse_delta feed_all(const tok::kimi_tokenizer& t, Parser& p, const std::vector<std::int32_t>& ids) {
  std::vector<std::int32_t> silent;
  for (std::int32_t id = t.bpe().base_vocab_size(); id < t.vocab_size(); ++id) silent.push_back(id);
  tok::incremental_decoder dec(t.bpe(), silent);
  chat::parse_delta d;
  for (auto id : ids) {
    std::string text = dec.push(id);
    if (id >= t.bpe().base_vocab_size()) text += dec.flush();
    d.append(p.feed(id, text));
  }
  d.append(p.feed(-1, dec.flush()));
  d.append(p.finish());
  return d;
}

} // namespace

TEST_CASE("grammar: builder, matcher, epsilon closures, distances, left recursion", "[grammar]") {
  const auto g = fx().compile([](builder& b) {
    return b.seq({b.literal("ab"), b.star(b.range('0', '9')), b.opt(b.literal("x")), b.literal(";")});
  });
  CHECK(accepts(g, "ab;"));
  CHECK(accepts(g, "ab123x;"));
  CHECK_FALSE(accepts(g, "ab12"));
  CHECK_FALSE(accepts(g, "abx1;"));
  matcher m(g);
  CHECK(m.distance() == 3);
  REQUIRE(m.accept_symbols(bytes("ab7")));
  CHECK(m.distance() == 1);
  CHECK_FALSE(m.accept_symbols(bytes("q"))); // refused: state unchanged
  CHECK(m.distance() == 1);
  // Recursion through calls (balanced parentheses), and left recursion refused.
  builder b;
  const auto p = b.declare("p");
  b.define(p, [&](builder& bb) { return bb.star(bb.seq({bb.literal("("), bb.call(p), bb.literal(")")})); });
  const auto pg = std::make_shared<const compiled_grammar>(b.finish(p), token_vocab::get(*fx().tok, fx().tok->vocab_size()));
  CHECK(accepts(pg, "(()())"));
  CHECK_FALSE(accepts(pg, "(()"));
  builder lb;
  const auto l = lb.declare("l");
  lb.define(l, [&](builder& bb) { return bb.alt({bb.seq({bb.call(l), bb.literal("a")}), bb.literal("b")}); });
  CHECK_THROWS_AS(lb.finish(l), grammar_error);
}

TEST_CASE("grammar: integer ranges are exact", "[grammar]") {
  for (auto [lo, hi] : std::vector<std::pair<std::int64_t, std::int64_t>>{{-123, 456}, {0, 0}, {7, 1000}, {-50, -3}, {99, 101}}) {
    const auto g = fx().compile([&](builder& b) { return integer_range(b, lo, hi); });
    for (std::int64_t v = -1100; v <= 1100; ++v) {
      INFO(lo << ".." << hi << " at " << v);
      REQUIRE(accepts(g, std::to_string(v)) == (v >= lo && v <= hi));
    }
    CHECK_FALSE(accepts(g, "007"));
    CHECK_FALSE(accepts(g, "-0"));
  }
  const auto ge = fx().compile([](builder& b) { return integer_at_least(b, 25); });
  CHECK(accepts(ge, "25"));
  CHECK(accepts(ge, "100000000000"));
  CHECK_FALSE(accepts(ge, "24"));
  CHECK_FALSE(accepts(ge, "-30"));
  const auto le = fx().compile([](builder& b) { return integer_at_most(b, -5); });
  CHECK(accepts(le, "-5"));
  CHECK(accepts(le, "-123456"));
  CHECK_FALSE(accepts(le, "-4"));
  CHECK_FALSE(accepts(le, "3"));
}

TEST_CASE("grammar: regex subset, UTF-8 classes, formats", "[grammar]") {
  const auto g = fx().compile([](builder& b) { return regex(b, "^[A-Z][a-z]+-\\d{2,3}(x|yz)?$", text_mode::raw); });
  CHECK(accepts(g, "Ab-12"));
  CHECK(accepts(g, "Abc-123yz"));
  CHECK_FALSE(accepts(g, "ab-12"));
  CHECK_FALSE(accepts(g, "Ab-1234"));
  const auto u = fx().compile([](builder& b) { return regex(b, "^[^a-c]{2}$", text_mode::raw); });
  CHECK(accepts(u, "é中"));
  CHECK(accepts(u, "zz"));
  CHECK_FALSE(accepts(u, "ab"));
  const auto unanchored = fx().compile([](builder& b) { return regex(b, "cat", text_mode::raw); });
  CHECK(accepts(unanchored, "concatenate"));
  CHECK_FALSE(accepts(unanchored, "dog"));
  const auto js = fx().compile([](builder& b) { return regex(b, "^a\"b\\\\c$", text_mode::json); });
  CHECK(accepts(js, "a\\\"b\\\\c"));
  CHECK_FALSE(accepts(js, "a\"b\\c"));
  for (const char* bad : {"(?=x)", "a\\1", "a{1,500}", "[z-a]", "(a"})
    CHECK_THROWS_AS(fx().compile([&](builder& b) { return regex(b, bad, text_mode::raw); }), regex_error);
  const auto date = fx().compile([](builder& b) { return format(b, "date", text_mode::raw); });
  CHECK(accepts(date, "2026-12-03"));
  CHECK_FALSE(accepts(date, "2026-02-30"));
  CHECK_FALSE(accepts(date, "2026-13-01"));
  const auto uuid = fx().compile([](builder& b) { return format(b, "uuid", text_mode::raw); });
  CHECK(accepts(uuid, "123e4567-e89b-12d3-a456-426614174000"));
  CHECK_FALSE(accepts(uuid, "123e4567e89b12d3a456426614174000"));
}

TEST_CASE("grammar: masks equal the matcher's own verdict on every token", "[grammar][mask]") {
  const auto g = fx().schema(R"({"type":"object","properties":{"name":{"type":"string","maxLength":5},
      "n":{"type":"integer","minimum":-3,"maximum":40},"tags":{"type":"array","items":{"enum":["a","b\"c"]}}},
      "required":["name"],"additionalProperties":false})");
  std::mt19937_64 rng(11);
  matcher m(g);
  std::vector<std::uint64_t> mask(g->vocab().words());
  for (int step = 0; step < 60 && !m.terminated(); ++step) {
    m.fill_mask(mask);
    std::vector<std::int32_t> allowed;
    for (std::int32_t id = 0; id < g->vocab().size(); ++id) {
      const bool bit = (mask[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1;
      INFO("step " << step << " token " << id << " '" << fx().tok->decode(std::vector<std::int32_t>{id}) << "'");
      REQUIRE(bit == m.allows(id));
      if (bit) allowed.push_back(id);
    }
    REQUIRE(!allowed.empty());
    REQUIRE(m.accept_token(allowed[rng() % allowed.size()]));
  }
}

// Recursive grammars exercise the caches' "any caller" context (tokens that leave a rule), and
// budget steering relies on each cache's growth bounds: both must agree with stepping the
// matcher token by token.
TEST_CASE("grammar: masks and budget steering equal stepping every token, recursive grammars", "[grammar][mask]") {
  const std::vector<std::string> schemas = {
      R"({"$defs":{"n":{"type":"object","properties":{"v":{"anyOf":[{"type":"number"},{"type":"null"}]},"k":{"type":"array","items":{"$ref":"#/$defs/n"},"maxItems":2}},"required":["k"],"additionalProperties":false}},"$ref":"#/$defs/n"})",
      R"(true)",
      R"({"type":"object","properties":{"s":{"type":"string"},"e":{"enum":["x\"y",2]}},"required":["s","e"],"additionalProperties":false})",
  };
  for (std::size_t i = 0; i < schemas.size(); ++i) {
    const auto g = fx().schema(schemas[i]);
    for (std::uint64_t seed = 1; seed <= 2; ++seed) {
      std::mt19937_64 rng(seed * 31 + i);
      matcher m(g);
      std::vector<std::uint64_t> free_mask(g->vocab().words()), mask(g->vocab().words());
      const std::int64_t total = 48;
      for (std::int64_t step = 0; step < total && !m.terminated(); ++step) {
        const std::int64_t budget = total - step;
        m.fill_mask(free_mask);
        m.fill_mask(mask, budget);
        std::vector<std::int32_t> fits, kept;
        for (std::int32_t id = 0; id < g->vocab().size(); ++id) {
          const bool free_bit = (free_mask[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1;
          const bool bit = (mask[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1;
          INFO("schema " << i << " seed " << seed << " step " << step << " token " << id);
          REQUIRE(free_bit == m.allows(id));
          if (bit) {
            REQUIRE(free_bit);
            kept.push_back(id);
          }
          if (!free_bit) continue;
          matcher after = m;
          REQUIRE(after.accept_token(id));
          if (static_cast<std::int64_t>(after.distance()) <= budget - 1) fits.push_back(id);
        }
        INFO("schema " << i << " seed " << seed << " step " << step << " distance " << m.distance() << " budget " << budget);
        INFO("fits " << [&] {
          std::string o;
          for (auto id : fits) o += "'" + fx().tok->decode(std::vector<std::int32_t>{id}) + "' ";
          return o;
        }());
        REQUIRE(!kept.empty());
        if (!fits.empty()) REQUIRE(kept == fits); // exactly the tokens that still fit
        REQUIRE(m.accept_token(kept[rng() % kept.size()]));
      }
      CHECK(m.accepting());
    }
  }
}

TEST_CASE("grammar: every schema feature, random walks validate", "[grammar][schema]") {
  const std::vector<std::string> schemas = {
      R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":["integer","null"]},"c":{"type":"boolean"}},"required":["a","c"],"additionalProperties":false})",
      R"({"type":"object","properties":{"x":{"type":"number","minimum":-2,"maximum":5}},"required":["x"]})",
      R"({"type":"object","properties":{"x":{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1}},"required":["x"]})",
      R"({"type":"object","additionalProperties":{"type":"integer"}})",
      R"({"type":"object","properties":{"k":{"const":"fixed"}},"additionalProperties":true,"required":["k"]})",
      R"({"enum":["red","green",3,null,{"deep":[1,2]}]})",
      R"({"anyOf":[{"type":"string","format":"email"},{"type":"integer","minimum":10}]})",
      R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number"}},"required":["kind","r"],"additionalProperties":false},
                   {"type":"object","properties":{"kind":{"const":"square"},"side":{"type":"integer"}},"required":["kind","side"],"additionalProperties":false}]})",
      R"({"allOf":[{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]},{"properties":{"b":{"type":"integer"}},"required":["b"]}]})",
      R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v"],"additionalProperties":false}},"$ref":"#/$defs/node"})",
      R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":{"type":"boolean"},"minItems":2,"maxItems":4})",
      R"({"type":"array","items":{"type":"string","minLength":2,"maxLength":4},"minItems":1,"maxItems":3})",
      R"({"type":"string","pattern":"^[a-z]{3}-\\d+$"})",
      R"({"type":"object","properties":{"d":{"type":"string","format":"date"},"t":{"type":"string","format":"date-time"},"u":{"type":"string","format":"uuid"}},"required":["d","t","u"],"additionalProperties":false})",
      R"({"type":"object","properties":{"n":{"type":"integer","nullable":true}},"required":["n"],"additionalProperties":false})",
      R"({"type":"object","properties":{"s":{"type":"string","description":"annotated","title":"S","default":"x","examples":["y"]}},"required":["s"],"additionalProperties":false})",
      R"(true)",
  };
  for (std::size_t i = 0; i < schemas.size(); ++i) {
    const auto g = fx().schema(schemas[i]);
    const auto schema = json::parse(schemas[i]);
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      const auto r = walk(g, seed * 7919 + i, 400);
      const std::string out = text(r.ids);
      INFO("schema " << i << " seed " << seed << ": " << out);
      REQUIRE(r.complete);
      json::value v;
      REQUIRE_NOTHROW(v = json::parse(out));
      CHECK(validate_json(v, schema) == "");
    }
  }
}

TEST_CASE("grammar: keywords that cannot be enforced are errors naming keyword and path", "[grammar][schema]") {
  auto err = [](const std::string& s) -> std::pair<std::string, std::string> {
    try {
      check_schema(json::parse(s), "tools[0].function.parameters");
    } catch (const schema_error& e) {
      return {e.keyword, e.path};
    }
    return {"", ""};
  };
  CHECK(err(R"({"type":"object","properties":{"a":{"not":{"type":"string"}}}})") ==
        std::pair<std::string, std::string>{"not", "tools[0].function.parameters.properties.a.not"});
  CHECK(err(R"({"type":"number","multipleOf":3})").first == "multipleOf");
  CHECK(err(R"({"type":"array","uniqueItems":true})").first == "uniqueItems");
  CHECK(err(R"({"patternProperties":{"^x":{}}})").first == "patternProperties");
  CHECK(err(R"({"if":{},"then":{}})").first == "if");
  CHECK(err(R"({"type":"string","format":"ipv6"})").first == "format");
  CHECK(err(R"({"type":"string","pattern":"(?<=a)b"})").first == "pattern");
  CHECK(err(R"({"$ref":"#/$defs/missing"})").first == "$ref");
  CHECK(err(R"({"type":"number","minimum":0.5})").first == "minimum");
  CHECK(err(R"({"type":"object","properties":{"a":{}},"x-vendor":1,"description":"ok"})").first == "");
  // additionalProperties beside allOf sees only its own properties: merging would change it.
  CHECK(err(R"({"allOf":[{"properties":{"a":{}}},{"properties":{"b":{}}}],"additionalProperties":false})").first == "allOf");
}

TEST_CASE("grammar: K3 output grammars — required, named, json_schema, the parser reads them back", "[grammar][output]") {
  const auto& t = *fx().tok;
  output_spec s;
  s.k3 = true;
  s.thinking = true;
  s.tools_mode = tool_mode::required;
  s.tools = {{"get_weather", json::parse(R"({"type":"object","properties":{"city":{"type":"string","minLength":1,"maxLength":8},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city"],"additionalProperties":false})"), false, "tools[0]"},
             {"search", json::parse(R"({"type":"object","properties":{"q":{"type":"string"}},"required":["q"]})"), false, "tools[1]"}};
  const auto g = output_grammar(s, t, t.vocab_size());
  const auto ids = chat::k3_output_parser::ids_of(t);
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    const auto r = walk(g, seed, 600);
    REQUIRE(r.complete);
    chat::k3_output_parser p(ids, true, true);
    std::vector<std::pair<std::string, std::string>> calls;
    for (auto& c : feed_all(t, p, r.ids).calls) {
      if (c.begin) calls.emplace_back(c.name, "");
      calls[c.index].second += c.arguments;
    }
    INFO("seed " << seed << ": " << t.decode(r.ids));
    REQUIRE(!calls.empty());
    for (const auto& [name, args] : calls) {
      const auto& params = name == "get_weather" ? s.tools[0].parameters : s.tools[1].parameters;
      REQUIRE((name == "get_weather" || name == "search"));
      CHECK(validate_json(json::parse(args), params) == "");
    }
  }
  // Named: exactly one call of the named tool; json_schema content in the response channel.
  output_spec n = s;
  n.tools_mode = tool_mode::named;
  n.tools = {s.tools[1]};
  const auto ng = output_grammar(n, t, t.vocab_size());
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    const auto r = walk(ng, seed, 400);
    REQUIRE(r.complete);
    const auto out = t.decode(r.ids);
    CHECK(out.find("call tool=\"search\" index=\"1\"") != std::string::npos);
    CHECK(out.find("index=\"2\"") == std::string::npos);
  }
  output_spec j;
  j.k3 = true;
  j.thinking = false;
  j.json_schema = json::parse(R"({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false})");
  const auto jg = output_grammar(j, t, t.vocab_size());
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    const auto r = walk(jg, seed, 200);
    REQUIRE(r.complete);
    chat::k3_output_parser p(ids, false, false);
    const std::string content = feed_all(t, p, r.ids).content;
    INFO(content);
    CHECK(validate_json(json::parse(content), *j.json_schema) == "");
  }
}

TEST_CASE("grammar: Kimi Linear output grammar with required tool calls", "[grammar][output]") {
  const auto& t = *fx().kl;
  output_spec s;
  s.k3 = false;
  s.tools_mode = tool_mode::required;
  s.parallel = false;
  s.tools = {{"lookup", json::parse(R"({"type":"object","properties":{"id":{"type":"integer","minimum":0,"maximum":99}},"required":["id"],"additionalProperties":false})"), false, "tools[0]"}};
  const auto g = output_grammar(s, t, t.vocab_size());
  const auto ids = chat::k2_output_parser::ids_of(t);
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    matcher m(g);
    std::mt19937_64 rng(seed);
    std::vector<std::uint64_t> mask(g->vocab().words());
    std::vector<std::int32_t> out;
    for (int i = 0; i < 300 && !m.terminated(); ++i) {
      m.fill_mask(mask, 300 - i);
      std::vector<std::int32_t> allowed;
      for (std::size_t w = 0; w < mask.size(); ++w)
        for (std::uint64_t x = mask[w]; x; x &= x - 1) allowed.push_back(static_cast<std::int32_t>(w * 64 + static_cast<std::size_t>(__builtin_ctzll(x))));
      REQUIRE(!allowed.empty());
      const auto pick = allowed[rng() % allowed.size()];
      REQUIRE(m.accept_token(pick));
      out.push_back(pick);
    }
    REQUIRE(m.terminated());
    chat::k2_output_parser p(ids, true);
    std::vector<std::pair<std::string, std::string>> calls;
    for (auto& c : feed_all(t, p, out).calls) {
      if (c.begin) calls.emplace_back(c.name, "");
      calls[c.index].second += c.arguments;
    }
    INFO(t.decode(out));
    REQUIRE(calls.size() == 1u);
    CHECK(calls[0].first == "lookup");
    CHECK(validate_json(json::parse(calls[0].second), s.tools[0].parameters) == "");
  }
}
