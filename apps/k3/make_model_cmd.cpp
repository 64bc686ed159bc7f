// `k3 make-model --out DIR [--family k3|kimi-linear] [--preset demo|bench] [size flags]`:
// writes a random-weight checkpoint in the real Hugging Face layout (runtime/model/make_model.hpp).
#include <cstdio>
#include <string>
#include <vector>

#include "apps/k3/cli_args.hpp"
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

int make_model_main(const std::vector<std::string_view>& argv) {
  model::make_model_options o;
  std::string out;
  bool quiet = false;
  cli_args a(argv);
  constexpr long long big = 1 << 20;
  while (!a.done()) {
    const auto f = a.next();
    if (f == "--out") out = a.value(f);
    else if (f == "--family") {
      const auto v = a.value(f);
      if (v == "k3" || v == "kimi_k3") o.fam = model::family::kimi_k3;
      else if (v == "kimi-linear" || v == "kimi_linear") o.fam = model::family::kimi_linear;
      else throw std::invalid_argument("--family must be k3 or kimi-linear, got '" + v + "'");
    } else if (f == "--preset") {
      const auto v = a.value(f);
      if (v == "bench") apply_bench_preset(o);
      else if (v != "demo") throw std::invalid_argument("--preset must be demo or bench, got '" + v + "'");
    }
    else if (f == "--layers") o.layers = static_cast<int>(a.integer(f, 2, 1000));
    else if (f == "--hidden") o.hidden = static_cast<int>(a.integer(f, 32, big));
    else if (f == "--heads") o.heads = static_cast<int>(a.integer(f, 1, 4096));
    else if (f == "--kda-head-dim") o.kda_head_dim = static_cast<int>(a.integer(f, 1, 1024));
    else if (f == "--experts") o.experts = static_cast<int>(a.integer(f, 1, 1 << 16));
    else if (f == "--top-k") o.top_k = static_cast<int>(a.integer(f, 1, 1 << 16));
    else if (f == "--moe-inter") o.moe_inter = static_cast<int>(a.integer(f, 1, big));
    else if (f == "--latent") o.latent = static_cast<int>(a.integer(f, 32, big));
    else if (f == "--shared") o.shared = static_cast<int>(a.integer(f, 0, 64));
    else if (f == "--dense-inter") o.dense_inter = static_cast<int>(a.integer(f, 1, big));
    else if (f == "--vocab") o.vocab = static_cast<int>(a.integer(f, 512, 1 << 22));
    else if (f == "--q-lora-rank") o.q_lora_rank = static_cast<int>(a.integer(f, 1, big));
    else if (f == "--kv-lora-rank") o.kv_lora_rank = static_cast<int>(a.integer(f, 1, big));
    else if (f == "--qk-nope") o.qk_nope = static_cast<int>(a.integer(f, 1, 4096));
    else if (f == "--qk-rope") o.qk_rope = static_cast<int>(a.integer(f, 1, 4096));
    else if (f == "--v-head-dim") o.v_head_dim = static_cast<int>(a.integer(f, 1, 4096));
    else if (f == "--attn-res-block") o.attn_res_block = static_cast<int>(a.integer(f, 1, 1000));
    else if (f == "--conv-2d") o.conv_2d = true;
    else if (f == "--hot-experts") o.hot_experts = static_cast<int>(a.integer(f, 0, 1 << 16));
    else if (f == "--seed") o.seed = static_cast<std::uint64_t>(a.integer(f, 0, INT64_MAX));
    else if (f == "--shard-mb") o.max_shard_bytes = a.integer(f, 1, 1 << 20) << 20;
    else if (f == "--quiet") quiet = true;
    else throw std::invalid_argument("unknown option '" + std::string(f) + "'");
  }
  if (out.empty()) throw std::invalid_argument("--out DIR is required");
  if (auto err = o.validate(); !err.empty()) throw std::invalid_argument(err);
  o.progress = !quiet;
  const auto bytes = model::checkpoint_bytes(o);
  std::fprintf(stderr, "k3 make-model: writing %s (%.2f GB of tensors) to %s\n",
               o.fam == model::family::kimi_k3 ? "kimi_k3" : "kimi_linear", bytes / 1e9, out.c_str());
  model::make_model(o, out);
  std::fprintf(stderr, "k3 make-model: done\n");
  return 0;
}

} // namespace k3::app
