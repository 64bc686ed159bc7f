#include "runtime/sim/model_desc.hpp"

#include <filesystem>

#include "runtime/sim/builtin.hpp"
#include "runtime/sim/io_util.hpp"
#include "runtime/sim/sim_error.hpp"

namespace k3::sim {

double bytes_per_param(wdtype t) {
  switch (t) {
  case wdtype::bf16: return 2.0;
  case wdtype::fp8: return 1.0 + 4.0 / (128.0 * 128.0);
  case wdtype::mxfp4: return 17.0 / 32.0;
  }
  return 2.0;
}

const char* to_string(wdtype t) {
  switch (t) {
  case wdtype::bf16: return "bf16";
  case wdtype::fp8: return "fp8";
  case wdtype::mxfp4: return "mxfp4";
  }
  return "?";
}

double model_desc::trunk_params() const {
  return n_kda * kda_params + n_mla * mla_params + n_dense * dense_ffn_params + n_moe * moe_trunk_params + head_params;
}
double model_desc::total_params() const { return trunk_params() + embed_params + double(n_moe) * experts * expert_params; }
double model_desc::active_params() const { return trunk_params() + double(n_moe) * top_k * expert_params; }
double model_desc::checkpoint_bytes() const {
  // Embedding and lm_head stay bf16 in every supported checkpoint.
  return (trunk_params() - head_params) * bytes_per_param(trunk_dtype) + (embed_params + head_params) * 2.0 +
         double(n_moe) * experts * expert_bytes(expert_dtype);
}

std::string model_desc::describe() const {
  char buf[320];
  std::snprintf(buf, sizeof buf, "%s: %d layers (%d KDA + %d MLA; %d MoE), hidden %d, %d experts top-%d, %.1fB params (%.1fB active), checkpoint %.1f GB",
                arch.c_str(), layers, n_kda, n_mla, n_moe, hidden, experts, top_k, total_params() / 1e9, active_params() / 1e9,
                checkpoint_bytes() / 1e9);
  return buf;
}

model_desc describe_model(const model::model_config& c) {
  model_desc d;
  d.arch = c.fam == model::family::kimi_k3 ? "kimi_k3" : "kimi_linear";
  d.hidden = c.hidden;
  d.vocab = c.vocab;
  d.layers = c.num_layers;
  d.n_kda = c.num_kda_layers();
  d.n_mla = c.num_layers - d.n_kda;
  d.n_moe = c.num_moe_layers();
  d.n_dense = c.num_layers - d.n_moe;
  const double H = c.hidden, P = c.kda_proj(), hd = c.kda_head_dim;
  d.kda_params = 3 * P * H + 3 * P * c.conv_kernel + hd * H + P * hd + c.kda_heads * H + H * P +
                 (c.full_rank_gate ? P * H : hd * H + P * hd);
  const double qd = c.qk_nope + c.qk_rope;
  d.mla_params = (c.q_lora_rank > 0 ? c.q_lora_rank * H + double(c.mla_heads) * qd * c.q_lora_rank : double(c.mla_heads) * qd * H) +
                 double(c.kv_lora_rank + c.qk_rope) * H + double(c.mla_heads) * (c.qk_nope + c.v_head_dim) * c.kv_lora_rank +
                 H * c.mla_heads * c.v_head_dim + (c.mla_output_gate ? double(c.mla_heads) * c.v_head_dim * H : 0);
  d.dense_ffn_params = 3.0 * c.dense_inter * H;
  const double X = c.expert_width();
  d.moe_trunk_params = double(c.num_experts) * H + 3.0 * c.shared_inter() * H + (c.routed_hidden > 0 ? 2 * X * H : 0);
  d.expert_params = 3.0 * c.moe_inter * X;
  d.embed_params = double(c.vocab) * H;
  d.head_params = c.tie_embeddings ? 0 : double(c.vocab) * H;
  d.experts = c.num_experts;
  d.top_k = c.top_k;
  d.expert_width = static_cast<int>(X);
  d.moe_inter = c.moe_inter;
  d.kda_heads = c.kda_heads;
  d.kda_dim = c.kda_head_dim;
  d.conv_kernel = c.conv_kernel;
  d.mla_heads = c.mla_heads;
  d.kv_lora = c.kv_lora_rank;
  d.qk_rope = c.qk_rope;
  d.qk_nope = c.qk_nope;
  d.v_dim = c.v_head_dim;
  d.trunk_dtype = wdtype::bf16;
  d.expert_dtype = c.experts_mxfp4 ? wdtype::mxfp4 : wdtype::bf16;
  d.max_position = c.max_position;
  d.name = c.describe();
  return d;
}

namespace {

// DeepSeek-V3 architecture (DeepSeek-V3/R1, Kimi K2): every layer MLA with rotary q/k, the
// first `first_k_dense_replace` layers dense, FP8 block-quantized linear weights.
model_desc parse_deepseek(const json::value& doc, const std::string& src) {
  auto num = [&](std::string_view k) { return json_number(json_member(doc, k, src), src + ": " + std::string(k)); };
  auto opt = [&](std::string_view k, double def) {
    const auto* v = doc.find(k);
    return v && v->k != json::value::kind::null ? json_number(*v, src + ": " + std::string(k)) : def;
  };
  model_desc d;
  d.arch = "deepseek_v3";
  d.hidden = static_cast<int>(num("hidden_size"));
  d.layers = static_cast<int>(num("num_hidden_layers"));
  d.vocab = static_cast<int>(num("vocab_size"));
  d.mla_heads = static_cast<int>(num("num_attention_heads"));
  d.kv_lora = static_cast<int>(num("kv_lora_rank"));
  d.qk_rope = static_cast<int>(num("qk_rope_head_dim"));
  d.qk_nope = static_cast<int>(num("qk_nope_head_dim"));
  d.v_dim = static_cast<int>(num("v_head_dim"));
  const double q_lora = opt("q_lora_rank", 0);
  d.experts = static_cast<int>(num("n_routed_experts"));
  d.top_k = static_cast<int>(num("num_experts_per_tok"));
  d.moe_inter = static_cast<int>(num("moe_intermediate_size"));
  const double shared = opt("n_shared_experts", 0);
  const int first_dense = static_cast<int>(opt("first_k_dense_replace", 0));
  const double dense_inter = num("intermediate_size");
  d.max_position = static_cast<std::int64_t>(opt("max_position_embeddings", 131072));
  if (d.hidden <= 0 || d.layers <= 0 || d.experts <= 0 || d.top_k <= 0 || d.top_k > d.experts || first_dense > d.layers)
    throw sim_error(src + ": inconsistent sizes (hidden_size, num_hidden_layers, n_routed_experts, num_experts_per_tok, first_k_dense_replace)");
  d.n_mla = d.layers;
  d.n_dense = first_dense;
  d.n_moe = d.layers - first_dense;
  const double H = d.hidden, qd = d.qk_nope + d.qk_rope;
  d.mla_params = (q_lora > 0 ? q_lora * H + d.mla_heads * qd * q_lora : d.mla_heads * qd * H) + double(d.kv_lora + d.qk_rope) * H +
                 double(d.mla_heads) * (d.qk_nope + d.v_dim) * d.kv_lora + H * d.mla_heads * d.v_dim;
  d.dense_ffn_params = 3.0 * dense_inter * H;
  d.moe_trunk_params = double(d.experts) * H + 3.0 * shared * d.moe_inter * H;
  d.expert_width = d.hidden;
  d.expert_params = 3.0 * d.moe_inter * H;
  d.embed_params = double(d.vocab) * H;
  d.head_params = double(d.vocab) * H;
  const auto* q = doc.find("quantization_config");
  const bool fp8 = q && q->find("quant_method") && q->find("quant_method")->s == "fp8";
  d.trunk_dtype = d.expert_dtype = fp8 ? wdtype::fp8 : wdtype::bf16;
  const auto* mt = doc.find("model_type");
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s: %d layers (all MLA; %d MoE), hidden %d, %d heads, %d experts top-%d",
                mt && mt->is_string() ? mt->s.c_str() : "deepseek_v3", d.layers, d.n_moe, d.hidden, d.mla_heads, d.experts, d.top_k);
  d.name = buf;
  return d;
}

} // namespace

model_desc parse_model_desc(std::string_view text, const std::string& src) {
  const json::value doc = parse_json(text, src);
  const auto* mt = doc.find("model_type");
  if (!mt || !mt->is_string()) throw sim_error(src + ": model_type: missing");
  if (mt->s == "deepseek_v3" || mt->s == "kimi_k2") return parse_deepseek(doc, src);
  if (mt->s == "kimi_k3" || mt->s == "kimi_linear") return describe_model(model::parse_config(text, src));
  throw sim_error(src + ": model_type '" + mt->s + "' is not supported by the simulator (kimi_k3, kimi_linear, deepseek_v3, kimi_k2)");
}

model_desc load_model_desc(const std::string& name) {
  if (auto t = builtin("models", name)) return parse_model_desc(*t, "config/models/" + lower(name) + ".json");
  std::error_code ec;
  std::string path = name;
  if (std::filesystem::is_directory(name, ec)) path = (std::filesystem::path(name) / "config.json").string();
  if (!is_file(path))
    throw sim_error("model '" + name + "': neither a built-in config (" + builtin_list("models") + ") nor a config.json / checkpoint directory");
  return parse_model_desc(read_text_file(path, "model config"), path);
}

} // namespace k3::sim
