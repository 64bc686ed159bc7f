// `k3 make-model --out DIR [--family k3|kimi-linear] [--preset demo|bench] [size flags]`:
// writes a random-weight checkpoint in the real Hugging Face layout (runtime/model/make_model.hpp).
#include <cstdio>
#include <string>
#include <vector>

#include <memory>

#include <CLI/CLI.hpp>

#include "apps/k3/commands.hpp"
#include "config/cli_util.hpp"
#include "runtime/model/make_model.hpp"

namespace k3::app {

/// The ≥ 1.5 GB K3-architecture checkpoint of the decode benchmark (README).
void apply_bench_preset(model::make_model_options& o) {
  o.layers = 8;
  o.hidden = 2048;
  o.heads = 16;
  o.kda_head_dim = 128;
  o.experts = 64;
  o.top_k = 8;
  o.moe_inter = 1024;
  o.latent = 1024;
  o.shared = 2;
  o.dense_inter = 4096;
  o.vocab = 65536;
  o.q_lora_rank = 512;
  o.kv_lora_rank = 512;
  o.qk_nope = 128;
  o.qk_rope = 64;
  o.v_head_dim = 128;
  o.attn_res_block = 4;
}

void add_make_model_command(CLI::App& root, int& rc) {
  auto* cmd = root.add_subcommand("make-model", "Write a random-weight checkpoint in the real Hugging Face layout "
                                                "(the demo model, test fixtures, benchmark models)");
  struct opts {
    model::make_model_options o;
    std::string out, family = "k3", preset = "demo";
    std::int64_t shard_mb = 0;
    bool quiet = false;
  };
  auto s = std::make_shared<opts>();
  auto& o = s->o;
  using CLI::Range;
  constexpr int big = 1 << 20;
  cmd->add_option("--out", s->out, "Output directory")->required();
  cmd->add_option("--family", s->family, "k3 or kimi-linear")->check(CLI::IsMember({"k3", "kimi_k3", "kimi-linear", "kimi_linear"}));
  cmd->add_option("--preset", s->preset, "demo (~7 MB) or bench (the 1.9 GB benchmark model); size flags override it")
      ->check(CLI::IsMember({"demo", "bench"}));
  // Presets apply first (below), so size flags given with --preset bench still win: they are
  // bound to temporaries and copied over after the preset.
  struct sizes {
    int layers = -1, hidden = -1, heads = -1, kda_head_dim = -1, experts = -1, top_k = -1, moe_inter = -1, latent = -1,
        shared = -1, dense_inter = -1, vocab = -1, q_lora = -1, kv_lora = -1, nope = -1, rope = -1, v_dim = -1, block = -1,
        hot = -1;
  };
  auto z = std::make_shared<sizes>();
  cmd->add_option("--layers", z->layers, "Decoder layers")->check(Range(2, 1000));
  cmd->add_option("--hidden", z->hidden, "Hidden size")->check(Range(32, big));
  cmd->add_option("--heads", z->heads, "Attention heads")->check(Range(1, 4096));
  cmd->add_option("--kda-head-dim", z->kda_head_dim, "KDA head dimension")->check(Range(1, 1024));
  cmd->add_option("--experts", z->experts, "Routed experts")->check(Range(1, 1 << 16));
  cmd->add_option("--top-k", z->top_k, "Experts per token")->check(Range(1, 1 << 16));
  cmd->add_option("--moe-inter", z->moe_inter, "Routed expert intermediate size")->check(Range(1, big));
  cmd->add_option("--latent", z->latent, "K3 latent MoE dimension")->check(Range(32, big));
  cmd->add_option("--shared", z->shared, "Shared experts")->check(Range(0, 64));
  cmd->add_option("--dense-inter", z->dense_inter, "Dense MLP intermediate size")->check(Range(1, big));
  cmd->add_option("--vocab", z->vocab, "Vocabulary size (a BPE vocabulary is learned to this size)")->check(Range(512, 1 << 22));
  cmd->add_option("--q-lora-rank", z->q_lora, "MLA query LoRA rank")->check(Range(1, big));
  cmd->add_option("--kv-lora-rank", z->kv_lora, "MLA latent (KV LoRA) rank")->check(Range(1, big));
  cmd->add_option("--qk-nope", z->nope, "MLA NoPE head dimension")->check(Range(1, 4096));
  cmd->add_option("--qk-rope", z->rope, "MLA RoPE head dimension")->check(Range(1, 4096));
  cmd->add_option("--v-head-dim", z->v_dim, "MLA value head dimension")->check(Range(1, 4096));
  cmd->add_option("--attn-res-block", z->block, "Block AttnRes block size (layers)")->check(Range(1, 1000));
  cmd->add_option("--hot-experts", z->hot, "Experts the router bias favours (skewed routing)")->check(Range(0, 1 << 16));
  k3::conf::add_bool(*cmd, "--vision", o.vision, "Also write a MoonViT vision tower and projector (K3; sized by --vit-*)");
  cmd->add_option("--vit-hidden", o.vit_hidden, "Vision tower width (K3: 1024)")->check(Range(4, big));
  cmd->add_option("--vit-heads", o.vit_heads, "Vision tower attention heads (K3: 12)")->check(Range(1, 1024));
  cmd->add_option("--vit-qkv", o.vit_qkv, "Vision tower q/k/v width, heads × head size (K3: 1536)")->check(Range(4, big));
  cmd->add_option("--vit-inter", o.vit_inter, "Vision tower MLP size (K3: 4096)")->check(Range(1, big));
  cmd->add_option("--vit-layers", o.vit_layers, "Vision tower blocks (K3: 27)")->check(Range(1, 1000));
  k3::conf::add_bool(*cmd, "--conv-2d", o.conv_2d, "Write 2-D KDA conv weights (the 3-D form is the default)");
  cmd->add_option("--seed", o.seed, "Random seed")->check(Range(std::uint64_t{0}, std::uint64_t{INT64_MAX}));
  cmd->add_option("--shard-mb", s->shard_mb, "Largest safetensors shard in MiB")->check(Range(std::int64_t{1}, std::int64_t{1} << 20));
  k3::conf::add_bool(*cmd, "--quiet", s->quiet, "No progress bar");
  cmd->callback([s, z, &rc] {
    auto& m = s->o;
    m.fam = s->family == "kimi-linear" || s->family == "kimi_linear" ? model::family::kimi_linear : model::family::kimi_k3;
    if (s->preset == "bench") apply_bench_preset(m);
    auto set = [](int v, int& dst) {
      if (v >= 0) dst = v;
    };
    set(z->layers, m.layers), set(z->hidden, m.hidden), set(z->heads, m.heads), set(z->kda_head_dim, m.kda_head_dim);
    set(z->experts, m.experts), set(z->top_k, m.top_k), set(z->moe_inter, m.moe_inter), set(z->latent, m.latent);
    set(z->shared, m.shared), set(z->dense_inter, m.dense_inter), set(z->vocab, m.vocab), set(z->q_lora, m.q_lora_rank);
    set(z->kv_lora, m.kv_lora_rank), set(z->nope, m.qk_nope), set(z->rope, m.qk_rope), set(z->v_dim, m.v_head_dim);
    set(z->block, m.attn_res_block), set(z->hot, m.hot_experts);
    if (s->shard_mb > 0) m.max_shard_bytes = s->shard_mb << 20;
    if (auto err = m.validate(); !err.empty()) throw std::invalid_argument(err);
    m.progress = !s->quiet;
    const auto bytes = model::checkpoint_bytes(m);
    std::fprintf(stderr, "k3 make-model: writing %s (%.2f GB of tensors) to %s\n",
                 m.fam == model::family::kimi_k3 ? "kimi_k3" : "kimi_linear", bytes / 1e9, s->out.c_str());
    model::make_model(m, s->out);
    std::fprintf(stderr, "k3 make-model: done\n");
    rc = 0;
  });
}

} // namespace k3::app
