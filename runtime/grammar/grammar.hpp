#pragma once
// A context-free grammar over symbols, compiled to one automaton per rule with call edges (a
// recursive transition network): the representation every constrained-decoding piece shares.
//
// Symbols: 0..255 are bytes; 256 + k is the k-th special token of the tokenizer (the 256 ids
// above the base vocabulary), so a grammar can require the real marker *token* <|open|> and never
// accept the same characters spelled with ordinary BPE pieces. A node has symbol-range edges,
// epsilon edges and call edges (enter rule R; when R accepts, continue at `ret`). A rule accepts
// at its accept nodes. The language is what the root rule accepts.
//
// builder makes fragments Thompson-style inside the rule being defined; finalize() computes the
// epsilon closures, each rule's shortest accepted length and each node's shortest distance to its
// rule's end (in symbols), and rejects left recursion (a rule that can reach a call of itself
// without consuming a symbol), which a top-down matcher cannot run.
//
// A finalized grammar is immutable and shared between matchers (thread-safe reads).

#include <array>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace k3::grammar {

using symbol = std::uint16_t;
inline constexpr symbol special_base = 256;
inline constexpr int num_symbols = 512;
inline constexpr std::uint32_t unreachable = 0x3fffffff;

struct grammar_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct edge {
  symbol lo = 0, hi = 0;
  std::uint32_t to = 0;
};
struct call_edge {
  std::uint32_t rule = 0;
  std::uint32_t ret = 0;
};
struct node {
  std::vector<edge> edges;
  std::vector<call_edge> calls;
  std::vector<std::uint32_t> eps;
  bool accept = false;
  std::uint32_t rule = 0;
};
struct rule {
  std::string name;
  std::uint32_t start = 0;
  bool defined = false;
};

class grammar {
public:
  std::vector<node> nodes;
  std::vector<rule> rules;
  std::uint32_t root = 0;

  // ---- derived by finalize() ----
  /// Nodes reachable by epsilon edges from each node (itself included), sorted.
  std::vector<std::vector<std::uint32_t>> closure;
  /// Shortest accepted length of each rule (symbols).
  std::vector<std::uint32_t> min_len;
  /// Shortest distance (symbols) from each node to an accept node of its rule.
  std::vector<std::uint32_t> dist;
  /// Bytes that leave each node and come back to it (a self-loop after closure): a token made
  /// only of these bytes stays at the node, whatever the context (free text, string bodies).
  std::vector<std::array<std::uint64_t, 4>> self_loop;

  void finalize();
  [[nodiscard]] bool finalized() const noexcept { return !closure.empty(); }
  /// Human-readable dump (tests, debugging).
  [[nodiscard]] std::string describe() const;
};

/// Fragment of the rule under construction: enter at `in`, leave from `out` (epsilon).
struct frag {
  std::uint32_t in = 0, out = 0;
};

class builder {
public:
  builder();
  /// A rule id usable in call() before it is defined (recursion, $ref).
  std::uint32_t declare(std::string name);
  /// Defines a declared rule: `body` builds its fragment (the current rule is switched while it
  /// runs, so nested defines are allowed).
  void define(std::uint32_t rule, const std::function<frag(builder&)>& body);
  std::uint32_t rule(std::string name, const std::function<frag(builder&)>& body) {
    const auto id = declare(std::move(name));
    define(id, body);
    return id;
  }
  [[nodiscard]] bool is_defined(std::uint32_t rule) const { return g_.rules.at(rule).defined; }

  frag empty();
  frag range(symbol lo, symbol hi);
  frag sym(symbol s) { return range(s, s); }
  /// Any byte in the 256-bit set.
  frag byte_set(const std::array<std::uint64_t, 4>& set);
  frag literal(std::string_view bytes);
  frag seq(const std::vector<frag>& parts);
  frag alt(const std::vector<frag>& parts);
  frag opt(frag f);
  frag star(frag f);
  frag plus(const std::function<frag()>& make);
  /// make() repeated between min and max times (max < 0: unbounded).
  frag repeat(const std::function<frag()>& make, int min, int max);
  frag call(std::uint32_t rule);
  /// An epsilon edge between two nodes of the current rule (hand-built automata).
  void link(std::uint32_t from, std::uint32_t to);

  /// Finishes: the root rule, finalize(). The builder is spent afterwards.
  [[nodiscard]] grammar finish(std::uint32_t root);

private:
  std::uint32_t new_node();
  grammar g_;
  std::uint32_t cur_ = 0;
};

/// 256-bit byte sets.
using byte_bits = std::array<std::uint64_t, 4>;
inline void set_bit(byte_bits& b, unsigned c) { b[c >> 6] |= std::uint64_t{1} << (c & 63); }
inline bool has_bit(const byte_bits& b, unsigned c) { return (b[c >> 6] >> (c & 63)) & 1; }

} // namespace k3::grammar
