#include "runtime/model/demo_vocab.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include "kernels/sampling/sampler.hpp"
#include "runtime/tokenizer/pretokenizer.hpp"

namespace k3::model {

const std::string& demo_corpus() {
  static const std::string text =
      "The quick brown fox jumps over the lazy dog. A serving runtime streams tokens to many users at once; "
      "the scheduler decides which requests share each step, and the cache manager keeps their state.\n"
      "Kimi Delta Attention keeps a fixed-size recurrent state per head, while the latent attention layers "
      "store one compressed row per token. Mixture-of-experts layers route every token to a few experts.\n"
      "def generate(prompt, max_tokens=16):\n    tokens = tokenizer.encode(prompt)\n    for _ in range(max_tokens):\n"
      "        logits = model.step(tokens)\n        tokens.append(int(logits.argmax()))\n    return tokenizer.decode(tokens)\n"
      "for (int i = 0; i < n; ++i) { sum += x[i] * w[i]; }\nreturn sum;\n"
      "Hello, world! How are you today? I'm fine, thanks. We've tested it, they'll ship it, you'd like it.\n"
      "Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 256 1024 2048 65536 3.14159 2.71828 1e-5 -5.0\n"
      "The model answers questions, writes code, and explains its reasoning step by step before it responds.\n"
      "User: What is the capital of France?\nAssistant: The capital of France is Paris.\n"
      "User: Write a haiku about the sea.\nAssistant: Waves fold into foam, the tide keeps its slow promise, "
      "salt wind remembers.\n"
      "你好，世界！今天天气很好。我们正在测试一个语言模型的推理服务。模型会逐个生成词元。\n"
      "こんにちは、世界。Привет, мир! Bonjour le monde. Hola, mundo. Grüße aus Berlin.\n"
      "JSON: {\"name\": \"k3\", \"tokens\": [1, 2, 3], \"stream\": true, \"temperature\": 0.7}\n"
      "The throughput of a decode step is bounded by how fast the weights can be read from memory; "
      "batching more sequences into one step reuses each weight for many tokens and raises throughput.\n"
      "In the beginning the universe was created. This has made a lot of people very angry and been widely "
      "regarded as a bad move. Time is an illusion; lunchtime doubly so.\n";
  return text;
}

namespace {

struct pair_hash_less {
  bool operator()(const std::pair<std::string, std::string>& a, const std::pair<std::string, std::string>& b) const {
    return a < b;
  }
};

} // namespace

std::vector<std::string> make_demo_vocab(int base_size, std::uint64_t seed) {
  if (base_size < 256) throw std::invalid_argument("make_demo_vocab: base vocabulary needs at least 256 tokens");
  std::vector<std::string> tokens;
  std::set<std::string> have;
  for (int b = 0; b < 256; ++b) {
    tokens.emplace_back(1, static_cast<char>(b));
    have.insert(tokens.back());
  }

  // Word frequencies of the pre-tokenized corpus.
  tok::regex_splitter split(tok::pattern_source(tok::pattern_kind::kimi));
  std::map<std::string, int> freq;
  split.split(demo_corpus(), [&](std::string_view p) { ++freq[std::string(p)]; });
  std::vector<std::pair<std::vector<std::string>, int>> words;
  for (const auto& [w, f] : freq) {
    std::vector<std::string> sym;
    for (char ch : w) sym.emplace_back(1, ch);
    words.emplace_back(std::move(sym), f);
  }

  while (static_cast<int>(tokens.size()) < base_size) {
    std::map<std::pair<std::string, std::string>, int, pair_hash_less> pairs;
    for (const auto& [sym, f] : words)
      for (std::size_t i = 0; i + 1 < sym.size(); ++i) pairs[{sym[i], sym[i + 1]}] += f;
    const std::pair<std::string, std::string>* best = nullptr;
    int best_n = 1; // a pair seen once is not worth a merge
    for (const auto& [p, cnt] : pairs)
      if (cnt > best_n && !have.count(p.first + p.second)) {
        best = &p;
        best_n = cnt;
      }
    if (!best) break;
    const auto merged = best->first + best->second;
    const auto a = best->first, b = best->second;
    tokens.push_back(merged);
    have.insert(merged);
    for (auto& [sym, f] : words) {
      std::vector<std::string> next;
      for (std::size_t i = 0; i < sym.size(); ++i) {
        if (i + 1 < sym.size() && sym[i] == a && sym[i + 1] == b) {
          next.push_back(merged);
          ++i;
        } else {
          next.push_back(sym[i]);
        }
      }
      sym = std::move(next);
    }
  }

  // Filler ranks: concatenations of two earlier tokens.
  sampling::splitmix64 rng(seed ^ 0x6b33766f636162ull);
  while (static_cast<int>(tokens.size()) < base_size) {
    const auto& a = tokens[rng.next() % tokens.size()];
    const auto& b = tokens[rng.next() % tokens.size()];
    if (a.size() + b.size() > 16) continue;
    std::string t = a + b;
    if (have.insert(t).second) tokens.push_back(std::move(t));
  }
  return tokens;
}

std::string tiktoken_file_text(const std::vector<std::string>& tokens) {
  static const char* tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve(tokens.size() * 16);
  for (std::size_t r = 0; r < tokens.size(); ++r) {
    const auto& s = tokens[r];
    for (std::size_t i = 0; i < s.size(); i += 3) {
      const std::uint32_t b0 = static_cast<unsigned char>(s[i]);
      const std::uint32_t b1 = i + 1 < s.size() ? static_cast<unsigned char>(s[i + 1]) : 0;
      const std::uint32_t b2 = i + 2 < s.size() ? static_cast<unsigned char>(s[i + 2]) : 0;
      const std::uint32_t v = b0 << 16 | b1 << 8 | b2;
      out += tbl[v >> 18 & 63];
      out += tbl[v >> 12 & 63];
      out += i + 1 < s.size() ? tbl[v >> 6 & 63] : '=';
      out += i + 2 < s.size() ? tbl[v & 63] : '=';
    }
    out += ' ';
    out += std::to_string(r);
    out += '\n';
  }
  return out;
}

} // namespace k3::model
