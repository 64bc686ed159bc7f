// compiled_grammar: the per-node token caches (which vocabulary tokens each grammar node
// allows), built over a subset automaton shared by every node, on several threads. The
// matcher (matcher.cpp) only reads them.
#include "runtime/grammar/matcher.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <thread>
#include <functional>
#include <unordered_map>

namespace k3::grammar {

// ---- compiled grammar: per-node token caches -----------------------------------------------

struct compiled_grammar::dfa_state_data {
  std::vector<matcher::config> cons;
  std::vector<byte_bits> loops; // self-loop byte sets of the exact heads' nodes
  std::vector<std::uint32_t> loop_rel; // per loops entry: the least rel of the heads looping on it
  std::uint32_t rel = unreachable;     // least distance of the exact heads to the end of the cache's node rule
  std::array<std::uint64_t, num_symbols / 64> can{}; // symbols with an edge (a cheap first test)
  bool exact = false;           // some head is not on any_ctx
};

struct compiled_grammar::dfa_memo {
  matcher::frames fs;
  std::vector<std::uint32_t> rel; // per frame on bottom: distance to the end of the bottom rule (memo)
  std::vector<dfa_state_data> states;
  std::unordered_map<std::vector<std::uint32_t>, std::uint32_t, heads_hash> index;
  // Byte transitions dense (256 per state, `unknown` until computed); specials in a map.
  static constexpr std::uint32_t unknown = 0xfffffffeu;
  std::vector<std::uint32_t> bytes;
  std::unordered_map<std::uint64_t, std::uint32_t> next;
};

compiled_grammar::~compiled_grammar() = default;


compiled_grammar::compiled_grammar(grammar g, std::shared_ptr<const token_vocab> v) : g_(std::move(g)), v_(std::move(v)) {
  if (!g_.finalized()) g_.finalize();
  caches_.resize(g_.nodes.size());
  callers_.resize(g_.rules.size());
  for (const auto& nd : g_.nodes)
    for (const auto& c : nd.calls)
      if (std::find(callers_[c.rule].begin(), callers_[c.rule].end(), c.ret) == callers_[c.rule].end()) callers_[c.rule].push_back(c.ret);
}

const compiled_grammar::node_cache& compiled_grammar::cache(std::uint32_t n) const {
  std::lock_guard lock(mu_);
  if (!caches_[n]) {
    // The memo is bounded: a pathological grammar (many ambiguous paths) restarts it.
    if (dfa_owner_ && dfa_owner_->states.size() > 8192) dfa_owner_.reset();
    if (!dfa_owner_) dfa_owner_ = std::make_unique<dfa_memo>();
    caches_[n] = std::make_unique<node_cache>(compute(n, *dfa_owner_));
  }
  return *caches_[n];
}

void compiled_grammar::warm(unsigned threads) const {
  std::vector<char> head(g_.nodes.size(), 0);
  for (const auto& r : g_.rules) head[r.start] = 1;
  for (const auto& nd : g_.nodes) {
    for (const auto& e : nd.edges) head[e.to] = 1;
    for (const auto& c : nd.calls) head[c.ret] = 1;
  }
  std::vector<std::uint32_t> todo;
  {
    std::lock_guard lock(mu_);
    for (std::uint32_t i = 0; i < head.size(); ++i)
      if (head[i] && !caches_[i]) todo.push_back(i);
  }
  // Each worker has its own memo (no sharing, no locking while it walks the trie); results are
  // stored under the lock, first come first kept (a matcher may have computed one meanwhile).
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    dfa_memo memo;
    for (auto i = next.fetch_add(1); i < todo.size(); i = next.fetch_add(1)) {
      if (memo.states.size() > 8192) memo = dfa_memo{};
      auto c = std::make_unique<node_cache>(compute(todo[i], memo));
      std::lock_guard lock(mu_);
      if (!caches_[todo[i]]) caches_[todo[i]] = std::move(c);
    }
  };
  threads = std::max(1u, std::min<unsigned>(threads, static_cast<unsigned>(todo.size() / 8 + 1)));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

// The cache builder walks the trie over a subset automaton built on demand: a state is a set
// of head frames (on bottom or any_ctx, so context-free), a transition is one symbol. States and
// transitions are shared by every node's computation, so a trie node costs one table lookup once
// the states it passes through are known (string bodies, numbers, UTF-8 sequences: a handful).
std::uint32_t compiled_grammar::dfa_state(dfa_memo& dfa_, std::vector<std::uint32_t>& heads) const {
  std::sort(heads.begin(), heads.end());
  heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
  auto [it, fresh] = dfa_.index.try_emplace(heads, static_cast<std::uint32_t>(dfa_.states.size()));
  if (!fresh) return it->second;
  dfa_state_data st;
  bool accept = false, popped = false;
  std::vector<matcher::config> cons;
  matcher::expand(g_, dfa_.fs, heads, cons, accept, popped, &callers_);
  st.cons = std::move(cons);
  for (const auto& c : st.cons)
    for (const auto& e : g_.nodes[c.node].edges)
      for (unsigned x = e.lo; x <= e.hi; ++x) st.can[x >> 6] |= std::uint64_t{1} << (x & 63);
  // Distance of an exact frame to the end of the rule that sits on bottom.
  auto rel_of = [&](auto& self, std::uint32_t f) -> std::uint32_t {
    if (f == matcher::bottom) return 0;
    if (dfa_.rel.size() <= f) dfa_.rel.resize(dfa_.fs.list.size(), unreachable + 1);
    if (dfa_.rel[f] != unreachable + 1) return dfa_.rel[f];
    const auto fr = dfa_.fs.list[f];
    const auto below = self(self, fr.parent);
    const auto d = g_.dist[fr.node];
    const std::uint32_t r = d >= unreachable || below >= unreachable ? unreachable : d + below;
    if (dfa_.rel.size() <= f) dfa_.rel.resize(dfa_.fs.list.size(), unreachable + 1);
    dfa_.rel[f] = r;
    return r;
  };
  for (auto h : heads) {
    if (dfa_.fs.approx[h]) continue;
    st.exact = true;
    const auto r = rel_of(rel_of, h);
    st.rel = std::min(st.rel, r);
    const auto& sl = g_.self_loop[dfa_.fs.list[h].node];
    if (sl == byte_bits{}) continue;
    const auto at = std::find(st.loops.begin(), st.loops.end(), sl);
    if (at == st.loops.end()) {
      st.loops.push_back(sl);
      st.loop_rel.push_back(r);
    } else {
      auto& lr = st.loop_rel[static_cast<std::size_t>(at - st.loops.begin())];
      lr = std::min(lr, r);
    }
  }
  dfa_.states.push_back(std::move(st));
  return it->second;
}

std::uint32_t compiled_grammar::dfa_next(dfa_memo& dfa_, std::uint32_t state, symbol s) const {
  const std::size_t slot = static_cast<std::size_t>(state) * 256 + s;
  if (s < 256) {
    if (dfa_.bytes.size() <= slot) dfa_.bytes.resize(std::max<std::size_t>(static_cast<std::size_t>(state + 1) * 256, dfa_.bytes.size() * 2), dfa_memo::unknown);
    if (dfa_.bytes[slot] != dfa_memo::unknown) return dfa_.bytes[slot];
  } else {
    const std::uint64_t key = (static_cast<std::uint64_t>(state) << 16) | s;
    if (auto it = dfa_.next.find(key); it != dfa_.next.end()) return it->second;
  }
  std::vector<std::uint32_t> heads;
  matcher::step(g_, dfa_.fs, dfa_.states[state].cons, s, heads);
  const auto to = heads.empty() ? dead : dfa_state(dfa_, heads);
  if (s < 256) dfa_.bytes[slot] = to;
  else dfa_.next.emplace((static_cast<std::uint64_t>(state) << 16) | s, to);
  return to;
}

std::size_t compiled_grammar::cache_bytes() const {
  std::lock_guard lock(mu_);
  std::size_t b = 0;
  for (const auto& c : caches_)
    if (c) b += sizeof(node_cache) + c->accepted.memory_bytes() + c->stay.memory_bytes() + c->uncertain.size() * 4;
  return b;
}

compiled_grammar::node_cache compiled_grammar::compute(std::uint32_t n, dfa_memo& dfa_) const {
  const auto& v = *v_;
  const auto& trie = v.trie();
  const auto& ids = v.dfs_ids();
  node_cache out;
  std::vector<std::uint64_t> accepted(v.words(), 0);
  auto accept_range = [&](std::uint32_t lo, std::uint32_t hi) {
    for (auto i = lo; i < hi; ++i) {
      const auto id = static_cast<std::uint32_t>(ids[i]);
      accepted[id >> 6] |= std::uint64_t{1} << (id & 63);
    }
  };
  std::vector<std::uint32_t> start{dfa_.fs.intern(n, matcher::bottom)};
  const auto s0 = dfa_state(dfa_, start);
  // Depth-first over the trie. A path that leaves n's rule continues on any_ctx frames (every
  // caller's continuation): a token that survives only there depends on the real stack
  // (uncertain); one that dies everywhere is rejected.
  // Accepted tokens that can leave the distance to completion above n's own (rel > dist[n]),
  // with by how much: budget steering checks only these when the budget is tight.
  const auto base = g_.dist[n];
  auto risky = [&](std::int32_t id, std::uint32_t rel) {
    if (rel > base) out.risky.emplace_back(id, rel >= unreachable || base >= unreachable ? std::int64_t{unreachable} : std::int64_t{rel} - base);
  };
  auto dfs = [&](auto& self, std::uint32_t t, std::uint32_t st) -> void {
    const auto& tn = trie[t];
    const auto can = dfa_.states[st].can;
    for (auto c = tn.first_child; c < tn.first_child + tn.num_children; ++c) {
      const auto& cn = trie[c];
      if (!((can[cn.sym >> 6] >> (cn.sym & 63)) & 1)) continue;
      // A subtree made only of bytes that loop on an exact head's node is accepted wholesale.
      if (!cn.special) {
        const auto& ls = dfa_.states[st];
        std::uint32_t loop_rel = unreachable + 1;
        for (std::size_t i = 0; i < ls.loops.size(); ++i) {
          const auto& sl = ls.loops[i];
          if ((cn.bytes[0] & ~sl[0]) == 0 && (cn.bytes[1] & ~sl[1]) == 0 && (cn.bytes[2] & ~sl[2]) == 0 && (cn.bytes[3] & ~sl[3]) == 0)
            loop_rel = std::min(loop_rel, ls.loop_rel[i]);
        }
        if (loop_rel != unreachable + 1) {
          accept_range(cn.lo, cn.hi);
          if (loop_rel > base)
            for (auto i = cn.lo; i < cn.hi; ++i) risky(ids[i], loop_rel);
          continue;
        }
      }
      const auto to = dfa_next(dfa_, st, cn.sym);
      if (to == dead) continue;
      if (cn.token >= 0) {
        if (dfa_.states[to].exact) {
          accepted[static_cast<std::uint32_t>(cn.token) >> 6] |= std::uint64_t{1} << (cn.token & 63);
          risky(cn.token, dfa_.states[to].rel);
        } else {
          out.uncertain.push_back(cn.token);
        }
      }
      self(self, c, to);
    }
  };
  dfs(dfs, 0, s0);
  std::sort(out.risky.begin(), out.risky.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  out.risky.shrink_to_fit();
  // Tokens made only of the node's self-loop bytes keep the state exactly (budget steering
  // decides them without stepping).
  std::vector<std::uint64_t> stay(v.words(), 0);
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
            stay[id >> 6] |= std::uint64_t{1} << (id & 63);
          }
          continue;
        }
        if (cn.token >= 0) stay[static_cast<std::uint32_t>(cn.token) >> 6] |= std::uint64_t{1} << (cn.token & 63);
        mark(c);
      }
    };
    mark(0);
  }
  out.accepted = token_set::from_bits(std::move(accepted));
  out.stay = token_set::from_bits(std::move(stay));
  return out;
}

} // namespace k3::grammar
