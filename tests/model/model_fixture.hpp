#pragma once
// Test fixtures for the model runtime: checkpoints made by make_model (the real layout) in a
// per-process temporary directory, and a shard rewriter for corruption tests.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include "runtime/model/make_model.hpp"
#include "runtime/model/safetensors.hpp"

namespace k3::test {

/// A fresh directory under the system temp dir, removed on destruction.
class temp_dir {
public:
  explicit temp_dir(const std::string& tag) {
    path_ = std::filesystem::temp_directory_path() / ("k3test_" + std::to_string(::getpid()) + "_" + tag);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~temp_dir() { std::filesystem::remove_all(path_); }
  [[nodiscard]] std::string str() const { return path_.string(); }
  [[nodiscard]] std::filesystem::path path() const { return path_; }

private:
  std::filesystem::path path_;
};

/// Small options that still exercise every K3 feature (AttnRes banking twice, MLA, MoE, dense).
inline model::make_model_options tiny_options(model::family f) {
  model::make_model_options o;
  o.fam = f;
  o.layers = 5;      // KDA, KDA, KDA, MLA, MLA (1-based 4 and the last)
  o.hidden = 128;
  o.heads = 2;
  o.kda_head_dim = 32;
  o.experts = 6;
  o.top_k = 2;
  o.moe_inter = 64;
  o.latent = 64;
  o.shared = 1;
  o.dense_inter = 192;
  o.vocab = 768;
  o.q_lora_rank = 48;
  o.kv_lora_rank = 32;
  o.qk_nope = 16;
  o.qk_rope = 8;
  o.v_head_dim = 16;
  o.attn_res_block = 2;
  o.seed = 7;
  return o;
}

/// One tensor of a rewritten shard: raw bytes plus the header fields, which tests may falsify.
struct raw_tensor {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
  std::int64_t offset_shift = 0; ///< added to both data offsets in the header (out-of-range tests)
};

/// Reads every tensor of a single-shard checkpoint in `dir`.
std::vector<raw_tensor> read_all(const std::string& dir);
/// Writes `tensors` as the single shard of `dir` (same file name) and a matching index.
void write_all(const std::string& dir, const std::vector<raw_tensor>& tensors);

} // namespace k3::test
