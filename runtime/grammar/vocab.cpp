#include "runtime/grammar/vocab.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>

#include "runtime/tokenizer/kimi_tokenizer.hpp"

namespace k3::grammar {

token_vocab::token_vocab(const tok::kimi_tokenizer& t, std::int32_t model_vocab) {
  const auto& bpe = t.bpe();
  const std::int32_t base = bpe.base_vocab_size();
  size_ = std::max(model_vocab, bpe.vocab_size());
  single_.fill(-1);
  off_.reserve(static_cast<std::size_t>(size_) + 1);
  off_.push_back(0);
  for (std::int32_t id = 0; id < size_; ++id) {
    if (id < base) {
      for (unsigned char c : bpe.token_bytes(id)) syms_.push_back(c);
    } else if (id < bpe.vocab_size() && id - base < num_symbols - special_base) {
      syms_.push_back(static_cast<symbol>(special_base + (id - base)));
    } // ids past the tokenizer: no symbols, never allowed
    off_.push_back(static_cast<std::uint32_t>(syms_.size()));
    const auto s = symbols(id);
    if (s.size() == 1 && single_[s[0]] < 0) single_[s[0]] = id;
    max_symbols_ = std::max(max_symbols_, s.size());
  }
  // Trie: insert in lexicographic order so every child list is already sorted.
  std::vector<std::int32_t> order;
  for (std::int32_t id = 0; id < size_; ++id)
    if (!symbols(id).empty()) order.push_back(id);
  std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    const auto x = symbols(a), y = symbols(b);
    return std::lexicographical_compare(x.begin(), x.end(), y.begin(), y.end());
  });
  struct tmp {
    symbol sym = 0;
    std::int32_t token = -1;
    std::vector<std::uint32_t> kids;
  };
  std::vector<tmp> t0(1);
  for (auto id : order) {
    std::uint32_t at = 0;
    for (symbol s : symbols(id)) {
      auto& kids = t0[at].kids;
      if (!kids.empty() && t0[kids.back()].sym == s) {
        at = kids.back();
        continue;
      }
      t0.push_back({s, -1, {}});
      const auto nid = static_cast<std::uint32_t>(t0.size() - 1);
      t0[at].kids.push_back(nid);
      at = nid;
    }
    t0[at].token = id;
  }
  // Relayout breadth-first (children contiguous), then ranges depth-first.
  std::vector<std::uint32_t> new_of(t0.size());
  std::vector<std::uint32_t> bfs{0};
  new_of[0] = 0;
  trie_.resize(t0.size());
  for (std::size_t q = 0; q < bfs.size(); ++q) {
    const auto old = bfs[q];
    auto& nn = trie_[new_of[old]];
    nn.sym = t0[old].sym;
    nn.token = t0[old].token;
    nn.first_child = static_cast<std::uint32_t>(bfs.size());
    nn.num_children = static_cast<std::uint32_t>(t0[old].kids.size());
    for (auto k : t0[old].kids) {
      new_of[k] = static_cast<std::uint32_t>(bfs.size());
      bfs.push_back(k);
    }
  }
  // Depth-first: ids in order, subtree ranges, subtree symbol sets.
  dfs_ids_.reserve(order.size());
  std::function<void(std::uint32_t)> walk = [&](std::uint32_t i) {
    auto& nn = trie_[i];
    nn.lo = static_cast<std::uint32_t>(dfs_ids_.size());
    if (nn.token >= 0) dfs_ids_.push_back(nn.token);
    if (i != 0) {
      if (nn.sym < 256) set_bit(nn.bytes, nn.sym);
      else nn.special = true;
    }
    for (std::uint32_t c = nn.first_child; c < nn.first_child + nn.num_children; ++c) {
      walk(c);
      for (int w = 0; w < 4; ++w) trie_[i].bytes[w] |= trie_[c].bytes[w];
      trie_[i].special = trie_[i].special || trie_[c].special;
    }
    trie_[i].hi = static_cast<std::uint32_t>(dfs_ids_.size());
  };
  walk(0);
  dfs_pos_.assign(static_cast<std::size_t>(size_), -1);
  for (std::size_t i = 0; i < dfs_ids_.size(); ++i) dfs_pos_[static_cast<std::size_t>(dfs_ids_[i])] = static_cast<std::int32_t>(i);
}

std::shared_ptr<const token_vocab> token_vocab::get(const tok::kimi_tokenizer& t, std::int32_t model_vocab) {
  static std::mutex mu;
  static std::map<std::pair<const tok::kimi_tokenizer*, std::int32_t>, std::weak_ptr<const token_vocab>> cache;
  std::lock_guard lock(mu);
  auto& slot = cache[{&t, model_vocab}];
  if (auto v = slot.lock()) return v;
  auto v = std::make_shared<const token_vocab>(t, model_vocab);
  slot = v;
  return v;
}

} // namespace k3::grammar
