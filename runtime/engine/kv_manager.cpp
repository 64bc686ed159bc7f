#include "runtime/engine/kv_manager.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
#include <stdexcept>

namespace k3::engine {

std::int64_t kv_manager::slot_bytes(const model::model_config& c) { return model::sequence_state::fixed_bytes(c); }

std::int64_t kv_manager::block_bytes(const model::model_config& c, int block_size, bool fp32) {
  return static_cast<std::int64_t>(c.num_layers - c.num_kda_layers()) * block_size * (c.kv_lora_rank + c.qk_rope) *
         (fp32 ? 4 : 2);
}

kv_manager::kv_manager(const model::model_config& c, const kv_config& k) : c_(c), k_(k) {
  if (k.block_size <= 0) throw std::invalid_argument("kv_config.block_size must be positive");
  if (k.max_model_len <= 0) throw std::invalid_argument("kv_config.max_model_len must be positive");
  num_kda_ = c.num_kda_layers();
  num_mla_ = c.num_layers - num_kda_;
  const std::int64_t sb = k.slot_bytes > 0 ? k.slot_bytes : slot_bytes(c);
  const std::int64_t bb = std::max<std::int64_t>(1, k.block_bytes > 0 ? k.block_bytes : block_bytes(c, k.block_size, k.fp32_cache));
  sb_ = sb;
  bb_ = bb;
  const std::int64_t per_seq_blocks = num_mla_ == 0 ? 0 : (k.max_model_len + k.block_size - 1) / k.block_size;
  const std::int64_t per_seq = sb + per_seq_blocks * bb;
  if (k.memory_bytes < per_seq)
    throw std::invalid_argument("KV budget of " + std::to_string(k.memory_bytes) + " bytes cannot hold one sequence at max_model_len " +
                                std::to_string(k.max_model_len) + " (needs " + std::to_string(per_seq) + " bytes: " +
                                std::to_string(sb) + " fixed KDA state + " + std::to_string(per_seq_blocks) + " MLA blocks)");
  const std::int64_t fit = k.memory_bytes / per_seq;
  if (k.max_num_seqs > 0) {
    num_slots_ = k.max_num_seqs;
    const std::int64_t left = k.memory_bytes - static_cast<std::int64_t>(num_slots_) * sb;
    if (left < per_seq_blocks * bb)
      throw std::invalid_argument("max_num_seqs " + std::to_string(k.max_num_seqs) + " leaves no room for one sequence's " +
                                  std::to_string(per_seq_blocks) + " MLA blocks in the KV budget");
    num_blocks_ = left / bb;
    note_ = "KV budget " + std::to_string(k.memory_bytes >> 20) + " MiB: " + std::to_string(num_slots_) + " KDA slots, " +
            std::to_string(num_blocks_) + " MLA blocks of " + std::to_string(k.block_size) + " tokens (" +
            std::to_string(std::min<std::int64_t>(fit, num_slots_)) + " sequences fit at max_model_len " +
            std::to_string(k.max_model_len) + ")";
  } else {
    num_slots_ = static_cast<int>(std::min<std::int64_t>(fit, 1 << 20));
    num_blocks_ = (k.memory_bytes - static_cast<std::int64_t>(num_slots_) * sb) / bb;
    note_ = "KV budget " + std::to_string(k.memory_bytes >> 20) + " MiB allows max_num_seqs = " + std::to_string(num_slots_) +
            " at max_model_len " + std::to_string(k.max_model_len) + " (" + std::to_string(sb) + " B KDA state per sequence, " +
            std::to_string(num_blocks_) + " MLA blocks of " + std::to_string(k.block_size) + " tokens)";
  }
  kda_floats_ = static_cast<std::size_t>(c.kda_heads) * c.kda_head_dim * c.kda_head_dim;
  conv_floats_ = static_cast<std::size_t>(3) * c.kda_proj() * (c.conv_kernel - 1);
  block_elems_ = static_cast<std::size_t>(k.block_size) * (c.kv_lora_rank + c.qk_rope) * (k.fp32_cache ? 2 : 1);
  if (num_mla_ == 0) num_blocks_ = 0;
  if (num_blocks_ > std::numeric_limits<std::int32_t>::max())
    throw std::invalid_argument("KV budget gives " + std::to_string(num_blocks_) + " MLA blocks, more than block ids can name; raise block_size");
  if (k.backed) {
    const std::size_t slot_b = sizeof(float) * std::max<std::size_t>(1, static_cast<std::size_t>(num_slots_) * num_kda_ * (kda_floats_ + conv_floats_));
    const std::size_t block_b = sizeof(bf16_t) * std::max<std::size_t>(1, static_cast<std::size_t>(num_blocks_) * num_mla_ * block_elems_);
    if (k.allocate) {
      slot_mem_ = k.allocate(slot_b);
      block_mem_ = k.allocate(block_b);
      if (!slot_mem_ || !block_mem_) throw std::invalid_argument("kv_config.allocate returned no memory for the KV pools");
    } else {
      slot_mem_ = std::shared_ptr<void>(new float[slot_b / sizeof(float)], [](void* p) { delete[] static_cast<float*>(p); });
      block_mem_ = std::shared_ptr<void>(new bf16_t[block_b / sizeof(bf16_t)], [](void* p) { delete[] static_cast<bf16_t*>(p); });
    }
    slots_ = static_cast<float*>(slot_mem_.get());
    blocks_ = static_cast<bf16_t*>(block_mem_.get());
  }
  for (int s = num_slots_ - 1; s >= 0; --s) free_slots_.push_back(s);
  for (std::int64_t b = num_blocks_ - 1; b >= 0; --b) free_blocks_.push_back(static_cast<std::int32_t>(b));
  meta_.resize(static_cast<std::size_t>(num_blocks_));

  // Prefix cache: checkpoints live in row blocks, so a model without MLA layers has nowhere
  // to keep them (neither K3 nor Kimi Linear is such a model).
  caching_ = k.prefix_caching && num_mla_ > 0;
  if (caching_) {
    const int B = k.block_size;
    if (num_kda_ > 0) {
      if (k.backed) {
        const std::int64_t slot_region = static_cast<std::int64_t>(num_kda_) * static_cast<std::int64_t>(kda_floats_ + conv_floats_) * 4;
        const std::int64_t block_region = static_cast<std::int64_t>(num_mla_) * static_cast<std::int64_t>(block_elems_) * 2;
        ckpt_blocks_ = (slot_region + block_region - 1) / block_region;
      } else {
        ckpt_blocks_ = (sb_ + bb_ - 1) / bb_;
      }
      if (k.checkpoint_interval > 0) {
        interval_ = (k.checkpoint_interval + B - 1) / B * B;
      } else if (k.checkpoint_interval == 0) {
        // Interval checkpoints cost at most 1/8 of the rows they cover (a checkpoint is worth
        // `tokens` rows; K3 on plan A: 54 MiB = 2048 rows → one every 16K tokens, 64 over a
        // 1M-token prefix). Turn boundaries and branch points are checkpointed regardless.
        const std::int64_t tokens = (sb_ * B + bb_ - 1) / bb_;
        interval_ = std::max<std::int64_t>(4 * B, (8 * tokens + B - 1) / B * B);
      }
    }
    ckpt_block_cap_ = static_cast<std::int64_t>(static_cast<double>(num_blocks_) * std::clamp(k.checkpoint_share, 0.0, 1.0));
    region_ = static_cast<std::size_t>(num_mla_) * block_elems_ * sizeof(bf16_t);
    if (k.host_tier_bytes > 0 && k.backed) {
      host_blocks_ = std::min<std::int64_t>(k.host_tier_bytes / static_cast<std::int64_t>(region_), std::numeric_limits<std::int32_t>::max());
      if (host_blocks_ > 0) {
        const std::size_t bytes = static_cast<std::size_t>(host_blocks_) * region_;
        host_mem_ = k.host_allocate ? k.host_allocate(bytes)
                                    : std::shared_ptr<void>(new char[bytes], [](void* p) { delete[] static_cast<char*>(p); });
        if (!host_mem_) throw std::invalid_argument("kv_config.host_allocate returned no memory for the host tier");
        for (std::int64_t b = host_blocks_ - 1; b >= 0; --b) host_free_.push_back(static_cast<std::int32_t>(b));
        tier_ = true;
      }
    }
    note_ += "; prefix cache on: " + std::to_string(B) + "-token blocks";
    if (num_kda_ > 0)
      note_ += ", a KDA checkpoint takes " + std::to_string(ckpt_blocks_) + " blocks (" + std::to_string((ckpt_blocks_ * bb_) >> 10) +
               " KiB), one every " + (interval_ > 0 ? std::to_string(interval_) + " tokens of a long prefill" : std::string("prompt end only")) +
               " and at each prompt's end";
    if (tier_) note_ += "; host tier " + std::to_string((host_blocks_ * static_cast<std::int64_t>(region_)) >> 20) + " MiB";
  }
}

std::int64_t kv_manager::blocks_needed(seq_id id, std::int64_t tokens) const {
  if (num_mla_ == 0) return 0;
  const std::int64_t need = (tokens + k_.block_size - 1) / k_.block_size;
  auto it = seqs_.find(id);
  const std::int64_t have = it == seqs_.end() ? 0 : static_cast<std::int64_t>(it->second.blocks.size());
  return std::max<std::int64_t>(0, need - have);
}

bool kv_manager::can_allocate(seq_id id, std::int64_t tokens) const {
  if (tokens > k_.max_model_len) return false;
  if (!has(id) && free_slots_.empty()) return false;
  return blocks_needed(id, tokens) <= available_blocks();
}

void kv_manager::point(seq& s) {
  if (!k_.backed) return; // accounting only: the views stay empty
  const std::size_t per_slot = static_cast<std::size_t>(num_kda_) * (kda_floats_ + conv_floats_);
  float* base = slots_ + static_cast<std::size_t>(s.slot) * per_slot;
  for (int l = 0; l < num_kda_; ++l) {
    s.view.kda[static_cast<std::size_t>(l)] = base + static_cast<std::size_t>(l) * (kda_floats_ + conv_floats_);
    s.view.conv[static_cast<std::size_t>(l)] = s.view.kda[static_cast<std::size_t>(l)] + kda_floats_;
  }
  for (int l = 0; l < num_mla_; ++l) { // append the new blocks only
    auto& table = s.view.mla_blocks[static_cast<std::size_t>(l)];
    for (std::size_t i = table.size(); i < s.blocks.size(); ++i)
      table.push_back(blocks_ + (static_cast<std::size_t>(s.blocks[i]) * num_mla_ + l) * block_elems_);
  }
}

model::sequence_state* kv_manager::allocate(seq_id id, std::int64_t tokens, prefix_hit* hit, std::vector<state_copy>* restore) {
  auto it = seqs_.find(id);
  if (it != seqs_.end() && tokens <= k_.max_model_len &&
      (num_mla_ == 0 || static_cast<std::int64_t>(it->second.blocks.size()) * k_.block_size >= tokens))
    return &it->second.view; // fast path: a decode step inside the blocks it already holds
  if (tokens > k_.max_model_len) return nullptr;
  if (it != seqs_.end()) {
    const auto need = blocks_needed(id, tokens);
    if (need > available_blocks()) return nullptr;
    for (auto n = need; n > 0; --n) it->second.blocks.push_back(take_block());
    point(it->second);
    return &it->second.view;
  }
  if (free_slots_.empty()) return nullptr;
  // A hit's blocks and checkpoint are referenced first: they leave the LRU, so they can be
  // neither evicted for this sequence's own new blocks nor counted as available.
  const bool use_hit = hit && !hit->empty() && caching_;
  // Parts of the hit still in the host tier are pinned with the rest, then brought back.
  std::int64_t from_host = 0;
  auto hold = [&](int delta) {
    for (std::size_t i = 0; i < hit->blocks_.size(); ++i) {
      if (hit->blocks_[i] >= 0) {
        if (delta > 0) ref_block(hit->blocks_[i]);
        else unref_block(hit->blocks_[i]);
      } else {
        host_pin(false, hit->hashes_[i], delta);
      }
    }
    if (!hit->has_checkpoint_) return;
    if (hit->checkpoint_host_) {
      host_pin(true, hit->checkpoint_, delta);
      return;
    }
    auto& c = checkpoints_.at(hit->checkpoint_);
    if (delta > 0) {
      if (c.ref++ == 0 && c.in_lru) lru_erase(true, hit->checkpoint_);
    } else if (--c.ref == 0) {
      lru_push(true, hit->checkpoint_);
    }
  };
  if (use_hit) {
    hold(+1);
    for (auto b : hit->blocks_) from_host += b < 0 ? 1 : 0;
    if (hit->has_checkpoint_ && hit->checkpoint_host_) from_host += ckpt_blocks_;
  }
  const std::int64_t have = use_hit ? static_cast<std::int64_t>(hit->blocks_.size()) : 0;
  const std::int64_t need = num_mla_ == 0 ? 0 : std::max<std::int64_t>(0, (tokens + k_.block_size - 1) / k_.block_size - have);
  if (need + from_host > available_blocks()) {
    if (use_hit) hold(-1); // undo: nothing changed
    return nullptr;
  }
  if (use_hit && from_host > 0) {
    // Back from the host tier, as a unit, before anything else can take the blocks.
    for (std::size_t i = 0; i < hit->blocks_.size(); ++i) {
      if (hit->blocks_[i] >= 0) continue;
      const auto h = hit->hashes_[i];
      const std::int32_t b = take_block(); // ref 1: the new sequence holds it
      auto& e = host_rows_.at(h);
      copy_bytes(device_region(b), host_region(e.blocks.front()), region_);
      host_pin(false, h, -1);
      host_erase(false, h);
      ++host_reads_;
      auto& m = meta_[static_cast<std::size_t>(b)];
      if (!cached_.count(h)) { // (another copy may have been registered meanwhile)
        cached_.emplace(h, b);
        m.cached = true;
        m.hash = h;
      }
      hit->blocks_[i] = b;
    }
    if (hit->has_checkpoint_ && hit->checkpoint_host_) {
      const auto h = hit->checkpoint_;
      checkpoint c;
      for (std::int64_t n = 0; n < ckpt_blocks_; ++n) c.blocks.push_back(take_block());
      for (auto b : c.blocks) meta_[static_cast<std::size_t>(b)] = block_meta{}; // owned by the checkpoint
      ckpt_blocks_held_ += ckpt_blocks_;
      const auto& e = host_ckpts_.at(h);
      for (std::size_t j = 0; j < c.blocks.size(); ++j) copy_bytes(device_region(c.blocks[j]), host_region(e.blocks[j]), region_);
      host_pin(true, h, -1);
      host_erase(true, h);
      ++host_reads_;
      c.ref = 1; // held by this restore
      checkpoints_.emplace(h, std::move(c));
      hit->checkpoint_host_ = false;
    }
  }
  seq s{-1, {}, model::sequence_state::view(c_, k_.block_size, k_.fp32_cache), {}, {}, {}, {}};
  s.slot = free_slots_.back();
  free_slots_.pop_back();
  // Not zeroed here: model::step zeroes the state of every sequence at position 0.
  if (use_hit) {
    s.blocks = std::move(hit->blocks_);
    s.chain = std::move(hit->hashes_);
    if (hit->has_checkpoint_) {
      s.restoring = hit->checkpoint_;
      if (restore) {
        auto copies = slot_copies(s.slot, checkpoints_.at(hit->checkpoint_).blocks, false);
        restore->insert(restore->end(), copies.begin(), copies.end());
      }
    }
    *hit = prefix_hit{}; // consumed
  }
  for (auto n = need; n > 0; --n) s.blocks.push_back(take_block());
  it = seqs_.emplace(id, std::move(s)).first;
  point(it->second);
  return &it->second.view;
}

model::sequence_state* kv_manager::state(seq_id id) {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second.view;
}

void kv_manager::release(seq_id id, std::span<const std::int32_t> tokens, std::int64_t computed) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  seq& s = it->second;
  if (caching_ && !tokens.empty()) {
    register_blocks(s, tokens, computed);
    if (s.rolling) {
      commit(s, std::move(*s.rolling));
      s.rolling.reset();
    }
  }
  if (s.rolling) free_checkpoint_blocks(s.rolling->blocks);
  if (s.pending) free_checkpoint_blocks(s.pending->blocks); // its step never completed
  if (s.restoring) {
    auto& c = checkpoints_.at(*s.restoring);
    if (--c.ref == 0) lru_push(true, *s.restoring);
  }
  free_slots_.push_back(s.slot);
  for (auto b : s.blocks) unref_block(b);
  seqs_.erase(it);
}

kv_usage kv_manager::usage() const {
  kv_usage u;
  u.num_slots = num_slots_;
  u.used_slots = num_slots_ - static_cast<int>(free_slots_.size());
  u.num_blocks = num_blocks_;
  u.used_blocks = num_blocks_ - static_cast<std::int64_t>(free_blocks_.size()) - lru_blocks_;
  u.slot_bytes = sb_;
  u.block_bytes = bb_;
  u.cached_blocks = static_cast<std::int64_t>(cached_.size());
  u.evictable_blocks = lru_blocks_;
  u.checkpoints = static_cast<std::int64_t>(checkpoints_.size());
  u.checkpoint_blocks = ckpt_blocks_held_;
  u.host_blocks = host_blocks_;
  u.host_used_blocks = host_blocks_ - static_cast<std::int64_t>(host_free_.size());
  u.host_writes = host_writes_;
  u.host_reads = host_reads_;
  return u;
}

std::string kv_manager::audit() const {
  // Every block is exactly one of: free, held by sequences (ref = holders), owned by a
  // checkpoint (committed, pending or rolling), or cached and unreferenced (in the LRU).
  std::vector<std::int32_t> holders(static_cast<std::size_t>(num_blocks_), 0), owner(static_cast<std::size_t>(num_blocks_), 0);
  std::int64_t ckpt_blocks = 0;
  for (const auto& [id, s] : seqs_) {
    for (auto b : s.blocks) ++holders[static_cast<std::size_t>(b)];
    for (const auto* p : {&s.pending, &s.rolling})
      if (*p) {
        for (auto b : (*p)->blocks) ++owner[static_cast<std::size_t>(b)];
        ckpt_blocks += static_cast<std::int64_t>((*p)->blocks.size());
      }
    if (s.restoring && !checkpoints_.count(*s.restoring)) return "sequence " + std::to_string(id) + " restores a missing checkpoint";
  }
  std::int64_t lru_blocks = 0;
  for (const auto& [h, c] : checkpoints_) {
    for (auto b : c.blocks) ++owner[static_cast<std::size_t>(b)];
    ckpt_blocks += static_cast<std::int64_t>(c.blocks.size());
    std::int32_t refs = 0;
    for (const auto& [id, s] : seqs_) refs += s.restoring && *s.restoring == h;
    if (refs != c.ref) return "checkpoint ref " + std::to_string(c.ref) + " but " + std::to_string(refs) + " restoring";
    if ((c.ref == 0) != c.in_lru) return "checkpoint with ref " + std::to_string(c.ref) + (c.in_lru ? " in" : " not in") + " the LRU";
    if (c.in_lru) lru_blocks += static_cast<std::int64_t>(c.blocks.size());
  }
  if (ckpt_blocks != ckpt_blocks_held_) return "checkpoint blocks " + std::to_string(ckpt_blocks) + " != counter " + std::to_string(ckpt_blocks_held_);
  std::vector<char> is_free(static_cast<std::size_t>(num_blocks_), 0);
  for (auto b : free_blocks_) {
    if (is_free[static_cast<std::size_t>(b)]++) return "block " + std::to_string(b) + " twice in the free list";
  }
  for (std::size_t b = 0; b < is_free.size(); ++b) {
    const auto& m = meta_[b];
    const int roles = (is_free[b] ? 1 : 0) + (holders[b] ? 1 : 0) + (owner[b] ? 1 : 0) + (m.in_lru ? 1 : 0);
    if (roles != 1) return "block " + std::to_string(b) + " has " + std::to_string(roles) + " roles (free/held/checkpoint/lru)";
    if (owner[b] > 1) return "block " + std::to_string(b) + " owned by two checkpoints";
    if (holders[b] && m.ref != holders[b]) return "block " + std::to_string(b) + " ref " + std::to_string(m.ref) + " but " + std::to_string(holders[b]) + " holders";
    if (m.in_lru) {
      ++lru_blocks;
      if (!m.cached) return "uncached block " + std::to_string(b) + " in the LRU";
    }
    if (m.cached) {
      auto it = cached_.find(m.hash);
      if (it == cached_.end() || it->second != static_cast<std::int32_t>(b)) return "block " + std::to_string(b) + " cached under a hash that maps elsewhere";
    }
  }
  if (lru_blocks != lru_blocks_) return "LRU blocks " + std::to_string(lru_blocks) + " != counter " + std::to_string(lru_blocks_);
  if (lru_.empty() && lru_blocks_ != 0) return "empty LRU with a block count";
  std::size_t ckpts_in_lru = 0;
  for (const auto& [h, c] : checkpoints_) ckpts_in_lru += c.in_lru ? 1 : 0;
  if (ckpts_in_lru != ckpt_lru_.size()) return "checkpoint LRU out of step with the LRU";
  for (const auto& [h, b] : cached_)
    if (!meta_[static_cast<std::size_t>(b)].cached || meta_[static_cast<std::size_t>(b)].hash != h) return "hash map entry for an unregistered block";
  if (static_cast<int>(free_slots_.size()) + static_cast<int>(seqs_.size()) != num_slots_) return "slots leaked";
  if (tier_) {
    std::vector<char> used(static_cast<std::size_t>(host_blocks_), 0);
    for (auto b : host_free_)
      if (used[static_cast<std::size_t>(b)]++) return "host block " + std::to_string(b) + " twice";
    std::size_t in_lru = 0;
    for (const auto* map : {&host_rows_, &host_ckpts_})
      for (const auto& [h, e] : *map) {
        if (e.pins != 0) return "a host entry is still pinned";
        if (!e.in_lru) return "a host entry is outside the host LRU";
        ++in_lru;
        if (map == &host_rows_ && e.blocks.size() != 1) return "a host row entry holds " + std::to_string(e.blocks.size()) + " blocks";
        if (map == &host_ckpts_ && static_cast<std::int64_t>(e.blocks.size()) != ckpt_blocks_) return "a host checkpoint has the wrong size";
        for (auto b : e.blocks)
          if (used[static_cast<std::size_t>(b)]++) return "host block " + std::to_string(b) + " in two roles";
      }
    if (in_lru != host_lru_.size()) return "host LRU size mismatch";
    if (std::count(used.begin(), used.end(), 0) != 0) return "host blocks leaked";
  }
  return "";
}

} // namespace k3::engine
