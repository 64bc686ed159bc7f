#pragma once
// The vocabulary as the grammar sees it: every token id as a symbol sequence (an ordinary token
// is its bytes; a special token is the single symbol 256 + (id − base)), and a trie over those
// sequences for mask computation. Each trie node knows the symbols used in its subtree and the
// token ids below it as one contiguous range of the depth-first order, so a whole subtree can
// be accepted or rejected at once.
//
// Built once per tokenizer (token_vocab::get caches it); immutable, shared by every grammar and
// matcher. Ids the model has but the tokenizer does not (a padded embedding) are never allowed.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/grammar/grammar.hpp"

namespace k3::tok {
class kimi_tokenizer;
}

namespace k3::grammar {

class token_vocab {
public:
  /// `model_vocab`: rows of the logits (≥ the tokenizer's ids).
  token_vocab(const tok::kimi_tokenizer& t, std::int32_t model_vocab);
  /// Cached per (tokenizer, model_vocab).
  [[nodiscard]] static std::shared_ptr<const token_vocab> get(const tok::kimi_tokenizer& t, std::int32_t model_vocab);

  [[nodiscard]] std::int32_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t words() const noexcept { return (static_cast<std::size_t>(size_) + 63) / 64; }
  [[nodiscard]] std::span<const symbol> symbols(std::int32_t id) const noexcept {
    return {syms_.data() + off_[static_cast<std::size_t>(id)], off_[static_cast<std::size_t>(id) + 1] - off_[static_cast<std::size_t>(id)]};
  }
  /// The token that is exactly this one symbol (every byte has one; specials are theirs), or -1.
  [[nodiscard]] std::int32_t single(symbol s) const noexcept { return single_[s]; }
  /// Symbols of the longest token.
  [[nodiscard]] std::size_t max_symbols() const noexcept { return max_symbols_; }

  struct trie_node {
    std::uint32_t first_child = 0, num_children = 0;
    symbol sym = 0;
    std::int32_t token = -1;        ///< the token ending here, or -1
    std::uint32_t lo = 0, hi = 0;   ///< the subtree's token ids: dfs_ids()[lo, hi)
    byte_bits bytes{};              ///< bytes on edges of the subtree (its own edge included)
    bool special = false;           ///< a special symbol somewhere in the subtree
  };
  [[nodiscard]] const std::vector<trie_node>& trie() const noexcept { return trie_; }
  [[nodiscard]] const std::vector<std::int32_t>& dfs_ids() const noexcept { return dfs_ids_; }
  /// Position of each token id in dfs_ids() (trie order), or -1 for ids outside the trie.
  [[nodiscard]] std::int32_t dfs_pos(std::int32_t id) const noexcept { return dfs_pos_[static_cast<std::size_t>(id)]; }

private:
  std::int32_t size_ = 0;
  std::size_t max_symbols_ = 1;
  std::vector<std::uint32_t> off_;
  std::vector<symbol> syms_;
  std::array<std::int32_t, num_symbols> single_{};
  std::vector<trie_node> trie_;
  std::vector<std::int32_t> dfs_ids_;
  std::vector<std::int32_t> dfs_pos_;
};

} // namespace k3::grammar
