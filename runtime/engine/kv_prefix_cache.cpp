// The prefix cache's part of kv_manager (kv_manager.hpp): chained block hashes, the one LRU
// over unreferenced blocks and checkpoints, registration, checkpoint planning and commit, and
// the two-stage lookup.
#include "runtime/engine/kv_manager.hpp"

#include <algorithm>
#include <iterator>

namespace k3::engine {

std::uint64_t kv_manager::chain_hash(std::uint64_t prev, std::span<const std::int32_t> block) noexcept {
  auto mix = [](std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  std::uint64_t h = mix(prev + 0x9e3779b97f4a7c15ull * (block.size() + 1));
  for (auto t : block) h = mix(h ^ static_cast<std::uint32_t>(t));
  return h;
}

void kv_manager::lru_push(bool is_checkpoint, std::uint64_t key) {
  lru_.emplace_back(is_checkpoint, key);
  if (is_checkpoint) {
    auto& c = checkpoints_.at(key);
    c.lru = std::prev(lru_.end());
    c.in_lru = true;
    ckpt_lru_.push_back(key);
    c.ckpt_lru = std::prev(ckpt_lru_.end());
    lru_blocks_ += static_cast<std::int64_t>(c.blocks.size());
  } else {
    auto& m = meta_[static_cast<std::size_t>(key)];
    m.lru = std::prev(lru_.end());
    m.in_lru = true;
    ++lru_blocks_;
  }
}

void kv_manager::lru_erase(bool is_checkpoint, std::uint64_t key) {
  if (is_checkpoint) {
    auto& c = checkpoints_.at(key);
    lru_.erase(c.lru);
    ckpt_lru_.erase(c.ckpt_lru);
    c.in_lru = false;
    lru_blocks_ -= static_cast<std::int64_t>(c.blocks.size());
  } else {
    auto& m = meta_[static_cast<std::size_t>(key)];
    lru_.erase(m.lru);
    m.in_lru = false;
    --lru_blocks_;
  }
}

void kv_manager::evict_one() { evict_entry(lru_.front().first, lru_.front().second); }

void kv_manager::evict_entry(bool is_checkpoint, std::uint64_t key) {
  lru_erase(is_checkpoint, key);
  if (is_checkpoint) {
    auto it = checkpoints_.find(key);
    if (tier_) tier_out(true, key, it->second.blocks);
    free_checkpoint_blocks(it->second.blocks);
    checkpoints_.erase(it);
  } else {
    auto& m = meta_[static_cast<std::size_t>(key)];
    if (tier_) tier_out(false, m.hash, {static_cast<std::int32_t>(key)});
    cached_.erase(m.hash);
    m.cached = false;
    free_blocks_.push_back(static_cast<std::int32_t>(key));
  }
}

std::int32_t kv_manager::take_block() {
  while (free_blocks_.empty() && !lru_.empty()) evict_one();
  if (free_blocks_.empty()) throw std::logic_error("kv_manager: no block to take (callers check available_blocks first)");
  const auto b = free_blocks_.back();
  free_blocks_.pop_back();
  meta_[static_cast<std::size_t>(b)] = block_meta{};
  meta_[static_cast<std::size_t>(b)].ref = 1;
  return b;
}

void kv_manager::ref_block(std::int32_t b) {
  auto& m = meta_[static_cast<std::size_t>(b)];
  if (m.ref++ == 0 && m.in_lru) lru_erase(false, static_cast<std::uint64_t>(b));
}

void kv_manager::unref_block(std::int32_t b) {
  auto& m = meta_[static_cast<std::size_t>(b)];
  if (--m.ref > 0) return;
  if (m.cached) lru_push(false, static_cast<std::uint64_t>(b));
  else free_blocks_.push_back(b);
}

void kv_manager::free_checkpoint_blocks(std::vector<std::int32_t>& blocks) {
  for (auto b : blocks) {
    meta_[static_cast<std::size_t>(b)] = block_meta{};
    free_blocks_.push_back(b);
  }
  ckpt_blocks_held_ -= static_cast<std::int64_t>(blocks.size());
  blocks.clear();
}

void kv_manager::register_blocks(seq& s, std::span<const std::int32_t> tokens, std::int64_t computed) {
  const auto B = static_cast<std::size_t>(k_.block_size);
  const std::size_t full = std::min({static_cast<std::size_t>(std::max<std::int64_t>(0, computed)), tokens.size()}) / B;
  for (std::size_t i = s.chain.size(); i < full && i < s.blocks.size(); ++i) {
    const std::uint64_t h = chain_hash(i ? s.chain[i - 1] : 0, tokens.subspan(i * B, B));
    s.chain.push_back(h);
    auto& m = meta_[static_cast<std::size_t>(s.blocks[i])];
    if (m.cached || cached_.count(h)) continue; // shared from a hit, or another sequence's copy is registered
    cached_.emplace(h, s.blocks[i]);
    m.cached = true;
    m.hash = h;
  }
}

void kv_manager::commit(seq& s, pending_checkpoint p) {
  const auto idx = static_cast<std::size_t>(p.boundary / k_.block_size);
  if (p.blocks.empty() || idx == 0 || idx > s.chain.size() || p.boundary % k_.block_size != 0) {
    free_checkpoint_blocks(p.blocks);
    return;
  }
  const auto h = s.chain[idx - 1];
  if (checkpoints_.count(h)) { // this boundary is already kept
    free_checkpoint_blocks(p.blocks);
    return;
  }
  checkpoint c;
  c.blocks = std::move(p.blocks);
  checkpoints_.emplace(h, std::move(c));
  lru_push(true, h);
}

std::vector<state_copy> kv_manager::slot_copies(int slot, const std::vector<std::int32_t>& blocks, bool to_blocks) const {
  std::vector<state_copy> out;
  if (!k_.backed) return out; // accounting only: nothing to move
  const std::size_t per_slot = static_cast<std::size_t>(num_kda_) * (kda_floats_ + conv_floats_);
  const std::size_t slot_region = per_slot * sizeof(float);
  const std::size_t block_region = static_cast<std::size_t>(num_mla_) * block_elems_ * sizeof(bf16_t);
  char* sp = reinterpret_cast<char*>(slots_ + static_cast<std::size_t>(slot) * per_slot);
  std::size_t off = 0;
  for (auto b : blocks) {
    if (off >= slot_region) break;
    const std::size_t n = std::min(block_region, slot_region - off);
    char* bp = reinterpret_cast<char*>(blocks_ + static_cast<std::size_t>(b) * num_mla_ * block_elems_);
    if (to_blocks) out.push_back({bp, sp + off, n});
    else out.push_back({sp + off, bp, n});
    off += n;
  }
  return out;
}

prefix_hit kv_manager::lookup(std::span<const std::int32_t> tokens) {
  prefix_hit h;
  if (!caching_ || tokens.size() < 2) return h;
  const auto B = static_cast<std::size_t>(k_.block_size);
  const std::size_t nb = (tokens.size() - 1) / B;
  std::uint64_t prev = 0;
  std::size_t best = 0;
  for (std::size_t i = 0; i < nb; ++i) {
    prev = chain_hash(prev, tokens.subspan(i * B, B));
    const auto it = cached_.find(prev);
    if (it != cached_.end()) h.blocks_.push_back(it->second);
    else if (tier_ && host_rows_.count(prev)) h.blocks_.push_back(-1); // in the host tier
    else break;
    h.hashes_.push_back(prev);
    if (num_kda_ == 0 || checkpoints_.count(prev) || (tier_ && host_ckpts_.count(prev))) best = i + 1;
  }
  h.rows_ = static_cast<std::int64_t>(h.blocks_.size() * B);
  h.blocks_.resize(best);
  h.hashes_.resize(best);
  if (best > 0 && num_kda_ > 0) {
    h.has_checkpoint_ = true;
    h.checkpoint_ = h.hashes_.back();
    h.checkpoint_host_ = !checkpoints_.count(h.checkpoint_);
  }
  h.tokens_ = static_cast<std::int64_t>(best * B);
  return h;
}

bool kv_manager::plan_checkpoint(seq_id id, std::int64_t boundary, bool keep, std::vector<state_copy>& after, std::int64_t reserve) {
  if (!caching_ || ckpt_blocks_ == 0 || boundary <= 0 || boundary % k_.block_size != 0) return false;
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return false;
  seq& s = it->second;
  if (s.pending) return false;
  pending_checkpoint p;
  p.boundary = boundary;
  p.keep = keep;
  if (!keep && s.rolling) { // rewrite the rolling checkpoint's storage in place
    p.blocks = std::move(s.rolling->blocks);
    s.rolling.reset();
  } else {
    // At the checkpoints' share of the pool, the least recently used unreferenced checkpoint
    // makes room (to the host tier when there is one): new boundaries are worth more.
    while (ckpt_blocks_held_ + ckpt_blocks_ > ckpt_block_cap_) {
      if (ckpt_lru_.empty()) return false;
      evict_entry(true, ckpt_lru_.front());
    }
    if (available_blocks() < ckpt_blocks_ + reserve) return false;
    for (std::int64_t n = 0; n < ckpt_blocks_; ++n) p.blocks.push_back(take_block());
    ckpt_blocks_held_ += ckpt_blocks_;
  }
  auto copies = slot_copies(s.slot, p.blocks, true);
  after.insert(after.end(), copies.begin(), copies.end());
  s.pending = std::move(p);
  return true;
}

void kv_manager::step_done(seq_id id, std::span<const std::int32_t> tokens, std::int64_t computed) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  seq& s = it->second;
  if (s.restoring) { // the restore ran with this step
    auto& c = checkpoints_.at(*s.restoring);
    if (--c.ref == 0) lru_push(true, *s.restoring);
    s.restoring.reset();
  }
  if (!caching_) return;
  register_blocks(s, tokens, computed);
  if (s.pending) {
    auto p = std::move(*s.pending);
    s.pending.reset();
    if (p.keep) {
      commit(s, std::move(p));
    } else {
      if (s.rolling) free_checkpoint_blocks(s.rolling->blocks);
      s.rolling = std::move(p);
    }
  }
}

} // namespace k3::engine
