// `k3 bench tokenizer`: single-thread encode throughput on a mixed-language text and on the
// worst-case inputs for pre-tokenization and BPE (long single-piece runs).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tokenizer/bpe.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"

namespace k3::app {
namespace {

// Mixed sample (English, Chinese, code, emoji, numbers, whitespace); repeated with a counter
// so pieces vary and the direct-hit cache of common words is not the only path exercised.
std::string mixed_text(std::size_t bytes) {
  static const char* parts[] = {
      "The quick brown fox jumps over the lazy dog; it's 2026 and we'll ship K3 serving at scale. ",
      "大规模语言模型的推理服务需要高效的调度和内存管理，尤其是在长上下文场景中。",
      "for (int i = 0; i < n; ++i) {\n    sum += a[i] * b[i];  // dot product\n}\n",
      "emoji: 😀🚀🎉👩‍💻 👍🏽 — café naïve résumé ",
      "Numbers: 3.14159, 1,000,000 and 0x7fffffff; tabs\t\tand   spaces\r\n",
      "def encode(self, text: str) -> list[int]:\n        return self._core.encode(text)\n",
      "東京は日本の首都です。서울은 한국의 수도입니다. Москва — столица России. ",
  };
  std::string out;
  std::size_t k = 0;
  while (out.size() < bytes) {
    out += parts[k % (sizeof parts / sizeof *parts)];
    if (k % 7 == 6) {
      out += '#';
      out += std::to_string(k);
      out += ' ';
    }
    ++k;
  }
  return out;
}

} // namespace

int bench_tokenizer_run(const std::string& file, const std::string& pattern, const std::string& text_file, double mb) {
  tok::pattern_kind kind;
  if (!tok::parse_pattern(pattern, kind)) throw std::invalid_argument("--pattern must be kimi, o200k or cl100k");
  const tok::bpe_tokenizer t(tok::bpe_tokenizer::load_tiktoken_file(file), tok::pattern_source(kind));
  // The Kimi pattern comes with tokenization_kimi.py's 400k/25k piece split.
  auto encode = [&](const std::string& text) {
    std::vector<std::int32_t> ids;
    if (kind == tok::pattern_kind::kimi)
      for (auto piece : tok::kimi_split(text)) t.encode_into(piece, false, ids);
    else
      t.encode_into(text, false, ids);
    return ids.size();
  };
  auto measure = [&](const std::string& text, std::size_t& tokens) {
    double best = 1e300;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      tokens = encode(text);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return text.size() / best / 1e6;
  };
  std::string text;
  if (!text_file.empty()) {
    std::ifstream in(text_file, std::ios::binary);
    if (!in) throw std::invalid_argument("--text: cannot read " + text_file);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  } else {
    text = mixed_text(static_cast<std::size_t>(mb * 1e6));
  }
  std::size_t tokens = 0;
  const double mixed = measure(text, tokens);
  std::printf("tokenizer %s (%s pattern), one core, best of 3\n", file.c_str(), pattern.c_str());
  std::printf("| input | MB | tokens | MB/s | vs mixed |\n|---|---|---|---|---|\n");
  std::printf("| %s | %.2f | %zu | %.1f | 1.00 |\n", text_file.empty() ? "mixed text" : text_file.c_str(), text.size() / 1e6,
              tokens, mixed);
  // Worst cases for pre-tokenization and BPE: single-piece runs up to the 25k split, combining
  // marks, long whitespace, a 7-letter period (the split seam), one Han run.
  const std::size_t bytes = std::max<std::size_t>(static_cast<std::size_t>(mb * 1e6), 100000);
  struct worst {
    const char* name;
    std::string unit;
  };
  const worst cases[] = {{"'a' repeated", "a"},
                         {"'e' + U+0301 repeated", "e\xCC\x81"},
                         {"'abcdefg' repeated", "abcdefg"},
                         {"spaces", " "},
                         {"'\\n' repeated", "\n"},
                         {"digits", "7"},
                         {"Han run", "\xE4\xB8\xAD"},
                         {"'!' repeated", "!"}};
  double worst_ratio = 0;
  for (const auto& c : cases) {
    std::string w;
    while (w.size() < bytes) w += c.unit;
    const double r = measure(w, tokens);
    worst_ratio = std::max(worst_ratio, mixed / r);
    std::printf("| %s | %.2f | %zu | %.1f | %.2f |\n", c.name, w.size() / 1e6, tokens, r, r / mixed);
  }
  std::printf("worst case is %.2fx slower than mixed text (goal: within 4x)\n", worst_ratio);
  return 0;
}

} // namespace k3::app
