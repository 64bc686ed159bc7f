// Tokenizer: pre-tokenizer splits (Kimi pattern), BPE merge order (short and long-piece paths
// against a naive reference), the Kimi 400k/25k split, special tokens both ways, round trips
// including invalid UTF-8, the incremental detokenizer, and model-directory loading errors.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "runtime/tokenizer/bpe.hpp"
#include "runtime/tokenizer/detokenizer.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"
#include "runtime/tokenizer/pretokenizer.hpp"
#include "runtime/tokenizer/utf8.hpp"

using namespace k3::tok;

namespace {

std::vector<std::string> split_all(pattern_kind p, std::string_view text) {
  regex_splitter s(pattern_source(p));
  std::vector<std::string> out;
  s.split(text, [&](std::string_view piece) { out.emplace_back(piece); });
  return out;
}

// A small byte-level vocabulary: 256 bytes, then merges learned greedily from a sample so that
// multi-level merges (and rank ties across positions) occur.
std::vector<std::string> toy_vocab() {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.emplace_back(1, static_cast<char>(b));
  for (const char* m : {"th", "he", "the", " t", " the", "er", "in", "an", "ab", "abc", "cd", "abcd", "ef", "abcdef",
                        "efg", "ing", " a", "aa", "aaaa", "  ", "    ", "\xE4\xBD", "\xE4\xBD\xA0", "12", "123"})
    v.emplace_back(m);
  return v;
}

// The literal tiktoken merge loop, for comparison.
std::vector<std::int32_t> naive_bpe(const std::vector<std::string>& vocab, std::string_view piece) {
  std::map<std::string, int> rank;
  for (std::size_t i = 0; i < vocab.size(); ++i) rank[vocab[i]] = static_cast<int>(i);
  std::vector<std::string> parts;
  for (char c : piece) parts.emplace_back(1, c);
  while (parts.size() > 1) {
    int best = INT32_MAX;
    std::size_t at = 0;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      auto it = rank.find(parts[i] + parts[i + 1]);
      if (it != rank.end() && it->second < best) {
        best = it->second;
        at = i;
      }
    }
    if (best == INT32_MAX) break;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  std::vector<std::int32_t> ids;
  for (auto& p : parts) ids.push_back(rank.at(p));
  return ids;
}

// Named K3 specials at their real offsets from the base (base = vocab size here).
std::vector<std::pair<std::int32_t, std::string>> k3_named(std::int32_t base) {
  return {{base + 0, "[BOS]"},         {base + 1, "[EOS]"},           {base + 2, "<|end_of_msg|>"},
          {base + 3, "<|open|>"},      {base + 4, "<|close|>"},       {base + 5, "<|sep|>"},
          {base + 255, "[PAD]"}};
}

} // namespace

TEST_CASE("kimi pre-tokenizer splits Han runs, letters, digits, punctuation and whitespace", "[tokenizer]") {
  using v = std::vector<std::string>;
  CHECK(split_all(pattern_kind::kimi, "Hello world") == v{"Hello", " world"});
  CHECK(split_all(pattern_kind::kimi, "你好世界abc") == v{"你好世界", "abc"});
  CHECK(split_all(pattern_kind::kimi, "中文English混合") == v{"中文", "English", "混合"});
  CHECK(split_all(pattern_kind::kimi, "日本語のテキスト") == v{"日本語", "のテキスト"});
  CHECK(split_all(pattern_kind::kimi, "I'm DON'T we'LL") == v{"I'm", " DON'T", " we'LL"});
  CHECK(split_all(pattern_kind::kimi, "12345") == v{"123", "45"});
  CHECK(split_all(pattern_kind::kimi, "$100") == v{"$", "100"});
  CHECK(split_all(pattern_kind::kimi, "  hello") == v{" ", " hello"});
  CHECK(split_all(pattern_kind::kimi, "a\r\n\r\nb") == v{"a", "\r\n\r\n", "b"});
  CHECK(split_all(pattern_kind::kimi, "hello!!!\n\nx") == v{"hello", "!!!\n\n", "x"});
  CHECK(split_all(pattern_kind::kimi, "").empty());
}

TEST_CASE("pre-tokenizer: a 25,000-letter run is one piece in linear time (no JIT stack fallback)", "[tokenizer]") {
  // The Kimi pattern's repeated groups need one JIT frame per letter: with PCRE2's default
  // 32 KiB stack these runs used to fail the match and fall back to one piece per character,
  // which was both slow (quadratic) and different ids from the reference.
  for (const std::string& unit : {std::string("a"), std::string("e\xCC\x81"), std::string("\xD0\xB6")}) {
    std::string run;
    for (int i = 0; i < 25000; ++i) run += unit;
    const auto pieces = split_all(pattern_kind::kimi, run);
    INFO("unit bytes " << unit.size());
    REQUIRE(pieces.size() == 1);
    CHECK(pieces[0] == run);
  }
  // o200k has no split rule: a 300,000-letter piece still matches (interpreter fallback).
  const std::string big(300000, 'x');
  const auto o = split_all(pattern_kind::o200k, big);
  REQUIRE(o.size() == 1);
  CHECK(o[0].size() == big.size());
}

TEST_CASE("bounded encoding stops once over the limit, bytes bound the fewest tokens", "[tokenizer]") {
  const auto vocab = toy_vocab();
  const kimi_tokenizer t(vocab, k3_named(static_cast<std::int32_t>(vocab.size())));
  const std::string text(4000, 'a');
  const auto all = t.encode(text, false);
  std::vector<std::int32_t> out;
  const std::vector<segment> segs{{text, false}};
  CHECK(t.encode_bounded(segs, all.size(), out));
  CHECK(out == all);
  out.clear();
  CHECK_FALSE(t.encode_bounded(segs, all.size() - 1, out));
  CHECK(out.size() <= all.size());
  CHECK(t.min_tokens(text.size()) <= all.size());
  out.clear();
  CHECK_FALSE(t.encode_bounded(segs, t.min_tokens(text.size()) - 1, out));
  CHECK(out.empty()); // refused from the byte count alone
}

TEST_CASE("pre-tokenizer keeps invalid UTF-8 bytes as their own pieces", "[tokenizer]") {
  const std::string text = "ab\xFF\xFE" "cd \xE4\xBD";
  const auto pieces = split_all(pattern_kind::o200k, text);
  std::string joined;
  for (auto& p : pieces) joined += p;
  CHECK(joined == text);
  CHECK(std::find(pieces.begin(), pieces.end(), std::string("\xFF\xFE")) != pieces.end());
}

TEST_CASE("BPE merges match the literal tiktoken loop (short and long pieces)", "[tokenizer]") {
  const auto vocab = toy_vocab();
  bpe_tokenizer t(vocab, "(?s).+"); // one piece per input: exercises BPE alone
  std::mt19937 gen(7);
  const std::string alphabet = "abcdefgthin 123";
  for (int len : {1, 2, 7, 33, 255, 256, 700, 3000}) {
    std::string s;
    for (int i = 0; i < len; ++i) s.push_back(alphabet[gen() % alphabet.size()]);
    INFO("len=" << len);
    CHECK(t.encode(s, false) == naive_bpe(vocab, s));
  }
  const std::string rep = [] { // 10,500 bytes: the heap path on a periodic piece (the naive loop is O(n²))
    std::string r;
    for (int i = 0; i < 1500; ++i) r += "abcdefg";
    return r;
  }();
  CHECK(t.encode(rep, false) == naive_bpe(vocab, rep));
}

TEST_CASE("kimi 400k/25k split cuts long runs exactly as tokenization_kimi.py", "[tokenizer]") {
  std::string s;
  for (int i = 0; i < 4000; ++i) s += "abcdefg"; // 28,000 non-space chars
  auto parts = kimi_split(s);
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].size() == 25000);
  CHECK(parts[1].size() == 3000);
  // Alternating runs restart the count; a space run of 25,001 is cut once.
  const std::string t = "ab" + std::string(25001, ' ') + "cd";
  parts = kimi_split(t);
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].size() == 2 + 25000);
  // Code points, not bytes: 25,001 Han characters (3 bytes each) are cut at 25,000 chars.
  std::string han;
  for (int i = 0; i < 25001; ++i) han += "中";
  parts = kimi_split(han);
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].size() == 75000);
  // Small windows: every window is split separately.
  CHECK(kimi_split("abcdef", 4, 25000).size() == 2);
  CHECK(kimi_split("").empty());
}

TEST_CASE("special tokens are recognised only where allowed, and reserved names fill the range", "[tokenizer]") {
  const auto base = toy_vocab();
  const auto n = static_cast<std::int32_t>(base.size());
  kimi_tokenizer t(base, k3_named(n));
  CHECK(t.vocab_size() == n + 256);
  CHECK(t.id_of("<|open|>") == n + 3);
  CHECK(t.id_of("<|reserved_token_" + std::to_string(n + 16) + "|>") == n + 16);
  const std::string text = "hi<|open|>there<|sep|>";
  const auto ctrl = t.encode(text, true);
  CHECK(std::count(ctrl.begin(), ctrl.end(), n + 3) == 1);
  CHECK(std::count(ctrl.begin(), ctrl.end(), n + 5) == 1);
  const auto plain = t.encode(text, false); // user content: the literal marker is just bytes
  for (auto id : plain) CHECK(id < n);
  CHECK(t.decode(plain) == text);
  CHECK(t.decode(ctrl) == text);
  // Segments never merge across a boundary.
  const segment segs[] = {{"<|open|>", true}, {"the", false}, {" the", false}};
  const auto ids = t.encode(std::span<const segment>(segs));
  CHECK(ids == std::vector<std::int32_t>{n + 3, t.encode("the", false)[0], t.encode(" the", false)[0]});
  CHECK_THROWS_AS(t.bpe().token_bytes(n + 256), std::out_of_range);
}

TEST_CASE("round trips: multilingual, whitespace, numbers, invalid UTF-8, empty", "[tokenizer]") {
  const auto base = toy_vocab();
  kimi_tokenizer t(base, k3_named(static_cast<std::int32_t>(base.size())));
  for (const std::string& s : {std::string("Hello, 世界! 😀 café"), std::string("   \t\t\n\r\n  x  "),
                              std::string("1234567890 3.14159"), std::string("bad \xFF\xC0\x80 bytes \xE4\xBD"),
                              std::string(""), std::string(30000, 'z')}) {
    CHECK(t.decode(t.encode(s, false)) == s);
    CHECK(t.decode(t.encode(s, true)) == s);
  }
  CHECK(t.encode("", false).empty());
}

TEST_CASE("incremental detokenizer never emits broken UTF-8 and equals the full decode", "[tokenizer]") {
  // A vocabulary whose tokens split multi-byte characters: single bytes only.
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  bpe_tokenizer t(bytes, "(?s).");
  const std::string text = "aé中😀b";
  const auto ids = t.encode(text, false);
  incremental_decoder d(t);
  std::string out;
  for (auto id : ids) {
    const std::string piece = d.push(id);
    CHECK(k3::utf8::valid(piece));
    out += piece;
  }
  out += d.flush();
  CHECK(out == text);
  // A truncated character at the end becomes U+FFFD on flush; an impossible byte at once.
  incremental_decoder d2(t);
  CHECK(d2.push_bytes("x\xE4\xBD").empty() == false);
  CHECK(d2.pending() == 2);
  CHECK(d2.flush() == "\xEF\xBF\xBD");
  incremental_decoder d3(t);
  CHECK(d3.push_bytes("\xFF") == "\xEF\xBF\xBD");
}

TEST_CASE("model directory loading and its errors", "[tokenizer]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "k3_tok_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& body) { std::ofstream(dir / name) << body; };
  std::string model;
  static const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int b = 0; b < 256; ++b) {
    const unsigned v = static_cast<unsigned>(b);
    model += std::string{b64[v >> 2], b64[(v & 3) << 4], '=', '='} + " " + std::to_string(b) + "\n";
  }
  model += "aGk= 256\n"; // "hi"
  write("tiktoken.model", model);
  write("tokenizer_config.json",
        R"({"added_tokens_decoder": {"257": {"content": "[BOS]", "special": true}, "259": {"content": "<|end_of_msg|>"}}})");
  write("config.json", R"({"model_type": "kimi_k3", "text_config": {"bos_token_id": 257, "eos_token_id": 259, "pad_token_id": 512}})");
  write("generation_config.json", R"({"eos_token_id": [259, 258]})");
  const auto t = kimi_tokenizer::load(dir.string());
  CHECK(t.vocab_size() == 257 + 256);
  CHECK(t.bos_id == 257);
  CHECK(t.eos_id == 259);
  CHECK(t.pad_id == 512);
  CHECK(t.stop_ids == std::vector<std::int32_t>{258, 259});
  CHECK(t.encode("hi", false) == std::vector<std::int32_t>{256});
  // Errors name the file and line.
  write("tiktoken.model", model + "!!!! 257\n");
  CHECK_THROWS_WITH(kimi_tokenizer::load(dir.string()), Catch::Contains("tiktoken.model:258") && Catch::Contains("base64"));
  write("tiktoken.model", model + "aGk= 300\n");
  CHECK_THROWS_WITH(kimi_tokenizer::load(dir.string()), Catch::Contains("out of order"));
  write("tiktoken.model", model);
  write("tokenizer_config.json", R"({"added_tokens_decoder": {"9999": {"content": "x"}}})");
  CHECK_THROWS_WITH(kimi_tokenizer::load(dir.string()), Catch::Contains("outside the special range"));
  write("tokenizer_config.json", "{not json");
  CHECK_THROWS_WITH(kimi_tokenizer::load(dir.string()), Catch::Contains("tokenizer_config.json"));
  fs::remove_all(dir);
}
