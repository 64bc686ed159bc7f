#pragma once
// Running a grammar over generated tokens, and which tokens may come next.
//
// compiled_grammar binds a finalized grammar to a vocabulary and owns the per-node token caches
// (the xgrammar idea): for a node n, the tokens accepted from n whatever lies below it on the
// stack (a bitset), and the tokens that reach the end of n's rule part-way and so depend on the
// context (a short list, checked against the real stack at run time); every other token is
// rejected from n. Caches are computed on first use (thread-safe) or all at once by warm().
//
// matcher is one request's position in the grammar: a set of stacks (the grammar may be
// ambiguous) of frames (node, parent), interned so equal stacks are one. accept_token() advances
// it or refuses the token without changing anything; fill_mask() writes the allowed-token bitset.
// With a token budget, fill_mask() steers to completion: once the budget left equals the shortest
// way to finish, only tokens that shorten it are allowed (one symbol each), so a constrained
// output always ends valid within max_tokens when it can.
//
// A matcher is used by one thread at a time (its request's step); it may be copied (the frames
// are value state).

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/grammar/grammar.hpp"
#include "runtime/grammar/vocab.hpp"

namespace k3::grammar {

/// A set of token ids, stored as a list when small (most grammar positions allow a few tokens)
/// or as a bitset when large (string bodies, free text): a 163,840-id bitset is 20 KiB, and a
/// grammar has hundreds of positions.
class token_set {
public:
  /// From a bitset of `bits.size()` words (chooses the smaller form).
  static token_set from_bits(std::vector<std::uint64_t> bits);
  [[nodiscard]] bool empty() const noexcept { return ids_.empty() && bits_.empty(); }
  /// out |= this (& filter when given).
  void or_into(std::span<std::uint64_t> out) const;
  void or_into(std::span<std::uint64_t> out, std::span<const std::uint64_t> filter) const;
  [[nodiscard]] bool contains(std::int32_t id) const noexcept;
  [[nodiscard]] std::size_t memory_bytes() const noexcept { return ids_.size() * 4 + bits_.size() * 8; }

private:
  std::vector<std::int32_t> ids_;    // sorted, when sparse
  std::vector<std::uint64_t> bits_;  // when dense
};

class compiled_grammar {
public:
  compiled_grammar(grammar g, std::shared_ptr<const token_vocab> v);
  ~compiled_grammar();
  [[nodiscard]] const grammar& g() const noexcept { return g_; }
  [[nodiscard]] const token_vocab& vocab() const noexcept { return *v_; }

  struct node_cache {
    token_set accepted;                    ///< accepted whatever the context
    std::vector<std::int32_t> uncertain;   ///< in trie (lexicographic) order
    token_set stay;                        ///< tokens that leave the state as it is (self-loop bytes only)
    /// Accepted tokens that may leave the distance to completion above the node's own, with the
    /// most they can add (budget steering's bound), largest first. Every other accepted token
    /// adds nothing.
    std::vector<std::pair<std::int32_t, std::int64_t>> risky;
  };
  /// The cache of node n (computed on first use).
  [[nodiscard]] const node_cache& cache(std::uint32_t n) const;
  /// Computes the cache of every node a matcher can stand on, on up to `threads` threads.
  void warm(unsigned threads = 1) const;
  /// Memory held by the node caches so far (bytes).
  [[nodiscard]] std::size_t cache_bytes() const;

private:
  struct dfa_memo;
  node_cache compute(std::uint32_t n, dfa_memo& memo) const;
  static constexpr std::uint32_t dead = 0xffffffffu;
  std::uint32_t dfa_state(dfa_memo& memo, std::vector<std::uint32_t>& heads) const;
  std::uint32_t dfa_next(dfa_memo& memo, std::uint32_t state, symbol s) const;
  grammar g_;
  std::vector<std::vector<std::uint32_t>> callers_; // per rule: return nodes of its call sites
  std::shared_ptr<const token_vocab> v_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<node_cache>> caches_;
  struct dfa_state_data;
  struct heads_hash {
    std::size_t operator()(const std::vector<std::uint32_t>& v) const noexcept {
      std::uint64_t h = 0x9e3779b97f4a7c15ull;
      for (auto x : v) h = (h ^ x) * 0x100000001b3ull;
      return static_cast<std::size_t>(h ^ (h >> 29));
    }
  };
  mutable std::unique_ptr<dfa_memo> dfa_owner_; // the lazy path's memo (under mu_)
};

class matcher {
public:
  explicit matcher(std::shared_ptr<const compiled_grammar> g);

  /// Advances over one token; false (state unchanged) if the grammar does not allow it.
  bool accept_token(std::int32_t token);
  bool accept_symbols(std::span<const symbol> s);
  /// Would the grammar allow this token next? (no state change)
  [[nodiscard]] bool allows(std::int32_t token) const;
  /// The whole grammar is complete here (it may still go on).
  [[nodiscard]] bool accepting() const noexcept { return accepting_; }
  /// Complete and nothing more is possible.
  [[nodiscard]] bool terminated() const noexcept { return accepting_ && cons_.empty(); }
  /// Shortest number of symbols to completion (0 when accepting).
  [[nodiscard]] std::uint32_t distance() const;
  /// Allowed tokens as a bitset over token ids (bitmask.size() ≥ vocab words). budget_left < 0:
  /// no budget steering.
  void fill_mask(std::span<std::uint64_t> bitmask, std::int64_t budget_left = -1) const;
  [[nodiscard]] const compiled_grammar& grammar_of() const noexcept { return *g_; }
  /// Tokens accepted so far.
  [[nodiscard]] std::size_t num_tokens() const noexcept { return accepted_tokens_; }

  // ---- the machinery, shared with the cache builder ----
  static constexpr std::uint32_t no_parent = 0xffffffffu; ///< the root rule's caller
  static constexpr std::uint32_t bottom = 0xfffffffeu;    ///< "some context below" (caches)
  /// "Any caller of the rule that just ended" (caches): the over-approximated context a cache
  /// walks into after popping out of its node's rule, so a token no caller could continue is
  /// rejected context-free instead of being checked at every step.
  static constexpr std::uint32_t any_ctx = 0xfffffffdu;
  struct frame {
    std::uint32_t node, parent;
  };
  struct config {
    std::uint32_t node, parent; // a node with symbol edges; parent = frame id
  };
  /// Frame store with interning; shared helper so matchers and the cache builder agree.
  struct frames {
    std::vector<frame> list;
    std::unordered_map<std::uint64_t, std::uint32_t> index;
    std::vector<std::uint32_t> chain_dist; // distance of the frames from here down (memo)
    std::vector<std::uint8_t> approx;      // the frame stands on any_ctx (caches only)
    std::uint32_t intern(std::uint32_t node, std::uint32_t parent);
  };
  /// Expands frames to the consuming configurations reachable without input; accept: the root
  /// completed; popped_bottom: some path returned into the unknown context. With `callers`
  /// (return nodes of every call site, per rule), a pop into bottom / any_ctx continues at every
  /// call site's return node on any_ctx.
  static void expand(const grammar& g, frames& fs, std::span<const std::uint32_t> heads, std::vector<config>& cons,
                     bool& accept, bool& popped_bottom, const std::vector<std::vector<std::uint32_t>>* callers = nullptr);
  /// Frames after consuming s from cons.
  static void step(const grammar& g, frames& fs, std::span<const config> cons, symbol s, std::vector<std::uint32_t>& heads);

private:
  std::uint32_t chain(std::uint32_t frame) const;
  void fill_free(std::span<std::uint64_t> bitmask) const; ///< the mask without budget steering
  void set_heads(std::vector<std::uint32_t> heads);

  std::shared_ptr<const compiled_grammar> g_;
  mutable frames fs_;
  std::vector<std::uint32_t> heads_;
  std::vector<config> cons_;
  bool accepting_ = false;
  std::size_t accepted_tokens_ = 0;
};

} // namespace k3::grammar
