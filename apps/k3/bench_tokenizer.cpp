// `k3 bench tokenizer`: single-thread encode throughput on a mixed-language text.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tokenizer/bpe.hpp"

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
  if (file.empty()) throw std::invalid_argument("--tiktoken FILE is required");
  tok::pattern_kind kind;
  if (!tok::parse_pattern(pattern, kind)) throw std::invalid_argument("--pattern must be kimi, o200k or cl100k");
  const tok::bpe_tokenizer t(tok::bpe_tokenizer::load_tiktoken_file(file), tok::pattern_source(kind));
  std::string text;
  if (!text_file.empty()) {
    std::ifstream in(text_file, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  } else {
    text = mixed_text(static_cast<std::size_t>(mb * 1e6));
  }
  std::size_t tokens = 0;
  double best = 1e300;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    tokens = t.encode(text, false).size();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("tokenizer %s (%s pattern): %.2f MB in %zu tokens, best of 5: %.1f ms = %.1f MB/s on one core\n",
              file.c_str(), pattern.c_str(), text.size() / 1e6, tokens, best * 1e3, text.size() / best / 1e6);
  return 0;
}

} // namespace k3::app
