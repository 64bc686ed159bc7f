// k3 make-model: random checkpoints in the real layout. See make_model.hpp.
#include "runtime/model/make_model.hpp"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <utility>

#include "kernels/common/bf16.hpp"
#include "kernels/common/parallel.hpp"
#include "kernels/sampling/sampler.hpp"
#include "runtime/model/demo_vocab.hpp"
#include "runtime/model/safetensors_writer.hpp"

namespace k3::model {
namespace {

constexpr std::int64_t chunk_elems = 1 << 18;

std::uint64_t name_seed(const std::string& name, std::uint64_t seed) {
  std::uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  return sampling::splitmix64(h).next();
}

/// Element generator: value of element i given a chunk-local stream.
using gen_fn = float (*)(sampling::splitmix64&, double a, double b);

float gen_uniform(sampling::splitmix64& r, double a, double) { return static_cast<float>((r.uniform() * 2 - 1) * a); }
float gen_around_one(sampling::splitmix64& r, double a, double) { return static_cast<float>(1 + (r.uniform() * 2 - 1) * a); }

struct builder {
  const make_model_options& o;
  std::vector<tensor_spec> specs;

  void add(const std::string& name, dtype t, std::vector<std::int64_t> shape, gen_fn g, double a, double b = 0) {
    const std::uint64_t s = name_seed(name, o.seed);
    tensor_spec spec{name, t, std::move(shape), {}};
    const std::int64_t n = spec.nbytes() / dtype_size(t);
    spec.fill = [s, n, t, g, a, b](std::uint8_t* dst) {
      parallel_for((n + chunk_elems - 1) / chunk_elems, [&](std::int64_t c) {
        sampling::splitmix64 r(s + static_cast<std::uint64_t>(c) * 0x9E3779B97F4A7C15ull);
        const std::int64_t e = std::min(n, (c + 1) * chunk_elems);
        for (std::int64_t i = c * chunk_elems; i < e; ++i) {
          const float v = g(r, a, b);
          if (t == dtype::f32) {
            std::memcpy(dst + 4 * i, &v, 4);
          } else {
            const bf16_t h = f32_to_bf16(v);
            std::memcpy(dst + 2 * i, &h, 2);
          }
        }
      });
    };
    specs.push_back(std::move(spec));
  }
  /// A linear layer [out, in] with std = 1/sqrt(in) (uniform, a = sqrt(3)·std).
  void linear(const std::string& name, std::int64_t out, std::int64_t in, double gain = 1.0) {
    add(name, dtype::bf16, {out, in}, gen_uniform, gain * std::sqrt(3.0 / static_cast<double>(in)));
  }
  void norm(const std::string& name, std::int64_t n) { add(name, dtype::bf16, {n}, gen_around_one, 0.05); }
  void custom(tensor_spec s) { specs.push_back(std::move(s)); }

  /// compressed-tensors MXFP4 pair for a [rows, cols] projection: uniform random E2M1 codes
  /// (RMS ≈ 2.93) and a power-of-two scale putting the element std near 1/sqrt(cols).
  void mxfp4(const std::string& base, std::int64_t rows, std::int64_t cols) {
    const std::uint64_t s = name_seed(base, o.seed);
    const int e0 = 127 + static_cast<int>(std::lround(std::log2(1.0 / (2.93 * std::sqrt(static_cast<double>(cols))))));
    tensor_spec p{base + ".weight_packed", dtype::u8, {rows, cols / 2}, {}};
    p.fill = [s, n = rows * cols / 2](std::uint8_t* dst) {
      parallel_for((n + 8 * chunk_elems - 1) / (8 * chunk_elems), [&](std::int64_t c) {
        sampling::splitmix64 r(s + static_cast<std::uint64_t>(c) * 0x9E3779B97F4A7C15ull);
        for (std::int64_t i = c * 8 * chunk_elems; i < std::min(n, (c + 1) * 8 * chunk_elems); i += 8) {
          const std::uint64_t v = r.next();
          std::memcpy(dst + i, &v, static_cast<std::size_t>(std::min<std::int64_t>(8, n - i)));
        }
      });
    };
    tensor_spec sc{base + ".weight_scale", dtype::u8, {rows, cols / 32}, {}};
    sc.fill = [s, e0, n = rows * cols / 32](std::uint8_t* dst) {
      sampling::splitmix64 r(~s);
      for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<std::uint8_t>(e0 - 1 + static_cast<int>(r.next() % 3));
    };
    specs.push_back(std::move(p));
    specs.push_back(std::move(sc));
  }
};

bool is_mla_layer(int i, int layers) { return (i + 1) % 4 == 0 || i == layers - 1; }

std::vector<std::pair<int, std::string>> special_names(family f) {
  if (f == family::kimi_k3)
    return {{0, "[BOS]"}, {1, "[EOS]"}, {2, "<|end_of_msg|>"}, {3, "<|open|>"}, {4, "<|close|>"}, {5, "<|sep|>"},
            {6, "[start_header_id]"}, {7, "[end_header_id]"}, {9, "[EOT]"}, {18, "<|media_begin|>"},
            {19, "<|media_content|>"}, {20, "<|media_end|>"}, {21, "<|media_pad|>"}, {65, "<osagent_mode>"},
            {254, "[UNK]"}, {255, "[PAD]"}};
  return {{0, "[BOS]"}, {1, "[EOS]"}, {2, "<|im_end|>"}, {3, "<|im_user|>"}, {4, "<|im_assistant|>"},
          {6, "<|start_header_id|>"}, {7, "<|end_header_id|>"}, {9, "[EOT]"}, {10, "<|im_system|>"},
          {11, "<|tool_calls_section_begin|>"}, {12, "<|tool_calls_section_end|>"}, {13, "<|tool_call_begin|>"},
          {14, "<|tool_call_argument_begin|>"}, {15, "<|tool_call_end|>"}, {17, "<|im_middle|>"},
          {18, "<|media_begin|>"}, {19, "<|media_content|>"}, {20, "<|media_end|>"}, {21, "<|media_pad|>"},
          {22, "<think>"}, {23, "</think>"}, {254, "[UNK]"}, {255, "[PAD]"}};
}

std::string int_list(const std::vector<int>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string text_config_json(const make_model_options& o, int base, const std::string& ind) {
  const bool k3 = o.fam == family::kimi_k3;
  std::vector<int> kda, full;
  for (int i = 0; i < o.layers; ++i) (is_mla_layer(i, o.layers) ? full : kda).push_back(i + 1);
  std::string s;
  auto kv = [&](const std::string& k, const std::string& v) { s += ind + "\"" + k + "\": " + v + ",\n"; };
  kv("architectures", "[\"KimiLinearForCausalLM\"]");
  kv("model_type", "\"kimi_linear\"");
  kv("hidden_size", std::to_string(o.hidden));
  kv("num_hidden_layers", std::to_string(o.layers));
  kv("num_attention_heads", std::to_string(o.heads));
  kv("num_key_value_heads", std::to_string(o.heads));
  kv("head_dim", std::to_string(o.v_head_dim));
  std::string la = "{\"num_heads\": " + std::to_string(o.heads) + ", \"head_dim\": " + std::to_string(o.kda_head_dim) +
                   ", \"short_conv_kernel_size\": 4, \"kda_layers\": " + int_list(kda) +
                   ", \"full_attn_layers\": " + int_list(full);
  if (k3) la += ", \"use_full_rank_gate\": true, \"gate_lower_bound\": -5.0";
  kv("linear_attn_config", la + "}");
  kv("q_lora_rank", k3 ? std::to_string(o.q_lora_rank) : "null");
  kv("kv_lora_rank", std::to_string(o.kv_lora_rank));
  kv("qk_nope_head_dim", std::to_string(o.qk_nope));
  kv("qk_rope_head_dim", std::to_string(o.qk_rope));
  kv("v_head_dim", std::to_string(o.v_head_dim));
  kv("mla_use_nope", "true");
  if (k3) kv("mla_use_output_gate", "true");
  kv("num_experts", std::to_string(o.experts));
  kv("num_experts_per_token", std::to_string(o.top_k));
  kv("moe_intermediate_size", std::to_string(o.moe_inter));
  if (k3) {
    kv("routed_expert_hidden_size", std::to_string(o.latent));
    kv("latent_moe_use_norm", "true");
  }
  kv("num_shared_experts", std::to_string(o.shared));
  kv("first_k_dense_replace", "1");
  kv("moe_layer_freq", "1");
  kv("moe_router_activation_func", "\"sigmoid\"");
  kv("topk_method", "\"noaux_tc\"");
  kv("use_grouped_topk", "true");
  kv("num_expert_group", "1");
  kv("topk_group", "1");
  kv("moe_renormalize", "true");
  kv("routed_scaling_factor", k3 ? "1.0" : "2.446");
  kv("intermediate_size", std::to_string(o.dense_inter));
  if (k3) {
    kv("hidden_act", "\"situ\"");
    kv("activation_situ_beta", "4.0");
    kv("activation_situ_linear_beta", "25.0");
    kv("attn_res_block_size", std::to_string(o.attn_res_block));
  } else {
    kv("hidden_act", "\"silu\"");
  }
  kv("rms_norm_eps", "1e-05");
  kv("max_position_embeddings", "1048576");
  kv("tie_word_embeddings", "false");
  kv("vocab_size", std::to_string(o.vocab));
  kv("bos_token_id", std::to_string(base));
  kv("eos_token_id", std::to_string(base + 2));
  kv("pad_token_id", std::to_string(base + 255));
  kv("num_nextn_predict_layers", "0");
  s += ind + "\"dtype\": \"bfloat16\"\n";
  return s;
}

void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error(p.string() + ": write failed");
}

std::vector<tensor_spec> tensor_list(const make_model_options& o) {
  const bool k3 = o.fam == family::kimi_k3;
  builder b{o, {}};
  const std::string m = k3 ? "language_model.model." : "model.";
  const std::int64_t Hd = o.hidden, H = o.heads, hd = o.kda_head_dim, P = H * hd, X = k3 ? o.latent : o.hidden;
  b.add(m + "embed_tokens.weight", dtype::bf16, {o.vocab, Hd}, gen_uniform, std::sqrt(3.0));
  b.norm(m + "norm.weight", Hd);
  b.linear(k3 ? "language_model.lm_head.weight" : "lm_head.weight", o.vocab, Hd);
  auto res = [&](const std::string& base) {
    b.norm(base + "_norm.weight", Hd);
    b.add(base + "_proj.weight", dtype::bf16, {1, Hd}, gen_uniform, std::sqrt(3.0 / static_cast<double>(Hd)));
  };
  if (k3) res(m + "output_attn_res");
  for (int i = 0; i < o.layers; ++i) {
    const std::string p = m + "layers." + std::to_string(i) + ".";
    b.norm(p + "input_layernorm.weight", Hd);
    b.norm(p + "post_attention_layernorm.weight", Hd);
    if (k3) {
      res(p + "self_attention_res");
      res(p + "mlp_res");
    }
    const std::string a = p + "self_attn.";
    if (!is_mla_layer(i, o.layers)) {
      for (const char* n : {"q_proj", "k_proj", "v_proj"}) b.linear(a + n + ".weight", P, Hd);
      for (const char* n : {"q_conv1d", "k_conv1d", "v_conv1d"}) {
        std::vector<std::int64_t> shape = o.conv_2d ? std::vector<std::int64_t>{P, 4} : std::vector<std::int64_t>{P, 1, 4};
        b.add(a + n + ".weight", k3 ? dtype::bf16 : dtype::f32, shape, gen_uniform, std::sqrt(3.0 / 4.0));
      }
      b.linear(a + "f_a_proj.weight", hd, Hd);
      b.linear(a + "f_b_proj.weight", P, hd);
      // dt = softplus(dt_bias) in [0.001, 0.1] (Mamba-style init), A in [1, 16].
      b.add(a + "dt_bias", dtype::f32, {P}, [](sampling::splitmix64& r, double, double) {
        const double dt = std::exp(std::log(0.001) + r.uniform() * (std::log(0.1) - std::log(0.001)));
        return static_cast<float>(std::log(std::expm1(dt)));
      }, 0);
      if (k3) { // K3 pads A_log to 128 entries (or the head count if larger) with exact zeros
        const std::int64_t len = std::max<std::int64_t>(128, H);
        const std::uint64_t s = name_seed(a + "A_log", o.seed);
        tensor_spec t{a + "A_log", dtype::f32, {len}, {}};
        t.fill = [s, len, H](std::uint8_t* dst) {
          sampling::splitmix64 r(s);
          for (std::int64_t j = 0; j < len; ++j) {
            const float v = j < H ? static_cast<float>(std::log(1.0 + 15.0 * r.uniform())) : 0.0f;
            std::memcpy(dst + 4 * j, &v, 4);
          }
        };
        b.custom(std::move(t));
      } else {
        b.add(a + "A_log", dtype::f32, {1, 1, H, 1}, [](sampling::splitmix64& r, double, double) {
          return static_cast<float>(std::log(1.0 + 15.0 * r.uniform()));
        }, 0);
      }
      b.linear(a + "b_proj.weight", H, Hd);
      if (k3) {
        b.linear(a + "g_proj.weight", P, Hd);
      } else {
        b.linear(a + "g_a_proj.weight", hd, Hd);
        b.linear(a + "g_b_proj.weight", P, hd);
      }
      b.add(a + "o_norm.weight", k3 ? dtype::f32 : dtype::bf16, {hd}, gen_around_one, 0.05);
      b.linear(a + "o_proj.weight", Hd, P);
    } else {
      const std::int64_t qd = o.qk_nope + o.qk_rope;
      if (k3) {
        b.linear(a + "q_a_proj.weight", o.q_lora_rank, Hd);
        b.norm(a + "q_a_layernorm.weight", o.q_lora_rank);
        b.linear(a + "q_b_proj.weight", H * qd, o.q_lora_rank);
      } else {
        b.linear(a + "q_proj.weight", H * qd, Hd);
      }
      b.linear(a + "kv_a_proj_with_mqa.weight", o.kv_lora_rank + o.qk_rope, Hd);
      b.norm(a + "kv_a_layernorm.weight", o.kv_lora_rank);
      b.linear(a + "kv_b_proj.weight", H * (o.qk_nope + o.v_head_dim), o.kv_lora_rank);
      if (k3) b.linear(a + "g_proj.weight", H * o.v_head_dim, Hd);
      b.linear(a + "o_proj.weight", Hd, H * o.v_head_dim);
    }
    if (i == 0) {
      b.linear(p + "mlp.gate_proj.weight", o.dense_inter, Hd);
      b.linear(p + "mlp.up_proj.weight", o.dense_inter, Hd);
      b.linear(p + "mlp.down_proj.weight", Hd, o.dense_inter);
      continue;
    }
    const std::string e = p + "block_sparse_moe.";
    b.linear(e + "gate.weight", o.experts, Hd);
    if (o.hot_experts > 0) { // +5 on the selection bias: these experts win top-k for nearly every token
      const std::uint64_t s = name_seed(e + "gate.e_score_correction_bias", o.seed);
      tensor_spec t{e + "gate.e_score_correction_bias", dtype::f32, {o.experts}, {}};
      t.fill = [s, n = o.experts, hot = o.hot_experts](std::uint8_t* dst) {
        sampling::splitmix64 r(s);
        for (int j = 0; j < n; ++j) {
          const float v = static_cast<float>((r.uniform() * 2 - 1) * 0.01) + (j < hot ? 5.0f : 0.0f);
          std::memcpy(dst + 4 * j, &v, 4);
        }
      };
      b.custom(std::move(t));
    } else {
      b.add(e + "gate.e_score_correction_bias", dtype::f32, {o.experts}, gen_uniform, 0.01);
    }
    for (int x = 0; x < o.experts; ++x) {
      const std::string ep = e + "experts." + std::to_string(x) + ".";
      if (k3) {
        b.mxfp4(ep + "w1", o.moe_inter, X);
        b.mxfp4(ep + "w3", o.moe_inter, X);
        b.mxfp4(ep + "w2", X, o.moe_inter);
      } else {
        b.linear(ep + "w1.weight", o.moe_inter, X);
        b.linear(ep + "w3.weight", o.moe_inter, X);
        b.linear(ep + "w2.weight", X, o.moe_inter);
      }
    }
    if (o.shared > 0) {
      const std::int64_t Ms = static_cast<std::int64_t>(o.shared) * o.moe_inter;
      b.linear(e + "shared_experts.gate_proj.weight", Ms, Hd);
      b.linear(e + "shared_experts.up_proj.weight", Ms, Hd);
      b.linear(e + "shared_experts.down_proj.weight", Hd, Ms);
    }
    if (k3) {
      b.linear(e + "routed_expert_down_proj.weight", X, Hd);
      b.linear(e + "routed_expert_up_proj.weight", Hd, X);
      b.norm(e + "routed_expert_norm.weight", X);
    }
  }
  if (k3 && o.vision) {
    // MoonViT3d in the real layout (spec vision.md §2); bf16, no biases.
    const std::int64_t D = o.vit_hidden, Q = o.vit_qkv, M = 4ll * o.vit_hidden;
    b.add("vision_tower.patch_embed.proj.weight", dtype::bf16, {D, 3, 14, 14}, gen_uniform, std::sqrt(3.0 / 588.0));
    b.add("vision_tower.patch_embed.pos_emb.weight", dtype::bf16, {64, 64, D}, gen_uniform, 0.5);
    for (int i = 0; i < o.vit_layers; ++i) {
      const std::string p = "vision_tower.encoder.blocks." + std::to_string(i) + ".";
      b.norm(p + "norm0.weight", D);
      b.linear(p + "wqkv.weight", 3 * Q, D);
      b.linear(p + "wo.weight", D, Q, 0.5);
      b.norm(p + "norm1.weight", D);
      b.linear(p + "mlp.fc0.weight", o.vit_inter, D);
      b.linear(p + "mlp.fc1.weight", D, o.vit_inter, 0.5);
    }
    b.norm("vision_tower.encoder.final_layernorm.weight", D);
    b.linear("mm_projector.proj.0.weight", M, M);
    b.linear("mm_projector.proj.2.weight", Hd, M);
    b.norm("mm_projector.post_norm.weight", Hd);
  }
  return std::move(b.specs);
}

std::string vision_config_json(const make_model_options& o) {
  return "  \"vision_config\": {\n"
         "    \"model_type\": \"moonvit3d\",\n    \"activation_func\": \"gelu_pytorch_tanh\",\n"
         "    \"attn_bias\": false,\n    \"linear_bias\": false,\n    \"patch_embed_proj_bias\": false,\n"
         "    \"init_pos_emb_height\": 64,\n    \"init_pos_emb_width\": 64,\n    \"init_pos_emb_time\": 4,\n"
         "    \"merge_kernel_size\": [2, 2],\n    \"merge_type\": \"sd2_tpool\",\n    \"mlp_type\": \"mlp2\",\n"
         "    \"mm_hidden_size\": " + std::to_string(o.vit_hidden) + ",\n"
         "    \"mm_projector_type\": \"patchmergerv2\",\n    \"norm_type\": \"rmsnorm\",\n    \"patch_size\": 14,\n"
         "    \"pos_emb_interpolation_mode\": \"bilinear\",\n    \"pos_emb_type\": \"divided_fixed\",\n"
         "    \"projector_hidden_act\": \"gelu\",\n    \"projector_ln_eps\": 1e-05,\n"
         "    \"qkv_hidden_size\": " + std::to_string(o.vit_qkv) + ",\n"
         "    \"text_hidden_size\": " + std::to_string(o.hidden) + ",\n"
         "    \"vt_hidden_size\": " + std::to_string(o.vit_hidden) + ",\n"
         "    \"vt_intermediate_size\": " + std::to_string(o.vit_inter) + ",\n"
         "    \"vt_num_attention_heads\": " + std::to_string(o.vit_heads) + ",\n"
         "    \"vt_num_hidden_layers\": " + std::to_string(o.vit_layers) + "\n  },\n";
}

// The published media_proc_cfg (spec vision.md §1.3).
constexpr const char* preprocessor_json =
    "{\n  \"media_proc_cfg\": {\n    \"in_patch_limit\": 65536,\n    \"patch_size\": 14,\n"
    "    \"image_mean\": [0.5, 0.5, 0.5],\n    \"image_std\": [0.5, 0.5, 0.5],\n    \"merge_kernel_size\": 2,\n"
    "    \"fixed_output_tokens\": null,\n    \"patch_limit_on_one_side\": 512,\n    \"in_patch_limit_each_frame\": 16384,\n"
    "    \"sample_fps\": 8.0,\n    \"temporal_merge_kernel_size\": 4,\n"
    "    \"transparent_bg_config\": {\"pattern\": \"chessboard\", \"chessboard_square_size\": 8, "
    "\"chessboard_square_on_top_left\": true, \"chessboard_white_value\": 255, \"chessboard_gray_value\": 180},\n"
    "    \"transparent_bg_fill_stage\": \"after_resize\",\n"
    "    \"config_type\": \"media_proc.processors.moonvit.MoonViTMediaProcessorConfig\"\n  }\n}\n";

} // namespace

std::string make_model_options::validate() const {
  auto pos = [](int v, const char* flag) -> std::string {
    return v > 0 ? "" : std::string(flag) + " must be positive, got " + std::to_string(v);
  };
  for (auto [v, f] : {std::pair{layers, "--layers"}, {hidden, "--hidden"}, {heads, "--heads"},
                      {kda_head_dim, "--kda-head-dim"}, {experts, "--experts"}, {top_k, "--top-k"},
                      {moe_inter, "--moe-inter"}, {dense_inter, "--dense-inter"}, {kv_lora_rank, "--kv-lora-rank"},
                      {qk_nope, "--qk-nope"}, {qk_rope, "--qk-rope"}, {v_head_dim, "--v-head-dim"}})
    if (auto e = pos(v, f); !e.empty()) return e;
  if (layers < 2) return "--layers must be at least 2 (one KDA + one MLA layer)";
  if (top_k > experts) return "--top-k must not exceed --experts";
  if (vocab < 512) return "--vocab must be at least 512 (256 byte tokens + 256 special ids)";
  if (shared < 0) return "--shared must be ≥ 0";
  if (fam == family::kimi_k3) {
    if (latent <= 0 || latent % 32) return "--latent must be a positive multiple of 32 (MXFP4 blocks)";
    if (moe_inter % 32) return "--moe-inter must be a multiple of 32 for MXFP4 experts";
    if (q_lora_rank <= 0) return "--q-lora-rank must be positive for kimi_k3";
    if (attn_res_block <= 0) return "--attn-res-block must be positive";
  }
  if (max_shard_bytes < (1 << 20)) return "--shard-mb must be at least 1";
  if (hot_experts < 0 || hot_experts > experts) return "--hot-experts must be in [0, --experts]";
  if (vision) {
    if (fam != family::kimi_k3) return "--vision needs --family k3 (Kimi Linear has no vision tower)";
    for (auto [v, f] : {std::pair{vit_hidden, "--vit-hidden"}, {vit_heads, "--vit-heads"}, {vit_qkv, "--vit-qkv"},
                        {vit_inter, "--vit-inter"}, {vit_layers, "--vit-layers"}})
      if (auto e = pos(v, f); !e.empty()) return e;
    if (vit_qkv % vit_heads || (vit_qkv / vit_heads) % 4)
      return "--vit-qkv must be --vit-heads × a multiple of 4 (2-D RoPE pairs per axis)";
  }
  return "";
}

std::int64_t checkpoint_bytes(const make_model_options& o) {
  std::int64_t n = 0;
  for (const auto& t : tensor_list(o)) n += t.nbytes();
  return n;
}

void make_model(const make_model_options& o, const std::string& dir) {
  if (auto err = o.validate(); !err.empty()) throw std::invalid_argument(err);
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const bool k3 = o.fam == family::kimi_k3;
  const int base = o.vocab - 256;

  // Tokenizer files.
  write_text(fs::path(dir) / "tiktoken.model", tiktoken_file_text(make_demo_vocab(base, o.seed)));
  std::string added;
  for (const auto& [off, name] : special_names(o.fam)) {
    const bool special = !(k3 && (off >= 3 && off <= 5)) && !(!k3 && off >= 11 && off <= 15);
    added += std::string(added.empty() ? "" : ",\n") + "    \"" + std::to_string(base + off) +
             "\": {\"content\": \"" + name + "\", \"lstrip\": false, \"normalized\": false, \"rstrip\": false, " +
             "\"single_word\": false, \"special\": " + (special ? "true" : "false") + "}";
  }
  write_text(fs::path(dir) / "tokenizer_config.json",
             "{\n  \"added_tokens_decoder\": {\n" + added + "\n  },\n  \"bos_token\": \"[BOS]\",\n  \"eos_token\": \"" +
                 std::string(k3 ? "<|end_of_msg|>" : "<|im_end|>") +
                 "\",\n  \"pad_token\": \"[PAD]\",\n  \"unk_token\": \"[UNK]\",\n"
                 "  \"model_max_length\": 1048576,\n  \"tokenizer_class\": \"TikTokenTokenizer\",\n"
                 "  \"auto_map\": {\"AutoTokenizer\": [\"tokenization_kimi.TikTokenTokenizer\", null]}\n}\n");
  write_text(fs::path(dir) / "generation_config.json",
             "{\n  \"bos_token_id\": " + std::to_string(base) + ",\n  \"eos_token_id\": " + std::to_string(base + 2) +
                 ",\n  \"temperature\": 1.0,\n  \"top_p\": 1.0\n}\n");

  // config.json.
  std::string cfg;
  if (k3) {
    cfg = "{\n  \"architectures\": [\"KimiK3ForConditionalGeneration\"],\n  \"model_type\": \"kimi_k3\",\n"
          "  \"bos_token_id\": " + std::to_string(base) + ",\n  \"eos_token_id\": " + std::to_string(base + 2) +
          ",\n  \"pad_token_id\": " + std::to_string(base + 255) +
          ",\n  \"media_placeholder_token_id\": " + std::to_string(base + 21) +
          ",\n  \"tie_word_embeddings\": false,\n"
          "  \"quantization_config\": {\n    \"quant_method\": \"compressed-tensors\",\n"
          "    \"format\": \"mxfp4-pack-quantized\",\n    \"quantization_status\": \"compressed\",\n"
          "    \"weights\": {\"num_bits\": 4, \"group_size\": 32, \"type\": \"float\", \"strategy\": \"group\", "
          "\"symmetric\": true, \"scale_dtype\": \"torch.uint8\", \"observer\": \"minmax\"},\n"
          "    \"input_activations\": null,\n    \"output_activations\": null,\n"
          "    \"ignore\": [\"re:.*self_attn.*\", \"re:.*shared_experts.*\", \"re:.*mlp\\\\.(gate|up|gate_up|down)_proj.*\", "
          "\"re:.*lm_head.*\", \"re:.*vision_tower.*\", \"re:.*mm_projector.*\"]\n  },\n" +
          (o.vision ? vision_config_json(o) : std::string()) +
          "  \"text_config\": {\n" + text_config_json(o, base, "    ") + "  }\n}\n";
    if (o.vision) write_text(fs::path(dir) / "preprocessor_config.json", preprocessor_json);
  } else {
    cfg = "{\n" + text_config_json(o, base, "  ") + "}\n";
  }
  write_text(fs::path(dir) / "config.json", cfg);

  write_checkpoint(dir, tensor_list(o), o.max_shard_bytes, o.progress);
}

} // namespace k3::model
