// config.json parsing and validation. Every failure names the file and the dotted key path.
#include "runtime/model/config.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>

#include <simdjson.h>

namespace k3::model {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

/// A JSON object plus the path it was reached by, for messages.
class node {
public:
  node(element e, std::string path, const std::string& source) : e_(e), path_(std::move(path)), source_p_(&source) {}

  [[noreturn]] void fail(std::string_view key, const std::string& what) const {
    throw config_error(*source_p_ + ": " + full(key) + ": " + what);
  }
  [[nodiscard]] std::string full(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }

  [[nodiscard]] std::optional<element> get(std::string_view key) const {
    element v;
    if (e_[key].get(v) != simdjson::SUCCESS || v.type() == element_type::NULL_VALUE) return std::nullopt;
    return v;
  }
  [[nodiscard]] bool has(std::string_view key) const { return get(key).has_value(); }

  [[nodiscard]] std::optional<std::int64_t> opt_int(std::string_view key) const {
    auto v = get(key);
    if (!v) return std::nullopt;
    std::int64_t i;
    if (v->get(i) == simdjson::SUCCESS) return i;
    double d;
    if (v->get(d) == simdjson::SUCCESS && std::floor(d) == d) return static_cast<std::int64_t>(d);
    fail(key, "expected an integer");
  }
  [[nodiscard]] std::int64_t req_int(std::string_view key) const {
    auto v = opt_int(key);
    if (!v) fail(key, "missing (required)");
    return *v;
  }
  [[nodiscard]] int positive(std::string_view key) const {
    const auto v = req_int(key);
    if (v <= 0 || v > (1ll << 30)) fail(key, "must be a positive integer, got " + std::to_string(v));
    return static_cast<int>(v);
  }
  [[nodiscard]] int positive_or(std::string_view key, int fallback) const {
    return has(key) ? positive(key) : fallback;
  }
  [[nodiscard]] std::optional<double> opt_num(std::string_view key) const {
    auto v = get(key);
    if (!v) return std::nullopt;
    double d;
    if (v->get(d) == simdjson::SUCCESS) return d;
    std::int64_t i;
    if (v->get(i) == simdjson::SUCCESS) return static_cast<double>(i);
    fail(key, "expected a number");
  }
  [[nodiscard]] std::optional<bool> opt_bool(std::string_view key) const {
    auto v = get(key);
    if (!v) return std::nullopt;
    bool b;
    if (v->get(b) != simdjson::SUCCESS) fail(key, "expected true or false");
    return b;
  }
  [[nodiscard]] std::optional<std::string> opt_str(std::string_view key) const {
    auto v = get(key);
    if (!v) return std::nullopt;
    std::string_view s;
    if (v->get(s) != simdjson::SUCCESS) fail(key, "expected a string");
    return std::string(s);
  }
  [[nodiscard]] std::optional<node> opt_obj(std::string_view key) const {
    auto v = get(key);
    if (!v) return std::nullopt;
    if (v->type() != element_type::OBJECT) fail(key, "expected an object");
    return node(*v, full(key), *source_p_);
  }
  [[nodiscard]] std::vector<std::int64_t> int_list(std::string_view key) const {
    auto v = get(key);
    if (!v) fail(key, "missing (required)");
    simdjson::dom::array a;
    if (v->get(a) != simdjson::SUCCESS) fail(key, "expected a list of integers");
    std::vector<std::int64_t> out;
    for (auto x : a) {
      std::int64_t i;
      if (x.get(i) != simdjson::SUCCESS) fail(key, "expected a list of integers");
      out.push_back(i);
    }
    return out;
  }
  /// An id that may be an int or a list (eos_token_id); returns the first.
  [[nodiscard]] int id_or(std::string_view key, int fallback) const {
    auto v = get(key);
    if (!v) return fallback;
    simdjson::dom::array a;
    if (v->get(a) == simdjson::SUCCESS) {
      for (auto x : a) {
        std::int64_t i;
        if (x.get(i) == simdjson::SUCCESS) return static_cast<int>(i);
      }
      fail(key, "expected an integer or a list of integers");
    }
    return static_cast<int>(req_int(key));
  }

private:
  element e_;
  std::string path_;
  const std::string* source_p_;
};

void parse_quantization(const node& q, model_config& c) {
  const auto method = q.opt_str("quant_method").value_or("");
  if (method != "compressed-tensors")
    q.fail("quant_method", "'" + method + "' is not supported (only compressed-tensors mxfp4-pack-quantized)");
  const auto format = q.opt_str("format").value_or("");
  if (format != "mxfp4-pack-quantized")
    q.fail("format", "'" + format + "' is not supported (only mxfp4-pack-quantized)");
  if (auto w = q.opt_obj("weights")) {
    if (auto bits = w->opt_int("num_bits"); bits && *bits != 4) w->fail("num_bits", "must be 4 for MXFP4");
    if (auto gs = w->opt_int("group_size"); gs && *gs != 32) w->fail("group_size", "must be 32 for MXFP4");
  }
  c.experts_mxfp4 = true;
}

void parse_layers(const node& la, model_config& c) {
  const int L = c.num_layers;
  c.layer_is_kda.assign(L, false);
  std::vector<int> seen(L, 0);
  for (const char* key : {"kda_layers", "full_attn_layers"}) {
    const bool kda = std::string_view(key) == "kda_layers";
    for (auto one_based : la.int_list(key)) {
      if (one_based < 1 || one_based > L)
        la.fail(key, "layer " + std::to_string(one_based) + " is outside 1.." + std::to_string(L) +
                         " (the lists are 1-based)");
      const int i = static_cast<int>(one_based - 1);
      if (seen[i]++) la.fail(key, "layer " + std::to_string(one_based) + " is listed twice or in both lists");
      c.layer_is_kda[i] = kda;
    }
  }
  for (int i = 0; i < L; ++i)
    if (!seen[i])
      la.fail("kda_layers", "layer " + std::to_string(i + 1) + " is in neither kda_layers nor full_attn_layers");
}

} // namespace

int model_config::num_kda_layers() const noexcept {
  return static_cast<int>(std::count(layer_is_kda.begin(), layer_is_kda.end(), true));
}
int model_config::num_moe_layers() const noexcept {
  return static_cast<int>(std::count(layer_is_moe.begin(), layer_is_moe.end(), true));
}

std::string model_config::describe() const {
  std::ostringstream s;
  s << (fam == family::kimi_k3 ? "kimi_k3" : "kimi_linear") << ": " << num_layers << " layers (" << num_kda_layers()
    << " KDA + " << num_layers - num_kda_layers() << " MLA, " << num_moe_layers() << " MoE), hidden " << hidden
    << ", heads " << kda_heads << "/" << mla_heads << ", experts " << num_experts << " top-" << top_k << " inter "
    << moe_inter;
  if (routed_hidden) s << " latent " << routed_hidden;
  s << (experts_mxfp4 ? " (MXFP4)" : " (bf16)") << ", vocab " << vocab;
  if (attn_res()) s << ", AttnRes block " << attn_res_block;
  s << (act == activation::situ ? ", SiTU" : ", SiLU");
  if (bounded_gate) s << ", gate lb " << gate_lower_bound;
  return s.str();
}

model_config parse_config(std::string_view json_text, const std::string& source) {
  simdjson::dom::parser parser;
  element root;
  const simdjson::padded_string padded(json_text);
  if (auto err = parser.parse(padded).get(root))
    throw config_error(source + ": not valid JSON (" + simdjson::error_message(err) + ")");
  if (root.type() != element_type::OBJECT) throw config_error(source + ": expected a JSON object");

  model_config c;
  c.source = source;
  const node outer(root, "", source);
  const auto model_type = outer.opt_str("model_type").value_or("");
  std::optional<node> text;
  if (model_type == "kimi_k3") {
    text = outer.opt_obj("text_config");
    if (!text) outer.fail("text_config", "missing (a kimi_k3 config nests the decoder in text_config)");
    const auto inner = text->opt_str("model_type").value_or("kimi_linear");
    if (inner != "kimi_linear") text->fail("model_type", "'" + inner + "' is not supported (expected kimi_linear)");
    c.fam = family::kimi_k3;
    c.tensor_prefix = "language_model.";
  } else if (model_type == "kimi_linear") {
    text = outer;
    c.fam = family::kimi_linear;
  } else {
    outer.fail("model_type", model_type.empty() ? "missing (expected kimi_k3 or kimi_linear)"
                                                : "'" + model_type + "' is not supported (expected kimi_k3 or kimi_linear)");
  }
  const node& t = *text;

  c.hidden = t.positive("hidden_size");
  c.num_layers = t.positive("num_hidden_layers");
  c.vocab = t.positive("vocab_size");
  c.rms_eps = static_cast<float>(t.opt_num("rms_norm_eps").value_or(1e-5));
  if (!(c.rms_eps > 0 && c.rms_eps < 1)) t.fail("rms_norm_eps", "must be in (0, 1)");
  c.tie_embeddings = t.opt_bool("tie_word_embeddings").value_or(outer.opt_bool("tie_word_embeddings").value_or(false));
  c.max_position = t.opt_int("max_position_embeddings").value_or(t.opt_int("model_max_length").value_or(1048576));
  if (c.max_position <= 0) t.fail("max_position_embeddings", "must be positive");
  c.bos_id = t.id_or("bos_token_id", outer.id_or("bos_token_id", -1));
  c.eos_id = t.id_or("eos_token_id", outer.id_or("eos_token_id", -1));
  c.pad_id = t.id_or("pad_token_id", outer.id_or("pad_token_id", -1));
  for (const node* where : {&outer, &t})
    for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
      if (const int id = where->id_or(key, -1); id >= c.vocab)
        where->fail(key, std::to_string(id) + " is outside the vocabulary (vocab_size " + std::to_string(c.vocab) + ")");
  c.num_nextn_predict_layers = static_cast<int>(t.opt_int("num_nextn_predict_layers").value_or(0));

  // ---- layer schedule and KDA --------------------------------------------------------------
  auto la = t.opt_obj("linear_attn_config");
  if (!la) t.fail("linear_attn_config", "missing (required: Kimi Linear models mix KDA and MLA layers)");
  parse_layers(*la, c);
  c.kda_heads = la->positive("num_heads");
  c.kda_head_dim = la->positive_or("head_dim", 128);
  c.conv_kernel = la->positive_or("short_conv_kernel_size", 4);
  if (c.conv_kernel > 16) la->fail("short_conv_kernel_size", "must be at most 16");
  c.full_rank_gate = la->opt_bool("use_full_rank_gate").value_or(false);
  if (auto lb = la->opt_num("gate_lower_bound")) {
    if (!(*lb < 0)) la->fail("gate_lower_bound", "must be negative, got " + std::to_string(*lb));
    c.bounded_gate = true;
    c.gate_lower_bound = static_cast<float>(*lb);
  }

  // ---- MLA -----------------------------------------------------------------------------------
  c.mla_heads = t.positive("num_attention_heads");
  if (auto kv = t.opt_int("num_key_value_heads"); kv && *kv != c.mla_heads)
    t.fail("num_key_value_heads", "must equal num_attention_heads (MLA shares one latent)");
  if (auto q = t.opt_int("q_lora_rank")) {
    if (*q <= 0) t.fail("q_lora_rank", "must be positive or null");
    c.q_lora_rank = static_cast<int>(*q);
  }
  c.kv_lora_rank = t.positive_or("kv_lora_rank", 512);
  c.qk_nope = t.positive_or("qk_nope_head_dim", 128);
  c.qk_rope = t.positive_or("qk_rope_head_dim", 64);
  c.v_head_dim = t.positive_or("v_head_dim", 128);
  if (!t.opt_bool("mla_use_nope").value_or(true))
    t.fail("mla_use_nope", "false (rotary MLA) is not supported; Kimi models are NoPE");
  c.mla_output_gate = t.opt_bool("mla_use_output_gate").value_or(false);

  // ---- FFN -----------------------------------------------------------------------------------
  const auto act = t.opt_str("hidden_act").value_or("silu");
  if (act == "silu") {
    c.act = activation::silu;
  } else if (act == "situ") {
    c.act = activation::situ;
    c.situ_beta = static_cast<float>(t.opt_num("activation_situ_beta").value_or(4.0));
    if (!(c.situ_beta > 0)) t.fail("activation_situ_beta", "must be positive");
    c.situ_linear_beta = static_cast<float>(t.opt_num("activation_situ_linear_beta").value_or(0.0));
  } else {
    t.fail("hidden_act", "'" + act + "' is not supported (expected silu or situ)");
  }

  const int first_dense = static_cast<int>(t.opt_int("first_k_dense_replace").value_or(0));
  if (first_dense < 0) t.fail("first_k_dense_replace", "must be ≥ 0");
  const int freq = t.positive_or("moe_layer_freq", 1);
  c.layer_is_moe.assign(c.num_layers, false);
  if (t.has("num_experts")) {
    c.num_experts = t.positive("num_experts");
    c.top_k = t.positive("num_experts_per_token");
    if (c.top_k > c.num_experts) t.fail("num_experts_per_token", "exceeds num_experts");
    c.moe_inter = t.positive("moe_intermediate_size");
    c.num_shared = static_cast<int>(t.opt_int("num_shared_experts").value_or(0));
    if (c.num_shared < 0) t.fail("num_shared_experts", "must be ≥ 0");
    for (int i = 0; i < c.num_layers; ++i) c.layer_is_moe[i] = i >= first_dense && i % freq == 0;
    if (auto fn = t.opt_str("moe_router_activation_func"); fn && *fn != "sigmoid")
      t.fail("moe_router_activation_func", "'" + *fn + "' is not supported (expected sigmoid)");
    if (auto m = t.opt_str("topk_method"); m && *m != "noaux_tc" && *m != "greedy" && *m != "group_limited_greedy")
      t.fail("topk_method", "'" + *m + "' is not supported (expected noaux_tc)");
    c.renormalize = t.opt_bool("moe_renormalize").value_or(true);
    c.routed_scaling = static_cast<float>(t.opt_num("routed_scaling_factor").value_or(1.0));
    if (!(c.routed_scaling > 0)) t.fail("routed_scaling_factor", "must be positive");
    if (t.opt_bool("use_grouped_topk").value_or(false)) {
      c.num_expert_groups = t.positive_or("num_expert_group", 1);
      c.topk_group = t.positive_or("topk_group", 1);
    }
    if (c.num_experts % c.num_expert_groups) t.fail("num_expert_group", "must divide num_experts");
    if (c.topk_group > c.num_expert_groups) t.fail("topk_group", "exceeds num_expert_group");
    if (t.has("routed_expert_hidden_size")) {
      c.routed_hidden = t.positive("routed_expert_hidden_size");
      c.latent_norm = t.opt_bool("latent_moe_use_norm").value_or(false);
    }
  }
  if (std::find(c.layer_is_moe.begin(), c.layer_is_moe.end(), false) != c.layer_is_moe.end())
    c.dense_inter = t.positive("intermediate_size");

  if (t.has("attn_res_block_size")) c.attn_res_block = t.positive("attn_res_block_size");

  if (auto q = outer.opt_obj("quantization_config")) parse_quantization(*q, c);
  else if (auto q2 = t.opt_obj("quantization_config")) parse_quantization(*q2, c);
  if (c.experts_mxfp4) {
    if (c.num_experts == 0) t.fail("quantization_config", "MXFP4 experts need num_experts");
    if (c.expert_width() % 32)
      t.fail(c.routed_hidden ? "routed_expert_hidden_size" : "hidden_size", "must be a multiple of 32 for MXFP4 experts");
    if (c.moe_inter % 32) t.fail("moe_intermediate_size", "must be a multiple of 32 for MXFP4 experts");
  }
  return c;
}

model_config load_config(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) throw config_error(path + ": cannot open (is this a model directory?)");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), path);
}

} // namespace k3::model
