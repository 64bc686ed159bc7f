#include "runtime/grammar/output_grammar.hpp"

#include <algorithm>
#include <thread>

#include <list>
#include <map>
#include <mutex>

#include "runtime/chat/k3_xtml.hpp"
#include "runtime/grammar/json_schema.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"

namespace k3::grammar {
namespace {

symbol special(const tok::kimi_tokenizer& t, const char* name) {
  const auto id = t.id_of(name);
  if (id < 0) return 0;
  return static_cast<symbol>(special_base + (id - t.bpe().base_vocab_size()));
}

frag any_text(builder& b) {
  byte_bits all;
  all.fill(~std::uint64_t{0});
  return b.star(b.byte_set(all));
}

frag stops(builder& b, const tok::kimi_tokenizer& t, std::initializer_list<const char*> names) {
  std::vector<frag> alts;
  for (const char* n : names)
    if (const auto s = special(t, n)) alts.push_back(b.sym(s));
  if (alts.empty()) throw grammar_error("the tokenizer has none of the model's stop tokens");
  return alts.size() == 1 ? alts[0] : b.alt(alts);
}

bool constrained_args(const output_spec& s, const tool_def& d) {
  return d.parameters.k != json::value::kind::null &&
         (d.strict || s.tools_mode == tool_mode::required || s.tools_mode == tool_mode::named);
}

grammar build(const output_spec& s, const tok::kimi_tokenizer& t) {
  builder b;
  const int max_calls = s.parallel && s.tools_mode != tool_mode::named ? 16 : 1;
  // The response JSON, when required.
  std::uint32_t json_rule = 0xffffffffu;
  std::unique_ptr<json::value> object_schema;
  std::unique_ptr<schema_compiler> json_compiler;
  if (s.json_schema || s.json_object) {
    if (!s.json_schema) {
      object_schema = std::make_unique<json::value>(json::parse(R"({"type": "object"})"));
      json_compiler = std::make_unique<schema_compiler>(b, *object_schema, "response_format");
    } else {
      json_compiler = std::make_unique<schema_compiler>(b, *s.json_schema, s.schema_path);
    }
    json_rule = json_compiler->value_rule();
  }
  const bool tools_block = s.tools_mode == tool_mode::optional || s.tools_mode == tool_mode::required || s.tools_mode == tool_mode::named;
  std::vector<const tool_def*> callable;
  if (tools_block) {
    if (s.tools.empty()) throw grammar_error("tool_choice needs declared tools");
    for (const auto& d : s.tools) callable.push_back(&d);
    if (s.tools_mode == tool_mode::named) callable.resize(1);
  }
  std::uint32_t any_json = 0xffffffffu;
  std::vector<std::unique_ptr<schema_compiler>> arg_compilers;

  if (s.k3) {
    const xtml_symbols m{special(t, "<|open|>"), special(t, "<|close|>"), special(t, "<|sep|>")};
    if (!m.open || !m.close || !m.sep) throw grammar_error("the tokenizer lacks K3's <|open|>/<|close|>/<|sep|> tokens");
    // One rule per tool for its arguments, shared by every call position.
    std::vector<std::uint32_t> args_rule(callable.size());
    for (std::size_t i = 0; i < callable.size(); ++i) {
      const auto& d = *callable[i];
      args_rule[i] = b.declare("args " + d.name);
      if (constrained_args(s, d)) {
        arg_compilers.push_back(std::make_unique<schema_compiler>(b, d.parameters, d.path));
        auto* c = arg_compilers.back().get();
        b.define(args_rule[i], [c, m](builder&) { return c->xtml_arguments(m); });
      } else {
        if (any_json == 0xffffffffu) {
          static const json::value nothing;
          arg_compilers.push_back(std::make_unique<schema_compiler>(b, nothing, ""));
          any_json = arg_compilers.back()->any_value_rule();
        }
        const auto aj = any_json;
        b.define(args_rule[i], [m, aj](builder& bb) { return schema_compiler::xtml_any_arguments(bb, m, aj); });
      }
    }
    auto call = [&](int index) {
      std::vector<frag> alts;
      for (std::size_t i = 0; i < callable.size(); ++i)
        alts.push_back(b.seq({b.sym(m.open),
                              b.literal("call tool=\"" + chat::escape_attr(callable[i]->name) + "\" index=\"" + std::to_string(index) + "\""),
                              b.sym(m.sep), b.call(args_rule[i]), b.sym(m.close), b.literal("call"), b.sym(m.sep)}));
      return alts.size() == 1 ? alts[0] : b.alt(alts);
    };
    const auto root = b.declare("message");
    b.define(root, [&](builder&) {
      std::vector<frag> parts;
      auto content = [&] { return json_rule != 0xffffffffu ? b.call(json_rule) : any_text(b); };
      auto close = [&](const char* tag) { return b.seq({b.sym(m.close), b.literal(tag), b.sym(m.sep)}); };
      if (s.thinking) {
        parts.push_back(any_text(b));
        parts.push_back(close("think"));
        const frag response = b.seq({b.sym(m.open), b.literal("response"), b.sym(m.sep), content(), close("response")});
        parts.push_back(json_rule != 0xffffffffu ? response : b.opt(response));
      } else { // the prompt opened the response channel
        parts.push_back(content());
        parts.push_back(close("response"));
      }
      if (tools_block) {
        // Calls numbered 1, 2, … in order: call(1) [call(2) [call(3) …]].
        frag tail = b.empty();
        for (int i = max_calls; i >= 2; --i) tail = b.opt(b.seq({call(i), tail}));
        const frag block = b.seq({b.sym(m.open), b.literal("tools"), b.sym(m.sep), call(1), tail, close("tools")});
        parts.push_back(s.tools_mode == tool_mode::optional ? b.opt(block) : block);
      }
      parts.push_back(close("message"));
      parts.push_back(stops(b, t, {"<|end_of_msg|>", "[EOS]"}));
      return b.seq(parts);
    });
    return b.finish(root);
  }

  // Kimi Linear / K2.
  const symbol sb = special(t, "<|tool_calls_section_begin|>"), se = special(t, "<|tool_calls_section_end|>"),
               cb = special(t, "<|tool_call_begin|>"), ab = special(t, "<|tool_call_argument_begin|>"),
               ce = special(t, "<|tool_call_end|>");
  if (tools_block && (!sb || !se || !cb || !ab || !ce)) throw grammar_error("the tokenizer lacks the K2 tool-call tokens");
  std::vector<std::uint32_t> args_rule(callable.size());
  for (std::size_t i = 0; i < callable.size(); ++i) {
    const auto& d = *callable[i];
    if (constrained_args(s, d)) {
      arg_compilers.push_back(std::make_unique<schema_compiler>(b, d.parameters, d.path));
      args_rule[i] = arg_compilers.back()->value_rule();
    } else {
      static const json::value obj = json::parse(R"({"type": "object"})");
      arg_compilers.push_back(std::make_unique<schema_compiler>(b, obj, d.path));
      args_rule[i] = arg_compilers.back()->value_rule();
    }
  }
  const auto root = b.declare("message");
  b.define(root, [&](builder&) {
    std::vector<frag> parts;
    parts.push_back(json_rule != 0xffffffffu ? b.call(json_rule) : any_text(b));
    if (tools_block) {
      auto call = [&] {
        std::vector<frag> alts;
        for (std::size_t i = 0; i < callable.size(); ++i)
          alts.push_back(b.seq({b.sym(cb), b.literal("functions." + callable[i]->name + ":"), b.plus([&] { return b.range('0', '9'); }),
                                b.sym(ab), b.call(args_rule[i]), b.sym(ce)}));
        return alts.size() == 1 ? alts[0] : b.alt(alts);
      };
      const frag section = b.seq({b.sym(sb), max_calls > 1 ? b.plus(call) : call(), b.sym(se)});
      parts.push_back(s.tools_mode == tool_mode::optional ? b.opt(section) : section);
    }
    parts.push_back(stops(b, t, {"<|im_end|>", "[EOS]", "[EOT]"}));
    return b.seq(parts);
  });
  return b.finish(root);
}

std::string cache_key(const output_spec& s, std::int32_t vocab, const void* tok) {
  std::string k = std::to_string(reinterpret_cast<std::uintptr_t>(tok)) + "|" + std::to_string(vocab) + "|" + (s.k3 ? "k3" : "k2") +
                  (s.thinking ? "|think" : "|nothink") + "|" + std::to_string(static_cast<int>(s.tools_mode)) +
                  (s.parallel ? "|par" : "|one") + (s.json_object ? "|jo" : "") + "|";
  if (s.json_schema) k += json::dump(*s.json_schema, {true, true});
  for (const auto& d : s.tools) k += "|" + d.name + (d.strict ? "!" : "") + json::dump(d.parameters, {true, true});
  return k;
}

} // namespace

bool constrains(const output_spec& s) {
  if (s.json_object || s.json_schema) return true;
  switch (s.tools_mode) {
    case tool_mode::free: return false;
    case tool_mode::none: return !s.tools.empty();
    case tool_mode::optional:
    case tool_mode::required:
    case tool_mode::named: return true;
  }
  return false;
}

std::shared_ptr<const compiled_grammar> compile_output_grammar(const output_spec& s, const tok::kimi_tokenizer& t, std::int32_t model_vocab,
                                                                unsigned threads) {
  auto g = std::make_shared<const compiled_grammar>(build(s, t), token_vocab::get(t, model_vocab));
  g->warm(threads);
  return g;
}

std::shared_ptr<const compiled_grammar> output_grammar(const output_spec& s, const tok::kimi_tokenizer& t, std::int32_t model_vocab) {
  static std::mutex mu;
  static std::list<std::pair<std::string, std::shared_ptr<const compiled_grammar>>> lru;
  constexpr std::size_t capacity = 64;
  const auto key = cache_key(s, model_vocab, &t);
  {
    std::lock_guard lock(mu);
    for (auto it = lru.begin(); it != lru.end(); ++it)
      if (it->first == key) {
        lru.splice(lru.begin(), lru, it);
        return it->second;
      }
  }
  // Every token cache is computed now, in parallel, so no decode step pays for a cold one (the
  // cache keeps them for the next turn of the same agent).
  const unsigned threads = std::clamp(std::thread::hardware_concurrency() / 2, 1u, 8u);
  auto g = compile_output_grammar(s, t, model_vocab, threads);
  std::lock_guard lock(mu);
  lru.emplace_front(key, g);
  if (lru.size() > capacity) lru.pop_back();
  return g;
}

} // namespace k3::grammar
