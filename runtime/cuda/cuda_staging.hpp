#pragma once
// Internal to runtime/cuda: the per-step host staging and device scratch of cuda_model, shared
// by the step driver (cuda_model.cpp) and the layer bodies (cuda_layers.cpp). Not a public API.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/cuda/moe.cuh"
#include "runtime/cuda/cuda_check.hpp"
#include "runtime/cuda/cuda_model.hpp"

namespace k3::gpu {

struct cuda_model::staging {
  enum buf : int {
    x, xn, mix, att, ffn, bank, q, k, v, f, graw, g, beta, o, og, qa, qn, qr, ckv, gate, lat, y, sh, up, logits, head,
    router, ids, wts, moe, num_bufs
  };
  device_scratch bufs[num_bufs];
  float* get(buf b, std::int64_t floats) { return bufs[b].as<float>(static_cast<std::size_t>(std::max<std::int64_t>(floats, 1))); }

  // Host layout of the pinned buffer: 8-byte words, sections addressed by word offset.
  std::vector<std::uint64_t> host;
  std::shared_ptr<void> pinned, device;
  std::size_t pinned_words = 0, device_words = 0;
  std::uint64_t* dev_base = nullptr;
  cudaEvent_t copied = nullptr; // the last staging upload has left the pinned buffer
  cudaEvent_t copied_ar = nullptr, reduced = nullptr; // all-reduce ordering with the comm stream
  std::size_t take(std::size_t words) {
    const std::size_t at = host.size();
    host.resize(at + words, 0);
    return at;
  }
  template <class T>
  T* dev(std::size_t word) const {
    return reinterpret_cast<T*>(dev_base + word);
  }

  // Batch description (host).
  std::int64_t n = 0;
  std::vector<std::int64_t> off, len, pos0;
  std::vector<model::sequence_state*> seq;
  // Sections (word offsets).
  std::size_t ids_at = 0, rows_at = 0, tok_table_at = 0, tok_pos_at = 0, kda_at = 0, conv_at = 0, cu_at = 0,
              entry_table_at = 0, entry_ctx_at = 0;
  std::vector<std::size_t> seq_table_at; // per entry: its layer-0 block table
  std::int64_t layer_offset = 0;         // elements between MLA layers' rows inside a block
  int block_size = 64;
  // Router choices copied back for the expert counts: [moe layer][n · k] int32.
  std::shared_ptr<void> ids_host;
  std::size_t ids_host_bytes = 0;
  std::int64_t counted_n = 0; // tokens of the step whose ids sit in ids_host
  cuda::moe_workspace* moe_ws = nullptr;
  std::unique_ptr<cuda::moe_workspace> moe_ws_own;
};

} // namespace k3::gpu
