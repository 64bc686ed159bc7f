#include "runtime/engine/kv_manager.hpp"

#include <algorithm>
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
  return blocks_needed(id, tokens) <= static_cast<std::int64_t>(free_blocks_.size());
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

model::sequence_state* kv_manager::allocate(seq_id id, std::int64_t tokens) {
  auto it = seqs_.find(id);
  if (it != seqs_.end() && tokens <= k_.max_model_len &&
      (num_mla_ == 0 || static_cast<std::int64_t>(it->second.blocks.size()) * k_.block_size >= tokens))
    return &it->second.view; // fast path: a decode step inside the blocks it already holds
  if (!can_allocate(id, tokens)) return nullptr;
  if (it == seqs_.end()) {
    seq s{-1, {}, model::sequence_state::view(c_, k_.block_size, k_.fp32_cache)};
    s.slot = free_slots_.back();
    free_slots_.pop_back();
    // Not zeroed here: model::step zeroes the state of every sequence at position 0.
    it = seqs_.emplace(id, std::move(s)).first;
  }
  for (std::int64_t n = blocks_needed(id, tokens); n > 0; --n) {
    it->second.blocks.push_back(free_blocks_.back());
    free_blocks_.pop_back();
  }
  point(it->second);
  return &it->second.view;
}

model::sequence_state* kv_manager::state(seq_id id) {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second.view;
}

void kv_manager::release(seq_id id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  free_slots_.push_back(it->second.slot);
  for (auto b : it->second.blocks) free_blocks_.push_back(b);
  seqs_.erase(it);
}

kv_usage kv_manager::usage() const {
  kv_usage u;
  u.num_slots = num_slots_;
  u.used_slots = num_slots_ - static_cast<int>(free_slots_.size());
  u.num_blocks = num_blocks_;
  u.used_blocks = num_blocks_ - static_cast<std::int64_t>(free_blocks_.size());
  u.slot_bytes = sb_;
  u.block_bytes = bb_;
  return u;
}

} // namespace k3::engine
