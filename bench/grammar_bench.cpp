// `k3 bench grammar`: the cost of constrained decoding on a K3-sized vocabulary (163,584 base
// tokens + 256 specials = 163,840 ids): compile time per schema (the automaton and every token
// cache, on one thread and on several, as the server does it) and the time to fill one token
// mask, per generated token, p50 / p99 / max, over seeded random walks through each grammar.
#include "bench/grammar_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "runtime/chat/json.hpp"
#include "runtime/grammar/output_grammar.hpp"
#include "runtime/model/demo_vocab.hpp"
#include "runtime/tokenizer/bpe.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"

namespace k3::bench {
namespace {

using clk = std::chrono::steady_clock;

double us(clk::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct row {
  std::string name;
  double compile1_ms = 0, compile_ms = 0, p50 = 0, p99 = 0, max = 0, cache_mb = 0;
  std::size_t steps = 0;
  bool complete = false;
};

row run_case(const std::string& name, const grammar::output_spec& spec, const tok::kimi_tokenizer& t, int steps, std::uint64_t seed,
             unsigned threads) {
  row r;
  r.name = name;
  auto t0 = clk::now();
  (void)grammar::compile_output_grammar(spec, t, t.vocab_size(), 1);
  r.compile1_ms = us(clk::now() - t0) / 1e3;
  t0 = clk::now();
  const auto g = grammar::compile_output_grammar(spec, t, t.vocab_size(), threads);
  r.compile_ms = us(clk::now() - t0) / 1e3;
  r.cache_mb = static_cast<double>(g->cache_bytes()) / (1 << 20);
  grammar::matcher m(g);
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> mask(g->vocab().words());
  std::vector<double> times;
  for (int i = 0; i < steps && !m.terminated(); ++i) {
    t0 = clk::now();
    m.fill_mask(mask, steps - i);
    times.push_back(us(clk::now() - t0));
    // Walk forward: half the time prefer a token that is not free text, so walks reach the
    // structure instead of idling in a string or the response channel.
    std::vector<std::int32_t> allowed, structural;
    for (std::size_t w = 0; w < mask.size(); ++w)
      for (std::uint64_t x = mask[w]; x; x &= x - 1) {
        const auto id = static_cast<std::int32_t>(w * 64 + static_cast<std::size_t>(__builtin_ctzll(x)));
        allowed.push_back(id);
        const auto s = g->vocab().symbols(id);
        if (std::any_of(s.begin(), s.end(), [](grammar::symbol c) { return c >= 256 || c == '"' || c == '{' || c == '}' || c == ','; }))
          structural.push_back(id);
      }
    if (allowed.empty()) break;
    const auto& pool = !structural.empty() && rng() % 2 ? structural : allowed;
    if (!m.accept_token(pool[rng() % pool.size()])) break;
  }
  r.complete = m.accepting();
  r.steps = times.size();
  std::sort(times.begin(), times.end());
  if (!times.empty()) {
    r.p50 = times[times.size() / 2];
    r.p99 = times[std::min(times.size() - 1, times.size() * 99 / 100)];
    r.max = times.back();
  }
  return r;
}

} // namespace

int run_grammar_benchmark(const grammar_bench_options& o) {
  std::vector<std::string> base;
  std::string source;
  if (!o.tiktoken.empty()) {
    base = tok::bpe_tokenizer::load_tiktoken_file(o.tiktoken);
    source = o.tiktoken;
  } else {
    base = model::make_demo_vocab(163584, 1);
    source = "demo BPE vocabulary";
  }
  const auto b = static_cast<std::int32_t>(base.size());
  const tok::kimi_tokenizer t(std::move(base),
                              {{b + 0, "[BOS]"}, {b + 1, "[EOS]"}, {b + 2, "<|end_of_msg|>"}, {b + 3, "<|open|>"}, {b + 4, "<|close|>"},
                               {b + 5, "<|sep|>"}, {b + 255, "[PAD]"}},
                              {b + 3, b + 4, b + 5});
  // The trie is built once per tokenizer, not per grammar: hold it so every case shares it.
  const auto t_trie = clk::now();
  const auto vocab = grammar::token_vocab::get(t, t.vocab_size());
  std::printf("token trie built in %.0f ms (once per tokenizer)\n", us(clk::now() - t_trie) / 1e3);
  std::printf("grammar masks over %d token ids (%s), one core, %d-token random walks, seed %llu\n", t.vocab_size(), source.c_str(), o.steps,
              static_cast<unsigned long long>(o.seed));
  auto tool = [](const char* schema) {
    grammar::output_spec s;
    s.k3 = true;
    s.thinking = false;
    s.tools_mode = grammar::tool_mode::required;
    s.tools = {{"tool", json::parse(schema), false, "tools[0]"}};
    return s;
  };
  std::vector<std::pair<std::string, grammar::output_spec>> cases;
  cases.emplace_back("flat object (tool call)", tool(R"({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1,"maximum":14},
      "unit":{"enum":["C","F"]},"detailed":{"type":"boolean"}},"required":["city","days"],"additionalProperties":false})"));
  cases.emplace_back("nested $ref (recursive tree)", tool(R"({"$defs":{"node":{"type":"object","properties":{"name":{"type":"string"},
      "value":{"anyOf":[{"type":"number"},{"type":"null"}]},"children":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":3}},
      "required":["name","children"],"additionalProperties":false}},"type":"object","properties":{"root":{"$ref":"#/$defs/node"}},"required":["root"]})"));
  cases.emplace_back("patterns and formats", tool(R"({"type":"object","properties":{"id":{"type":"string","pattern":"^[A-Z]{2}-\\d{4}$"},
      "email":{"type":"string","format":"email"},"when":{"type":"string","format":"date-time"},"uuid":{"type":"string","format":"uuid"},
      "zip":{"type":"string","pattern":"^\\d{5}(-\\d{4})?$"}},"required":["id","email","when","uuid","zip"],"additionalProperties":false})"));
  {
    grammar::output_spec s;
    s.k3 = true;
    s.thinking = false;
    s.json_object = true;
    cases.emplace_back("free JSON (json_object)", s);
  }
  std::printf("| grammar | compile, 1 thread (ms) | compile, %u threads (ms) | mask p50 (µs) | mask p99 (µs) | mask max (µs) | steps | caches (MiB) |\n",
              o.threads);
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const auto& [name, spec] : cases) {
    const auto r = run_case(name, spec, t, o.steps, o.seed, o.threads);
    std::printf("| %s | %.1f | %.1f | %.1f | %.1f | %.0f | %zu%s | %.1f |\n", r.name.c_str(), r.compile1_ms, r.compile_ms, r.p50, r.p99, r.max,
                r.steps, r.complete ? "" : " (incomplete)", r.cache_mb);
  }
  return 0;
}

} // namespace k3::bench
