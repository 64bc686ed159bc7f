// The host tier of the prefix cache (kv_config::host_tier_bytes): evicted blocks and
// checkpoints copied to host memory, its own LRU, pins while a hit brings them back.
#include "runtime/engine/kv_manager.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace k3::engine {

char* kv_manager::device_region(std::int32_t b) const noexcept {
  return reinterpret_cast<char*>(blocks_ + static_cast<std::size_t>(b) * num_mla_ * block_elems_);
}

char* kv_manager::host_region(std::int32_t b) const noexcept {
  return static_cast<char*>(host_mem_.get()) + static_cast<std::size_t>(b) * region_;
}

void kv_manager::copy_bytes(void* dst, const void* src, std::size_t n) const {
  if (k_.copy) k_.copy(dst, src, n);
  else std::memcpy(dst, src, n);
}

bool kv_manager::host_take(std::int64_t n, std::vector<std::int32_t>& out) {
  if (n > host_blocks_) return false;
  while (static_cast<std::int64_t>(host_free_.size()) < n) {
    // Oldest unpinned entry first (pinned ones are being brought back right now).
    auto it = std::find_if(host_lru_.begin(), host_lru_.end(), [&](const auto& e) {
      return (e.first ? host_ckpts_ : host_rows_).at(e.second).pins == 0;
    });
    if (it == host_lru_.end()) return false;
    host_erase(it->first, it->second);
  }
  for (std::int64_t i = 0; i < n; ++i) {
    out.push_back(host_free_.back());
    host_free_.pop_back();
  }
  return true;
}

void kv_manager::host_erase(bool is_checkpoint, std::uint64_t hash) {
  auto& map = is_checkpoint ? host_ckpts_ : host_rows_;
  auto it = map.find(hash);
  if (it == map.end()) return;
  if (it->second.in_lru) host_lru_.erase(it->second.lru);
  for (auto b : it->second.blocks) host_free_.push_back(b);
  map.erase(it);
}

void kv_manager::host_pin(bool is_checkpoint, std::uint64_t hash, int delta) {
  auto& e = (is_checkpoint ? host_ckpts_ : host_rows_).at(hash);
  e.pins += delta;
  if (e.pins > 0 && e.in_lru) {
    host_lru_.erase(e.lru);
    e.in_lru = false;
  } else if (e.pins == 0 && !e.in_lru) {
    host_lru_.emplace_back(is_checkpoint, hash);
    e.lru = std::prev(host_lru_.end());
    e.in_lru = true;
  }
}

void kv_manager::tier_out(bool is_checkpoint, std::uint64_t hash, const std::vector<std::int32_t>& device_blocks) {
  auto& map = is_checkpoint ? host_ckpts_ : host_rows_;
  if (map.count(hash) || device_blocks.empty()) return; // already there
  host_entry e;
  if (!host_take(static_cast<std::int64_t>(device_blocks.size()), e.blocks)) return; // no room: dropped
  for (std::size_t j = 0; j < device_blocks.size(); ++j) copy_bytes(host_region(e.blocks[j]), device_region(device_blocks[j]), region_);
  host_lru_.emplace_back(is_checkpoint, hash);
  e.lru = std::prev(host_lru_.end());
  e.in_lru = true;
  map.emplace(hash, std::move(e));
  ++host_writes_;
}

} // namespace k3::engine
