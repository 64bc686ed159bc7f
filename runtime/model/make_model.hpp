#pragma once
// Random-weight checkpoints in the exact Hugging Face layout (`k3 make-model`): config.json,
// sharded safetensors + model.safetensors.index.json, tiktoken.model, tokenizer_config.json,
// generation_config.json — for Kimi K3 (outer kimi_k3 + text_config, language_model. prefix,
// compressed-tensors MXFP4 routed experts, padded A_log, AttnRes, latent MoE, SiTU, bounded
// gate, full-rank KDA gate, MLA output gate) or Kimi Linear (flat kimi_linear, bf16 experts).
// The same loader real checkpoints use reads them, so they are the demo model and the test
// fixture. Deterministic in (options, seed): every tensor is drawn from a stream keyed by its
// name, independent of write order and thread count. Weights are scaled by fan-in so hidden
// activations stay O(1) through the layers.

#include <cstdint>
#include <string>

#include "runtime/model/config.hpp"

namespace k3::model {

struct make_model_options {
  family fam = family::kimi_k3;
  int layers = 4;          ///< num_hidden_layers; MLA at every 4th (1-based) and the last layer
  int hidden = 256;
  int heads = 4;           ///< KDA heads = MLA heads
  int kda_head_dim = 64;
  int experts = 8;
  int top_k = 2;
  int moe_inter = 128;     ///< per routed expert
  int latent = 128;        ///< routed_expert_hidden_size (K3 only)
  int shared = 1;          ///< num_shared_experts
  int dense_inter = 512;   ///< layer-0 MLP
  int vocab = 2048;        ///< total, including the 256 special ids
  int q_lora_rank = 64;    ///< K3 only (Kimi Linear has q_lora_rank null)
  int kv_lora_rank = 64;
  int qk_nope = 32, qk_rope = 16, v_head_dim = 32;
  int attn_res_block = 2;  ///< K3 only
  bool conv_2d = false;    ///< store conv weights [P, K] instead of [P, 1, K]
  int hot_experts = 0;     ///< bias the router towards experts 0..N-1 (skewed-routing studies)
  /// K3 only: also write a MoonViT tower and projector (vision_tower.*, mm_projector.*, the
  /// vision_config and preprocessor_config.json), sized by the vit_* fields.
  bool vision = false;
  int vit_hidden = 64, vit_heads = 2, vit_qkv = 64, vit_inter = 128, vit_layers = 2;
  std::uint64_t seed = 0;
  std::int64_t max_shard_bytes = 512ll << 20;
  bool progress = false;

  /// nullopt-style check: empty string if valid, else the message naming the flag.
  [[nodiscard]] std::string validate() const;
};

/// Writes the checkpoint into `dir`. Throws std::invalid_argument for bad options.
void make_model(const make_model_options& o, const std::string& dir);

/// Bytes the checkpoint's tensors will take (for sizing flags before writing).
[[nodiscard]] std::int64_t checkpoint_bytes(const make_model_options& o);

} // namespace k3::model
