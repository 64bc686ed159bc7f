#include "runtime/grammar/matcher.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <thread>
#include <functional>
#include <unordered_map>

namespace k3::grammar {

// ---- frames --------------------------------------------------------------------------------

std::uint32_t matcher::frames::intern(std::uint32_t node, std::uint32_t parent) {
  const std::uint64_t key = (static_cast<std::uint64_t>(node) << 32) | parent;
  auto [it, fresh] = index.try_emplace(key, static_cast<std::uint32_t>(list.size()));
  if (fresh) {
    list.push_back({node, parent});
    approx.push_back(parent == any_ctx || (parent < approx.size() && approx[parent]));
  }
  return it->second;
}

void matcher::expand(const grammar& g, frames& fs, std::span<const std::uint32_t> heads, std::vector<config>& cons,
                     bool& accept, bool& popped_bottom, const std::vector<std::vector<std::uint32_t>>* callers) {
  cons.clear();
  accept = false;
  popped_bottom = false;
  // Visited frames are stamped rather than kept in a set: expand runs once per trie node while
  // a cache is built and once per symbol at run time, so it must not allocate.
  thread_local std::vector<std::uint32_t> work;
  thread_local std::vector<std::uint32_t> stamp;
  thread_local std::uint32_t gen = 0;
  if (++gen == 0) {
    std::fill(stamp.begin(), stamp.end(), 0);
    gen = 1;
  }
  work.assign(heads.begin(), heads.end());
  while (!work.empty()) {
    const auto f = work.back();
    work.pop_back();
    if (stamp.size() <= f) stamp.resize(std::max<std::size_t>(f + 1, stamp.size() * 2), 0);
    if (stamp[f] == gen) continue;
    stamp[f] = gen;
    const auto fr = fs.list[f];
    for (auto c : g.closure[fr.node]) {
      const auto& nd = g.nodes[c];
      if (!nd.edges.empty()) {
        // Duplicates only cost time (step() dedups its heads); a short scan catches the usual ones.
        bool dup = false;
        const std::size_t from = cons.size() > 8 ? cons.size() - 8 : 0;
        for (std::size_t i = from; i < cons.size() && !dup; ++i) dup = cons[i].node == c && cons[i].parent == fr.parent;
        if (!dup) cons.push_back({c, fr.parent});
      }
      for (const auto& call : nd.calls) {
        const auto ret = fs.intern(call.ret, fr.parent);
        work.push_back(fs.intern(g.rules[call.rule].start, ret));
      }
      if (nd.accept) {
        if (fr.parent == no_parent) {
          accept = true;
        } else if (fr.parent == bottom || fr.parent == any_ctx) {
          if (fr.parent == bottom) popped_bottom = true;
          if (callers)
            for (auto ret : (*callers)[nd.rule]) work.push_back(fs.intern(ret, any_ctx));
        } else {
          work.push_back(fr.parent);
        }
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

// ---- token sets ----------------------------------------------------------------------------

token_set token_set::from_bits(std::vector<std::uint64_t> bits) {
  token_set t;
  std::size_t n = 0;
  for (auto w : bits) n += static_cast<std::size_t>(__builtin_popcountll(w));
  if (n == 0) return t;
  if (n * sizeof(std::int32_t) < bits.size() * sizeof(std::uint64_t)) {
    t.ids_.reserve(n);
    for (std::size_t w = 0; w < bits.size(); ++w)
      for (std::uint64_t x = bits[w]; x; x &= x - 1)
        t.ids_.push_back(static_cast<std::int32_t>(w * 64 + static_cast<std::size_t>(__builtin_ctzll(x))));
  } else {
    t.bits_ = std::move(bits);
  }
  return t;
}

void token_set::or_into(std::span<std::uint64_t> out) const {
  if (!bits_.empty()) {
    const auto n = std::min(out.size(), bits_.size());
    for (std::size_t w = 0; w < n; ++w) out[w] |= bits_[w];
    return;
  }
  for (auto id : ids_) {
    const auto w = static_cast<std::size_t>(id) >> 6;
    if (w < out.size()) out[w] |= std::uint64_t{1} << (id & 63);
  }
}

void token_set::or_into(std::span<std::uint64_t> out, std::span<const std::uint64_t> filter) const {
  if (!bits_.empty()) {
    const auto n = std::min({out.size(), bits_.size(), filter.size()});
    for (std::size_t w = 0; w < n; ++w) out[w] |= bits_[w] & filter[w];
    return;
  }
  for (auto id : ids_) {
    const auto w = static_cast<std::size_t>(id) >> 6;
    if (w < out.size() && w < filter.size()) out[w] |= filter[w] & (std::uint64_t{1} << (id & 63));
  }
}

bool token_set::contains(std::int32_t id) const noexcept {
  if (id < 0) return false;
  if (!bits_.empty()) {
    const auto w = static_cast<std::size_t>(id) >> 6;
    return w < bits_.size() && ((bits_[w] >> (id & 63)) & 1);
  }
  return std::binary_search(ids_.begin(), ids_.end(), id);
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
  // another call), so no allowed token is kept unchecked: each is either covered by a bound
  // (below) or stepped. If nothing fits, the tokens that come closest are kept (max_tokens then cuts a best effort).
  const auto here = distance();
  if (here == unreachable) return;
  const std::int64_t limit = budget_left - 1;
  // A token a head's cache accepts context-free leaves at most that head's distance plus its
  // recorded growth (0 for all but the cache's `risky` tokens): when that fits, the token is
  // kept without stepping — every accepted token, far from the budget. Only tokens no bound
  // covers are stepped one by one.
  std::vector<std::uint64_t> keep(mask.size(), 0);
  std::vector<std::uint64_t> skip; // tokens known to end exactly at `here` > limit (no use stepping)
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
      const auto& cache = g_->cache(fs_.list[h].node);
      if (static_cast<std::int64_t>(dh) > limit) {
        // With one head, a self-loop token leaves the distance where it is: neither fits nor
        // comes closer.
        if (heads_.size() == 1) {
          skip.assign(mask.size(), 0);
          cache.stay.or_into(skip);
        }
        continue;
      }
      // Safe: every accepted token but the risky ones whose growth exceeds the slack (those
      // are stepped below unless another head covers them).
      const std::int64_t slack = limit - static_cast<std::int64_t>(dh);
      if (cache.risky.empty() || cache.risky.front().second <= slack) {
        cache.accepted.or_into(keep, mask);
        continue;
      }
      std::vector<std::uint64_t> mine(mask.size(), 0);
      cache.accepted.or_into(mine, mask);
      for (const auto& [id, grow] : cache.risky) {
        if (grow <= slack) break; // sorted by growth, largest first
        mine[static_cast<std::uint32_t>(id) >> 6] &= ~(std::uint64_t{1} << (id & 63));
      }
      for (std::size_t w = 0; w < keep.size(); ++w) keep[w] |= mine[w];
    }
  }
  // The tokens no bound covers are stepped in trie order, so tokens sharing a prefix share its
  // steps (levels[d] holds the state after d symbols of the previous token).
  std::vector<std::int32_t> todo;
  for (std::size_t w = 0; w < mask.size(); ++w)
    for (std::uint64_t x = mask[w] & ~keep[w] & ~(w < skip.size() ? skip[w] : 0); x; x &= x - 1)
      todo.push_back(static_cast<std::int32_t>(w * 64 + static_cast<std::size_t>(__builtin_ctzll(x))));
  std::sort(todo.begin(), todo.end(), [&](std::int32_t a, std::int32_t b) { return v.dfs_pos(a) < v.dfs_pos(b); });
  bool any = std::any_of(keep.begin(), keep.end(), [](std::uint64_t w) { return w != 0; });
  std::vector<std::pair<std::int32_t, std::uint32_t>> closest;
  std::uint32_t best = unreachable;
  struct level {
    std::vector<std::uint32_t> heads;
    std::vector<config> cons;
    bool acc = false;
  };
  std::vector<level> lv(1);
  lv[0].cons = cons_;
  lv[0].acc = accepting_;
  std::span<const symbol> prev;
  std::size_t alive = 0;
  for (const auto id : todo) {
    const auto syms = v.symbols(id);
    std::size_t lcp = 0;
    while (lcp < prev.size() && lcp < syms.size() && prev[lcp] == syms[lcp]) ++lcp;
    std::size_t d = std::min(lcp, alive);
    bool ok = d == lcp;
    if (ok)
      for (; d < syms.size(); ++d) {
        if (lv.size() <= d + 1) lv.resize(d + 2);
        step(g, fs_, lv[d].cons, syms[d], lv[d + 1].heads);
        if (lv[d + 1].heads.empty()) {
          ok = false;
          break;
        }
        bool popped = false;
        expand(g, fs_, lv[d + 1].heads, lv[d + 1].cons, lv[d + 1].acc, popped);
      }
    alive = ok ? syms.size() : d;
    prev = syms;
    if (!ok) continue;
    const auto& end = lv[syms.size()];
    std::uint32_t dist_after = end.acc ? 0 : unreachable;
    for (const auto& c : end.cons)
      if (g.dist[c.node] < unreachable && chain(c.parent) < unreachable) dist_after = std::min(dist_after, g.dist[c.node] + chain(c.parent));
    if (static_cast<std::int64_t>(dist_after) <= limit) {
      keep[static_cast<std::uint32_t>(id) >> 6] |= std::uint64_t{1} << (id & 63);
      any = true;
    } else if (dist_after <= best) {
      if (dist_after < best) closest.clear();
      best = dist_after;
      closest.emplace_back(id, dist_after);
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
    c.accepted.or_into(mask);
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
