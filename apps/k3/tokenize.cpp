// `k3 tokenize`: text on stdin -> ids on stdout (or ids -> text with --decode), for scripts and
// for checking against other tokenizers.
//
//   k3 tokenize --model DIR [--special] [--decode]
//   k3 tokenize --tiktoken FILE --pattern kimi|o200k|cl100k [--decode]
//
// Ids are printed space-separated on one line. --special lets special-token text in the input
// become special ids (control mode); by default it is ordinary text, as user content is.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/k3/commands.hpp"
#include "config/cli_util.hpp"
#include "runtime/tokenizer/bpe.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"

namespace k3::app {

void add_tokenize_command(CLI::App& root, int& rc) {
  auto* cmd = root.add_subcommand("tokenize", "Text on stdin -> token ids on stdout (or ids -> text with --decode)");
  struct opts {
    std::string model, tiktoken, pattern;
    bool decode = false, special = false;
  };
  auto o = std::make_shared<opts>();
  cmd->add_option("--model", o->model, "Model directory (Kimi tokenizer)");
  cmd->add_option("--tiktoken", o->tiktoken, "A tiktoken rank file (with --pattern)");
  cmd->add_option("--pattern", o->pattern, "Pre-tokenizer of --tiktoken: kimi, o200k or cl100k");
  k3::conf::add_bool(*cmd, "--decode", o->decode, "Read ids, print text");
  k3::conf::add_bool(*cmd, "--special", o->special, "Special-token text in the input becomes special ids (control mode)");
  cmd->callback([o, &rc] {
    const std::string& model = o->model;
    const std::string& tiktoken = o->tiktoken;
    const std::string& pattern = o->pattern;
    const bool decode = o->decode, special = o->special;
    if (model.empty() == tiktoken.empty()) throw std::invalid_argument("give exactly one of --model DIR or --tiktoken FILE");
    std::optional<tok::kimi_tokenizer> kimi;
    std::unique_ptr<tok::bpe_tokenizer> plain;
    if (!model.empty()) {
      if (!pattern.empty()) throw std::invalid_argument("--pattern goes with --tiktoken (a model directory implies kimi)");
      kimi.emplace(tok::kimi_tokenizer::load(model));
    } else {
      tok::pattern_kind kind;
      if (!tok::parse_pattern(pattern, kind)) throw std::invalid_argument("--pattern must be kimi, o200k or cl100k");
      plain = std::make_unique<tok::bpe_tokenizer>(tok::bpe_tokenizer::load_tiktoken_file(tiktoken),
                                                   tok::pattern_source(kind));
    }
    const tok::bpe_tokenizer& bpe = kimi ? kimi->bpe() : *plain;
    std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    if (decode) {
      std::istringstream in(input);
      std::vector<std::int32_t> ids;
      std::string word;
      while (in >> word) {
        std::size_t used = 0;
        long v = -1;
        try {
          v = std::stol(word, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != word.size() || v < 0 || v >= bpe.vocab_size())
          throw std::invalid_argument("'" + word + "' is not a token id in [0, " + std::to_string(bpe.vocab_size()) + ")");
        ids.push_back(static_cast<std::int32_t>(v));
      }
      const std::string text = bpe.decode(ids);
      std::fwrite(text.data(), 1, text.size(), stdout);
      rc = 0;
      return;
    }
    const auto ids = kimi ? kimi->encode(input, special) : plain->encode(input, special);
    std::string out;
    out.reserve(ids.size() * 7);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (i) out.push_back(' ');
      out += std::to_string(ids[i]);
    }
    out.push_back('\n');
    std::fwrite(out.data(), 1, out.size(), stdout);
    rc = 0;
  });
}

} // namespace k3::app
