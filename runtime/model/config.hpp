#pragma once
// Model configuration parsed from a Hugging Face `config.json` (spec model.md §2, §3, §12.8).
//
// Two families are accepted:
//   * Kimi K3: outer `model_type: kimi_k3` whose `text_config` (`model_type: kimi_linear`)
//     describes the decoder; text tensors live under `language_model.`; routed experts are
//     compressed-tensors MXFP4 (`quantization_config`, top level or inside text_config).
//   * Kimi Linear: flat `model_type: kimi_linear`; tensors under `model.` / `lm_head`.
// Features are detected from keys, not from the family name (warp's table): gate_lower_bound →
// bounded KDA gate, use_full_rank_gate → g_proj, routed_expert_hidden_size → latent MoE,
// hidden_act situ → SiTU, attn_res_block_size → Block AttnRes, q_lora_rank → low-rank MLA query.
//
// parse_config() validates everything the forward pass relies on and throws config_error whose
// message names the file and the key ("config.json: text_config.linear_attn_config.kda_layers:
// layer 5 is listed twice"). The struct is a plain value, immutable after parsing.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace k3::model {

struct config_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class family { kimi_linear, kimi_k3 };
enum class activation { silu, situ };

struct model_config {
  family fam = family::kimi_linear;
  std::string tensor_prefix;    ///< "language_model." for K3 (text_config present), else ""
  std::string source;           ///< file the config came from (for messages)

  int hidden = 0;               ///< hidden_size
  int num_layers = 0;           ///< num_hidden_layers
  int vocab = 0;                ///< vocab_size
  float rms_eps = 1e-5f;        ///< rms_norm_eps
  bool tie_embeddings = false;  ///< tie_word_embeddings (lm_head = embed_tokens)
  std::int64_t max_position = 1048576;
  int bos_id = -1, eos_id = -1, pad_id = -1;

  // Layer schedule (0-based, derived from the 1-based lists).
  std::vector<bool> layer_is_kda; ///< true: KDA mixer, false: MLA
  std::vector<bool> layer_is_moe; ///< true: MoE FFN, false: dense MLP

  // KDA (linear_attn_config)
  int kda_heads = 0;             ///< num_heads
  int kda_head_dim = 128;        ///< head_dim (dk = dv)
  int conv_kernel = 4;           ///< short_conv_kernel_size
  bool full_rank_gate = false;   ///< use_full_rank_gate: output gate g_proj instead of g_a/g_b
  bool bounded_gate = false;     ///< gate_lower_bound present
  float gate_lower_bound = -5.0f;

  // MLA
  int mla_heads = 0;             ///< num_attention_heads
  int q_lora_rank = 0;           ///< 0 when null (Kimi Linear: direct q_proj)
  int kv_lora_rank = 512;
  int qk_nope = 128, qk_rope = 64, v_head_dim = 128;
  bool mla_output_gate = false;  ///< mla_use_output_gate

  // FFN
  activation act = activation::silu;
  float situ_beta = 4.0f, situ_linear_beta = 25.0f;
  int dense_inter = 0;           ///< intermediate_size (dense layers)
  int num_experts = 0, top_k = 0;
  int moe_inter = 0;             ///< moe_intermediate_size (per routed expert)
  int num_shared = 0;            ///< num_shared_experts (one fused MLP of num_shared·moe_inter)
  int routed_hidden = 0;         ///< routed_expert_hidden_size: 0 = experts work at full width
  bool latent_norm = false;      ///< latent_moe_use_norm
  bool renormalize = true;       ///< moe_renormalize
  float routed_scaling = 1.0f;   ///< routed_scaling_factor
  int num_expert_groups = 1, topk_group = 1;
  bool experts_mxfp4 = false;    ///< quantization_config: compressed-tensors mxfp4-pack-quantized

  int attn_res_block = 0;        ///< attn_res_block_size (0 = plain residual stream)
  int num_nextn_predict_layers = 0;

  [[nodiscard]] int kda_proj() const noexcept { return kda_heads * kda_head_dim; }
  [[nodiscard]] int expert_width() const noexcept { return routed_hidden > 0 ? routed_hidden : hidden; }
  [[nodiscard]] int shared_inter() const noexcept { return num_shared * moe_inter; }
  [[nodiscard]] int num_kda_layers() const noexcept;
  [[nodiscard]] int num_moe_layers() const noexcept;
  [[nodiscard]] bool attn_res() const noexcept { return attn_res_block > 0; }
  /// One-line human summary ("kimi_k3: 8 layers (6 KDA + 2 MLA), hidden 1024, ...").
  [[nodiscard]] std::string describe() const;
};

/// Parses config.json text. `source` names the file in error messages.
[[nodiscard]] model_config parse_config(std::string_view json_text, const std::string& source);

/// Reads and parses `<model_dir>/config.json`.
[[nodiscard]] model_config load_config(const std::string& model_dir);

} // namespace k3::model
