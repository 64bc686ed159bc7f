#pragma once
// What the simulator needs to know about a model: parameter counts by part, per-sequence state
// and per-token cache sizes, native weight dtypes. Built from the same model::model_config the
// runtime loads (Kimi K3, Kimi Linear) or from a DeepSeek-V3-architecture config.json
// (DeepSeek-V3/R1, Kimi K2: all layers MLA, FP8 block-quantized weights) for validation
// against published large-scale EP numbers. Counts are exact from the config (same tensors as
// `k3 make-model` writes); K3 gives 1,560.9 GB of checkpoint, 1,446.6 GB of it routed experts.

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/model/config.hpp"

namespace k3::sim {

enum class wdtype { bf16, fp8, mxfp4 };
/// Bytes per weight including scales: bf16 2; fp8 1 + one fp32 scale per 128×128 block;
/// mxfp4 0.5 + one E8M0 byte per 32 (17/32).
[[nodiscard]] double bytes_per_param(wdtype t);
[[nodiscard]] const char* to_string(wdtype t);

struct model_desc {
  std::string name;    ///< "kimi_k3: 93 layers …"
  std::string arch;    ///< "kimi_k3", "kimi_linear", "deepseek_v3"
  int hidden = 0, vocab = 0, layers = 0;
  int n_kda = 0, n_mla = 0, n_dense = 0, n_moe = 0;
  // Parameters per layer of each kind (trunk weights, read once per step).
  double kda_params = 0;       ///< one KDA mixer (projections, gates, conv)
  double mla_params = 0;       ///< one MLA mixer
  double dense_ffn_params = 0; ///< one dense MLP layer
  double moe_trunk_params = 0; ///< router + shared experts + latent projections of one MoE layer
  double expert_params = 0;    ///< one routed expert (w1, w2, w3)
  double embed_params = 0, head_params = 0;
  int experts = 0, top_k = 0, expert_width = 0, moe_inter = 0;
  int kda_heads = 0, kda_dim = 128, conv_kernel = 4;
  int mla_heads = 0, kv_lora = 512, qk_rope = 64, qk_nope = 128, v_dim = 128;
  wdtype trunk_dtype = wdtype::bf16, expert_dtype = wdtype::bf16; ///< as stored in the checkpoint
  std::int64_t max_position = 0;

  [[nodiscard]] double trunk_params() const; ///< every non-expert weight except the embedding
  [[nodiscard]] double total_params() const;
  [[nodiscard]] double active_params() const; ///< per token: trunk + top_k experts per MoE layer
  [[nodiscard]] double checkpoint_bytes() const;
  [[nodiscard]] double expert_bytes(wdtype t) const { return expert_params * bytes_per_param(t); }
  /// fp32 KDA recurrent state of one layer, all heads.
  [[nodiscard]] double kda_state_bytes() const { return 4.0 * kda_heads * kda_dim * kda_dim; }
  /// bf16 short-conv state of one layer (q, k, v × (K−1) columns).
  [[nodiscard]] double conv_state_bytes() const { return 2.0 * 3 * kda_heads * kda_dim * (conv_kernel - 1); }
  /// Latent cache row of one MLA layer ([c_kv | k_rope]) in elements.
  [[nodiscard]] int mla_row() const { return kv_lora + qk_rope; }
  [[nodiscard]] std::string describe() const;
};

[[nodiscard]] model_desc describe_model(const model::model_config& c);
/// config.json text of any supported architecture; throws sim_error / config_error naming `source`.
[[nodiscard]] model_desc parse_model_desc(std::string_view json_text, const std::string& source);
/// A built-in config ("kimi-k3", "kimi-linear-48b", "kimi-k2", "deepseek-v3"), a config.json
/// path, or a checkpoint directory holding config.json.
[[nodiscard]] model_desc load_model_desc(const std::string& name_or_path);

} // namespace k3::sim
