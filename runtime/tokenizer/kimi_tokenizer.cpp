#include "runtime/tokenizer/kimi_tokenizer.hpp"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include <simdjson.h>

#include "runtime/tokenizer/utf8.hpp"

namespace k3::tok {
namespace {

std::vector<std::pair<std::string, std::int32_t>> special_table(
    std::int32_t base, const std::vector<std::pair<std::int32_t, std::string>>& named) {
  std::vector<std::pair<std::string, std::int32_t>> out;
  for (std::int32_t id = base; id < base + kimi_tokenizer::num_special_slots; ++id) {
    auto it = std::find_if(named.begin(), named.end(), [&](const auto& p) { return p.first == id; });
    out.emplace_back(it != named.end() ? it->second : "<|reserved_token_" + std::to_string(id) + "|>", id);
  }
  return out;
}

std::int64_t read_id(simdjson::dom::element obj, const char* key) {
  std::int64_t v;
  if (obj[key].get(v) == simdjson::SUCCESS) return v;
  return -1;
}

} // namespace

std::vector<std::string_view> kimi_split(std::string_view text, std::size_t window, std::size_t max_run) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    // One window of `window` code points (invalid bytes count as one each).
    std::size_t end = pos, chars = 0;
    while (end < text.size() && chars < window) {
      const int n = utf8::sequence_length(text, end);
      end += n > 0 ? static_cast<std::size_t>(n) : 1;
      ++chars;
    }
    // _split_whitespaces_or_nonwhitespaces over [pos, end).
    std::size_t slice_start = pos, run = 0, i = pos;
    bool run_space = false, first = true;
    while (i < end) {
      const int n = utf8::sequence_length(text, i);
      const bool sp = n > 0 && utf8::python_isspace(utf8::decode_at(text, i));
      if (first) {
        run_space = sp;
        first = false;
      }
      if (sp != run_space) {
        run = 1;
        run_space = sp;
      } else if (++run > max_run) {
        out.push_back(text.substr(slice_start, i - slice_start));
        slice_start = i;
        run = 1;
      }
      i += n > 0 ? static_cast<std::size_t>(n) : 1;
    }
    out.push_back(text.substr(slice_start, end - slice_start));
    pos = end;
  }
  return out;
}

kimi_tokenizer::kimi_tokenizer(std::vector<std::string> base,
                               const std::vector<std::pair<std::int32_t, std::string>>& named,
                               const std::vector<std::int32_t>& not_special)
    : bpe_(make_bpe(std::move(base), named)) {
  for (std::int32_t id = bpe_.base_vocab_size(); id < bpe_.vocab_size(); ++id)
    if (std::find(not_special.begin(), not_special.end(), id) == not_special.end()) skippable_.push_back(id);
}

bpe_tokenizer kimi_tokenizer::make_bpe(std::vector<std::string> base,
                                       const std::vector<std::pair<std::int32_t, std::string>>& named) {
  const auto n = static_cast<std::int32_t>(base.size());
  return bpe_tokenizer(std::move(base), pattern_source(pattern_kind::kimi), special_table(n, named));
}

kimi_tokenizer kimi_tokenizer::load(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const fs::path dir(model_dir);
  auto base = bpe_tokenizer::load_tiktoken_file((dir / "tiktoken.model").string());
  const auto n = static_cast<std::int32_t>(base.size());
  std::vector<std::pair<std::int32_t, std::string>> named;
  std::vector<std::int32_t> not_special;
  simdjson::dom::parser parser;
  const std::string tc = (dir / "tokenizer_config.json").string();
  simdjson::dom::element cfg;
  if (auto err = parser.load(tc).get(cfg)) throw std::runtime_error(tc + ": " + simdjson::error_message(err));
  simdjson::dom::object added;
  if (cfg["added_tokens_decoder"].get(added) == simdjson::SUCCESS) {
    for (auto [key, val] : added) {
      char* end = nullptr;
      const std::string k(key);
      const long id = std::strtol(k.c_str(), &end, 10);
      std::string_view content;
      if (*end != '\0' || val["content"].get(content) != simdjson::SUCCESS)
        throw std::runtime_error(tc + ": added_tokens_decoder[\"" + k + "\"] needs a numeric key and a content string");
      if (id < n || id >= n + num_special_slots)
        throw std::runtime_error(tc + ": added_tokens_decoder id " + k + " outside the special range [" +
                                 std::to_string(n) + ", " + std::to_string(n + num_special_slots) + ")");
      named.emplace_back(static_cast<std::int32_t>(id), std::string(content));
      bool special = true;
      if (val["special"].get(special) == simdjson::SUCCESS && !special) not_special.push_back(static_cast<std::int32_t>(id));
    }
  }
  kimi_tokenizer t(std::move(base), named, not_special);
  // Ids: config.json (K3 nests the text model in text_config), tokenizer_config as fallback.
  auto resolve = [&](simdjson::dom::element e) {
    if (std::int64_t v = read_id(e, "bos_token_id"); v >= 0) t.bos_id = static_cast<std::int32_t>(v);
    if (std::int64_t v = read_id(e, "eos_token_id"); v >= 0) t.eos_id = static_cast<std::int32_t>(v);
    if (std::int64_t v = read_id(e, "pad_token_id"); v >= 0) t.pad_id = static_cast<std::int32_t>(v);
  };
  const fs::path config = dir / "config.json";
  if (fs::exists(config)) {
    simdjson::dom::parser p2;
    simdjson::dom::element c;
    if (auto err = p2.load(config.string()).get(c)) throw std::runtime_error(config.string() + ": " + simdjson::error_message(err));
    resolve(c);
    simdjson::dom::element text;
    if (c["text_config"].get(text) == simdjson::SUCCESS) resolve(text);
  }
  if (t.eos_id < 0) {
    std::string_view eos;
    if (cfg["eos_token"].get(eos) == simdjson::SUCCESS) t.eos_id = t.id_of(eos);
  }
  if (t.eos_id >= 0) t.stop_ids.push_back(t.eos_id);
  const fs::path gen = dir / "generation_config.json";
  if (fs::exists(gen)) {
    simdjson::dom::parser p3;
    simdjson::dom::element g;
    if (auto err = p3.load(gen.string()).get(g)) throw std::runtime_error(gen.string() + ": " + simdjson::error_message(err));
    std::int64_t one;
    simdjson::dom::array many;
    if (g["eos_token_id"].get(one) == simdjson::SUCCESS) t.stop_ids.push_back(static_cast<std::int32_t>(one));
    else if (g["eos_token_id"].get(many) == simdjson::SUCCESS)
      for (auto v : many) {
        std::int64_t x;
        if (v.get(x) == simdjson::SUCCESS) t.stop_ids.push_back(static_cast<std::int32_t>(x));
      }
  }
  std::sort(t.stop_ids.begin(), t.stop_ids.end());
  t.stop_ids.erase(std::unique(t.stop_ids.begin(), t.stop_ids.end()), t.stop_ids.end());
  for (std::int32_t id : {t.bos_id, t.eos_id, t.pad_id})
    if (id >= t.vocab_size())
      throw std::runtime_error(model_dir + ": special id " + std::to_string(id) + " is outside the vocabulary (" +
                               std::to_string(t.vocab_size()) + ")");
  return t;
}

bool kimi_tokenizer::encode_into(std::string_view text, bool allow_special, std::vector<std::int32_t>& out,
                                 std::size_t limit) const {
  for (std::string_view piece : kimi_split(text))
    if (!bpe_.encode_into(piece, allow_special, out, limit)) return false;
  return true;
}

bool kimi_tokenizer::encode_bounded(std::span<const segment> segments, std::size_t limit, std::vector<std::int32_t>& out) const {
  std::size_t bytes = 0;
  for (const auto& s : segments) bytes += s.text.size();
  if (min_tokens(bytes) > limit) return false;
  for (const auto& s : segments)
    if (!encode_into(s.text, s.control, out, limit)) return false;
  return true;
}

std::vector<std::int32_t> kimi_tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<std::int32_t> out;
  encode_into(text, allow_special, out);
  return out;
}

std::vector<std::int32_t> kimi_tokenizer::encode(std::span<const segment> segments) const {
  std::vector<std::int32_t> out;
  for (const auto& s : segments) encode_into(s.text, s.control, out);
  return out;
}

} // namespace k3::tok
