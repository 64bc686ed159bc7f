#pragma once
// Writes a sharded safetensors checkpoint in the Hugging Face layout:
//   model-00001-of-0000N.safetensors …  +  model.safetensors.index.json
// (index: {"metadata": {"total_size": bytes}, "weight_map": {tensor: file}}). Tensors are
// produced by a fill callback at write time, so multi-GB checkpoints never sit in memory.
// Headers are padded with spaces to 8-byte alignment, as the reference writer does.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/model/safetensors.hpp"

namespace k3::model {

struct tensor_spec {
  std::string name;
  dtype type = dtype::bf16;
  std::vector<std::int64_t> shape;
  std::function<void(std::uint8_t* dst)> fill; ///< writes exactly nbytes() bytes
  [[nodiscard]] std::int64_t nbytes() const noexcept;
};

/// Writes the shards (a new shard starts when the current one would exceed max_shard_bytes)
/// and the index into `dir` (created if needed). Returns the number of shards.
int write_checkpoint(const std::string& dir, const std::vector<tensor_spec>& tensors, std::int64_t max_shard_bytes,
                     bool progress);

} // namespace k3::model
