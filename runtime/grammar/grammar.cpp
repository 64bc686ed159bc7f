#include "runtime/grammar/grammar.hpp"

#include <algorithm>
#include <deque>
#include <set>

namespace k3::grammar {

builder::builder() = default;

std::uint32_t builder::new_node() {
  g_.nodes.emplace_back();
  g_.nodes.back().rule = cur_;
  return static_cast<std::uint32_t>(g_.nodes.size() - 1);
}

std::uint32_t builder::declare(std::string name) {
  g_.rules.push_back({std::move(name), 0, false});
  return static_cast<std::uint32_t>(g_.rules.size() - 1);
}

void builder::define(std::uint32_t rule, const std::function<frag(builder&)>& body) {
  if (g_.rules.at(rule).defined) throw grammar_error("rule " + g_.rules[rule].name + " defined twice");
  const auto saved = cur_;
  cur_ = rule;
  g_.rules[rule].defined = true; // before the body: a body may refer to its own rule
  const frag f = body(*this);
  g_.rules[rule].start = f.in;
  g_.nodes[f.out].accept = true;
  cur_ = saved;
}

frag builder::empty() {
  const auto a = new_node();
  return {a, a};
}

frag builder::range(symbol lo, symbol hi) {
  const auto a = new_node(), b = new_node();
  g_.nodes[a].edges.push_back({lo, hi, b});
  return {a, b};
}

frag builder::byte_set(const byte_bits& set) {
  const auto a = new_node(), b = new_node();
  for (unsigned c = 0; c < 256;) {
    if (!has_bit(set, c)) {
      ++c;
      continue;
    }
    unsigned e = c;
    while (e + 1 < 256 && has_bit(set, e + 1)) ++e;
    g_.nodes[a].edges.push_back({static_cast<symbol>(c), static_cast<symbol>(e), b});
    c = e + 1;
  }
  return {a, b};
}

frag builder::literal(std::string_view bytes) {
  const auto a = new_node();
  auto at = a;
  for (unsigned char c : bytes) {
    const auto b = new_node();
    g_.nodes[at].edges.push_back({c, c, b});
    at = b;
  }
  return {a, at};
}

frag builder::seq(const std::vector<frag>& parts) {
  if (parts.empty()) return empty();
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) g_.nodes[parts[i].out].eps.push_back(parts[i + 1].in);
  return {parts.front().in, parts.back().out};
}

frag builder::alt(const std::vector<frag>& parts) {
  const auto a = new_node(), b = new_node();
  for (const auto& p : parts) {
    g_.nodes[a].eps.push_back(p.in);
    g_.nodes[p.out].eps.push_back(b);
  }
  return {a, b};
}

frag builder::opt(frag f) {
  const auto a = new_node(), b = new_node();
  g_.nodes[a].eps.push_back(f.in);
  g_.nodes[a].eps.push_back(b);
  g_.nodes[f.out].eps.push_back(b);
  return {a, b};
}

frag builder::star(frag f) {
  const auto a = new_node();
  g_.nodes[a].eps.push_back(f.in);
  g_.nodes[f.out].eps.push_back(a);
  return {a, a};
}

frag builder::plus(const std::function<frag()>& make) {
  const frag first = make();
  return seq({first, star(make())});
}

frag builder::repeat(const std::function<frag()>& make, int min, int max) {
  std::vector<frag> parts;
  for (int i = 0; i < min; ++i) parts.push_back(make());
  if (max < 0) {
    parts.push_back(star(make()));
  } else {
    // Optional tail nested right-to-left: x? (x (x ...)?)? keeps one exit per count.
    frag tail = empty();
    for (int i = max; i > min; --i) tail = opt(seq({make(), tail}));
    parts.push_back(tail);
  }
  return seq(parts);
}

void builder::link(std::uint32_t from, std::uint32_t to) { g_.nodes.at(from).eps.push_back(to); }

frag builder::call(std::uint32_t rule) {
  const auto a = new_node(), b = new_node();
  g_.nodes[a].calls.push_back({rule, b});
  return {a, b};
}

grammar builder::finish(std::uint32_t root) {
  g_.root = root;
  g_.finalize();
  return std::move(g_);
}

// ---- finalize ------------------------------------------------------------------------------

void grammar::finalize() {
  const std::size_t n = nodes.size();
  for (const auto& r : rules)
    if (!r.defined) throw grammar_error("rule " + r.name + " is used but never defined");
  // Epsilon closures.
  closure.assign(n, {});
  for (std::uint32_t i = 0; i < n; ++i) {
    std::vector<std::uint32_t> stack{i};
    std::vector<char> seen(0);
    std::set<std::uint32_t> got{i};
    while (!stack.empty()) {
      const auto x = stack.back();
      stack.pop_back();
      for (auto e : nodes[x].eps)
        if (got.insert(e).second) stack.push_back(e);
    }
    closure[i].assign(got.begin(), got.end());
  }
  // Shortest lengths: rules (fixpoint), then node distances within each rule.
  min_len.assign(rules.size(), unreachable);
  dist.assign(n, unreachable);
  for (bool changed = true; changed;) {
    changed = false;
    // Node distances with the current rule lengths (relaxation to a fixpoint).
    for (bool inner = true; inner;) {
      inner = false;
      for (std::uint32_t i = 0; i < n; ++i) {
        std::uint32_t best = nodes[i].accept ? 0 : unreachable;
        for (const auto& e : nodes[i].edges) best = std::min(best, dist[e.to] == unreachable ? unreachable : dist[e.to] + 1);
        for (auto e : nodes[i].eps) best = std::min(best, dist[e]);
        for (const auto& c : nodes[i].calls)
          if (min_len[c.rule] != unreachable && dist[c.ret] != unreachable) best = std::min(best, min_len[c.rule] + dist[c.ret]);
        if (best < dist[i]) {
          dist[i] = best;
          inner = true;
        }
      }
    }
    for (std::size_t r = 0; r < rules.size(); ++r)
      if (dist[rules[r].start] < min_len[r]) {
        min_len[r] = dist[rules[r].start];
        changed = true;
      }
  }
  for (std::size_t r = 0; r < rules.size(); ++r)
    if (min_len[r] == unreachable) throw grammar_error("rule " + rules[r].name + " accepts no string");
  // Left recursion: rule A "starts with" rule B when A's start reaches a call of B without
  // consuming (through epsilons and nullable calls). A cycle in that relation would loop.
  std::vector<std::set<std::uint32_t>> starts(rules.size());
  for (std::size_t r = 0; r < rules.size(); ++r) {
    std::deque<std::uint32_t> q{rules[r].start};
    std::set<std::uint32_t> seen{rules[r].start};
    while (!q.empty()) {
      const auto x = q.front();
      q.pop_front();
      auto visit = [&](std::uint32_t y) {
        if (seen.insert(y).second) q.push_back(y);
      };
      for (auto e : nodes[x].eps) visit(e);
      for (const auto& c : nodes[x].calls) {
        starts[r].insert(c.rule);
        if (min_len[c.rule] == 0) visit(c.ret);
      }
    }
  }
  for (std::size_t r = 0; r < rules.size(); ++r) {
    std::set<std::uint32_t> seen;
    std::vector<std::uint32_t> stack(starts[r].begin(), starts[r].end());
    while (!stack.empty()) {
      const auto x = stack.back();
      stack.pop_back();
      if (x == r) throw grammar_error("rule " + rules[r].name + " is left-recursive");
      if (seen.insert(x).second)
        for (auto y : starts[x]) stack.push_back(y);
    }
  }
  // Self-loop bytes: consuming b from the node's closure lands on a node whose closure is the
  // same set again (the state does not change, whatever lies below on the stack).
  self_loop.assign(n, byte_bits{});
  for (std::uint32_t i = 0; i < n; ++i) {
    for (auto c : closure[i])
      for (const auto& e : nodes[c].edges) {
        if (e.lo > 255) continue;
        if (closure[e.to] != closure[i]) continue;
        for (unsigned b = e.lo; b <= std::min<unsigned>(e.hi, 255); ++b) set_bit(self_loop[i], b);
      }
  }
}

std::string grammar::describe() const {
  std::string out;
  for (std::size_t r = 0; r < rules.size(); ++r)
    out += "rule " + std::to_string(r) + " " + rules[r].name + " start " + std::to_string(rules[r].start) +
           (r == root ? " (root)" : "") + "\n";
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    out += "  n" + std::to_string(i) + (nodes[i].accept ? " accept" : "") + ":";
    for (const auto& e : nodes[i].edges) out += " [" + std::to_string(e.lo) + "-" + std::to_string(e.hi) + "]->" + std::to_string(e.to);
    for (auto e : nodes[i].eps) out += " eps->" + std::to_string(e);
    for (const auto& c : nodes[i].calls) out += " call " + rules[c.rule].name + "->" + std::to_string(c.ret);
    out += "\n";
  }
  return out;
}

} // namespace k3::grammar
