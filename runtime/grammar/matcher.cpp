#include "runtime/grammar/matcher.hpp"

#include <algorithm>
#include <functional>
#include <unordered_set>

namespace k3::grammar {

// ---- frames --------------------------------------------------------------------------------

std::uint32_t matcher::frames::intern(std::uint32_t node, std::uint32_t parent) {
  const std::uint64_t key = (static_cast<std::uint64_t>(node) << 32) | parent;
  auto [it, fresh] = index.try_emplace(key, static_cast<std::uint32_t>(list.size()));
  if (fresh) list.push_back({node, parent});
  return it->second;
}

void matcher::expand(const grammar& g, frames& fs, std::span<const std::uint32_t> heads, std::vector<config>& cons,
                     bool& accept, bool& popped_bottom) {
  cons.clear();
  accept = false;
  popped_bottom = false;
  thread_local std::vector<std::uint32_t> work;
  thread_local std::unordered_set<std::uint32_t> seen;
  thread_local std::unordered_set<std::uint64_t> seen_cons;
  work.assign(heads.begin(), heads.end());
  seen.clear();
  seen_cons.clear();
  while (!work.empty()) {
    const auto f = work.back();
    work.pop_back();
    if (!seen.insert(f).second) continue;
    const auto fr = fs.list[f];
    for (auto c : g.closure[fr.node]) {
      const auto& nd = g.nodes[c];
      if (!nd.edges.empty() && seen_cons.insert((static_cast<std::uint64_t>(c) << 32) | fr.parent).second)
        cons.push_back({c, fr.parent});
      for (const auto& call : nd.calls) {
        const auto ret = fs.intern(call.ret, fr.parent);
        work.push_back(fs.intern(g.rules[call.rule].start, ret));
      }
      if (nd.accept) {
        if (fr.parent == no_parent) accept = true;
        else if (fr.parent == bottom) popped_bottom = true;
        else work.push_back(fr.parent);
      }
    }
  }
}

void matcher::step(const grammar& g, frames& fs, std::span<const config> cons, symbol s, std::vector<std::uint32_t>& heads) {
  heads.clear();
  for (const auto& c : cons)
    for (const auto& e : g.nodes[c.node].edges)
      if (e.lo <= s && s <= e.hi) {
        const auto f = fs.intern(e.to, c.parent);
        if (std::find(heads.begin(), heads.end(), f) == heads.end()) heads.push_back(f);
      }
}

// ---- compiled grammar: per-node token caches -----------------------------------------------

compiled_grammar::compiled_grammar(grammar g, std::shared_ptr<const token_vocab> v) : g_(std::move(g)), v_(std::move(v)) {
  if (!g_.finalized()) g_.finalize();
  caches_.resize(g_.nodes.size());
}

const compiled_grammar::node_cache& compiled_grammar::cache(std::uint32_t n) const {
  std::lock_guard lock(mu_);
  if (!caches_[n]) caches_[n] = std::make_unique<node_cache>(compute(n));
  return *caches_[n];
}

void compiled_grammar::warm() const {
  std::vector<char> head(g_.nodes.size(), 0);
  for (const auto& r : g_.rules) head[r.start] = 1;
  for (const auto& nd : g_.nodes) {
    for (const auto& e : nd.edges) head[e.to] = 1;
    for (const auto& c : nd.calls) head[c.ret] = 1;
  }
  for (std::uint32_t i = 0; i < head.size(); ++i)
    if (head[i]) (void)cache(i);
}

compiled_grammar::node_cache compiled_grammar::compute(std::uint32_t n) const {
  const auto& v = *v_;
  const auto& trie = v.trie();
  const auto& ids = v.dfs_ids();
  node_cache out;
  out.accepted.assign(v.words(), 0);
  auto accept_range = [&](std::uint32_t lo, std::uint32_t hi) {
    for (auto i = lo; i < hi; ++i) {
      const auto id = static_cast<std::uint32_t>(ids[i]);
      out.accepted[id >> 6] |= std::uint64_t{1} << (id & 63);
    }
  };
  matcher::frames fs;
  const std::uint32_t start = fs.intern(n, matcher::bottom);
  struct level {
    std::vector<std::uint32_t> heads;
    std::vector<matcher::config> cons;
  };
  std::vector<level> levels(1);
  levels[0].heads = {start};
  // Depth-first over the trie; levels[d] holds the state after d symbols.
  std::function<void(std::uint32_t, std::size_t, bool)> dfs = [&](std::uint32_t t, std::size_t d, bool unc) {
    if (levels.size() <= d + 1) levels.resize(d + 2);
    bool accept = false, popped = false;
    matcher::expand(g_, fs, levels[d].heads, levels[d].cons, accept, popped);
    const bool unc_child = unc || popped;
    const auto& tn = trie[t];
    for (auto c = tn.first_child; c < tn.first_child + tn.num_children; ++c) {
      const auto& cn = trie[c];
      // A subtree made only of bytes that loop on a head's node is accepted wholesale.
      bool loops = false;
      if (!cn.special)
        for (auto h : levels[d].heads) {
          const auto& sl = g_.self_loop[fs.list[h].node];
          if ((cn.bytes[0] & ~sl[0]) == 0 && (cn.bytes[1] & ~sl[1]) == 0 && (cn.bytes[2] & ~sl[2]) == 0 && (cn.bytes[3] & ~sl[3]) == 0) {
            loops = true;
            break;
          }
        }
      if (loops) {
        accept_range(cn.lo, cn.hi);
        continue;
      }
      matcher::step(g_, fs, levels[d].cons, cn.sym, levels[d + 1].heads);
      if (levels[d + 1].heads.empty()) {
        if (unc_child) out.uncertain.insert(out.uncertain.end(), ids.begin() + cn.lo, ids.begin() + cn.hi);
        continue;
      }
      if (cn.token >= 0) out.accepted[static_cast<std::uint32_t>(cn.token) >> 6] |= std::uint64_t{1} << (cn.token & 63);
      dfs(c, d + 1, unc_child);
    }
  };
  dfs(0, 0, false);
  // Tokens made only of the node's self-loop bytes keep the state exactly (budget steering
  // decides them without stepping).
  out.stay.assign(v.words(), 0);
  const auto& sl = g_.self_loop[n];
  if (sl != byte_bits{}) {
    std::function<void(std::uint32_t)> mark = [&](std::uint32_t t) {
      const auto& tn = trie[t];
      for (auto c = tn.first_child; c < tn.first_child + tn.num_children; ++c) {
        const auto& cn = trie[c];
        if (cn.sym >= 256 || !has_bit(sl, cn.sym)) continue;
        if (!cn.special && (cn.bytes[0] & ~sl[0]) == 0 && (cn.bytes[1] & ~sl[1]) == 0 && (cn.bytes[2] & ~sl[2]) == 0 &&
            (cn.bytes[3] & ~sl[3]) == 0) {
          for (auto i = cn.lo; i < cn.hi; ++i) {
            const auto id = static_cast<std::uint32_t>(ids[i]);
            out.stay[id >> 6] |= std::uint64_t{1} << (id & 63);
          }
          continue;
        }
        if (cn.token >= 0) out.stay[static_cast<std::uint32_t>(cn.token) >> 6] |= std::uint64_t{1} << (cn.token & 63);
        mark(c);
      }
    };
    mark(0);
  }
  return out;
}

// ---- matcher -------------------------------------------------------------------------------

matcher::matcher(std::shared_ptr<const compiled_grammar> g) : g_(std::move(g)) {
  set_heads({fs_.intern(g_->g().rules[g_->g().root].start, no_parent)});
}

void matcher::set_heads(std::vector<std::uint32_t> heads) {
  heads_ = std::move(heads);
  bool popped = false;
  expand(g_->g(), fs_, heads_, cons_, accepting_, popped);
}

bool matcher::accept_symbols(std::span<const symbol> syms) {
  if (syms.empty()) return false;
  const auto& g = g_->g();
  std::vector<config> cons = cons_;
  std::vector<std::uint32_t> heads;
  bool acc = false, popped = false;
  for (std::size_t i = 0; i < syms.size(); ++i) {
    step(g, fs_, cons, syms[i], heads);
    if (heads.empty()) return false;
    expand(g, fs_, heads, cons, acc, popped);
  }
  heads_ = std::move(heads);
  cons_ = std::move(cons);
  accepting_ = acc;
  return true;
}

bool matcher::accept_token(std::int32_t token) {
  if (token < 0 || token >= g_->vocab().size()) return false;
  if (!accept_symbols(g_->vocab().symbols(token))) return false;
  ++accepted_tokens_;
  return true;
}

bool matcher::allows(std::int32_t token) const {
  if (token < 0 || token >= g_->vocab().size()) return false;
  const auto syms = g_->vocab().symbols(token);
  if (syms.empty()) return false;
  const auto& g = g_->g();
  std::vector<config> cons = cons_;
  std::vector<std::uint32_t> heads;
  bool acc = false, popped = false;
  for (auto s : syms) {
    step(g, fs_, cons, s, heads);
    if (heads.empty()) return false;
    expand(g, fs_, heads, cons, acc, popped);
  }
  return true;
}

std::uint32_t matcher::chain(std::uint32_t f) const {
  if (f == no_parent) return 0;
  if (fs_.chain_dist.size() < fs_.list.size()) fs_.chain_dist.resize(fs_.list.size(), unreachable + 1);
  if (fs_.chain_dist[f] != unreachable + 1) return fs_.chain_dist[f];
  const auto fr = fs_.list[f];
  const auto below = chain(fr.parent);
  const auto d = g_->g().dist[fr.node];
  const std::uint32_t v = d >= unreachable || below >= unreachable ? unreachable : d + below;
  fs_.chain_dist[f] = v;
  return v;
}

std::uint32_t matcher::distance() const {
  if (accepting_) return 0;
  std::uint32_t best = unreachable;
  for (const auto& c : cons_) {
    const auto d = g_->g().dist[c.node];
    const auto below = chain(c.parent);
    if (d < unreachable && below < unreachable) best = std::min(best, d + below);
  }
  return best;
}

void matcher::fill_mask(std::span<std::uint64_t> mask, std::int64_t budget_left) const {
  const auto& g = g_->g();
  const auto& v = g_->vocab();
  fill_free(mask);
  if (budget_left < 0) return;
  // Budget steering: keep only tokens after which the shortest completion still fits in the
  // tokens left (dist(after) ≤ budget − 1). One token can push it far (a marker that opens
  // another call), so every allowed token is checked — cheaply: a token that stays on a head's
  // node (self-loop bytes) leaves that head's distance unchanged; only the others are stepped.
  // If nothing fits, the tokens that come closest are kept (max_tokens then cuts a best effort).
  const auto here = distance();
  if (here == unreachable) return;
  const std::int64_t limit = budget_left - 1;
  std::vector<std::uint64_t> keep(mask.size(), 0);
  {
    std::vector<std::uint32_t> one(1);
    std::vector<config> cons;
    for (auto h : heads_) {
      one[0] = h;
      bool acc = false, popped = false;
      expand(g, fs_, one, cons, acc, popped);
      std::uint32_t dh = acc ? 0 : unreachable;
      for (const auto& c : cons)
        if (g.dist[c.node] < unreachable && chain(c.parent) < unreachable) dh = std::min(dh, g.dist[c.node] + chain(c.parent));
      if (static_cast<std::int64_t>(dh) > limit) continue;
      const auto& st = g_->cache(fs_.list[h].node).stay;
      for (std::size_t w = 0; w < keep.size() && w < st.size(); ++w) keep[w] |= st[w] & mask[w];
    }
  }
  std::vector<std::uint32_t> heads;
  std::vector<config> cons;
  std::vector<std::pair<std::int32_t, std::uint32_t>> closest;
  std::uint32_t best = unreachable;
  bool any = false;
  for (std::size_t w = 0; w < mask.size(); ++w) {
    any = any || keep[w];
    for (std::uint64_t x = mask[w] & ~keep[w]; x; x &= x - 1) {
      const auto id = static_cast<std::int32_t>(w * 64 + static_cast<std::size_t>(__builtin_ctzll(x)));
      cons = cons_;
      bool ok = true, acc = false, popped = false;
      for (auto sym : v.symbols(id)) {
        step(g, fs_, cons, sym, heads);
        if (heads.empty()) {
          ok = false;
          break;
        }
        expand(g, fs_, heads, cons, acc, popped);
      }
      if (!ok) continue;
      std::uint32_t d = acc ? 0 : unreachable;
      for (const auto& c : cons)
        if (g.dist[c.node] < unreachable && chain(c.parent) < unreachable) d = std::min(d, g.dist[c.node] + chain(c.parent));
      if (static_cast<std::int64_t>(d) <= limit) {
        keep[w] |= std::uint64_t{1} << (id & 63);
        any = true;
      } else if (d <= best) {
        if (d < best) closest.clear();
        best = d;
        closest.emplace_back(id, d);
      }
    }
  }
  if (any) {
    std::copy(keep.begin(), keep.end(), mask.begin());
  } else if (!closest.empty() && best < here) {
    std::fill(mask.begin(), mask.end(), 0);
    for (const auto& [id, d] : closest) mask[static_cast<std::uint32_t>(id) >> 6] |= std::uint64_t{1} << (id & 63);
  }
}

void matcher::fill_free(std::span<std::uint64_t> mask) const {
  std::fill(mask.begin(), mask.end(), 0);
  const auto& g = g_->g();
  const auto& v = g_->vocab();
  auto set = [&](std::int32_t id) { mask[static_cast<std::uint32_t>(id) >> 6] |= std::uint64_t{1} << (id & 63); };
  std::vector<std::vector<std::uint32_t>> lheads;
  std::vector<std::vector<config>> lcons;
  for (auto h : heads_) {
    const auto& c = g_->cache(fs_.list[h].node);
    for (std::size_t w = 0; w < mask.size() && w < c.accepted.size(); ++w) mask[w] |= c.accepted[w];
    if (c.uncertain.empty()) continue;
    // The context-dependent tokens against the real stack, sharing work across common prefixes
    // (the list is in trie order).
    const std::uint32_t head_frame = h;
    std::span<const symbol> prev;
    std::size_t alive = 0; // depth up to which the previous token's path is valid
    if (lheads.empty()) lheads.resize(1), lcons.resize(1);
    lheads[0] = {head_frame};
    bool acc = false, popped = false;
    expand(g, fs_, lheads[0], lcons[0], acc, popped);
    for (auto id : c.uncertain) {
      const auto syms = v.symbols(id);
      std::size_t lcp = 0;
      while (lcp < prev.size() && lcp < syms.size() && prev[lcp] == syms[lcp]) ++lcp;
      std::size_t d = std::min(lcp, alive);
      bool ok = d == lcp; // the shared prefix was fully alive
      if (ok)
        for (; d < syms.size(); ++d) {
          if (lheads.size() <= d + 1) lheads.resize(d + 2), lcons.resize(d + 2);
          step(g, fs_, lcons[d], syms[d], lheads[d + 1]);
          if (lheads[d + 1].empty()) {
            ok = false;
            break;
          }
          expand(g, fs_, lheads[d + 1], lcons[d + 1], acc, popped);
        }
      alive = ok ? syms.size() : d;
      prev = syms;
      if (ok) set(id);
    }
  }
}

} // namespace k3::grammar
