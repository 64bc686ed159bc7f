// Simulator inputs: presets, model arithmetic, plans and the per-GPU memory plans of A/B/C,
// checked against the spec's figures (model.md §1, §13; hardware.md §3; plans.md).
#include <catch2/catch.hpp>

#include <cmath>

#include "runtime/sim/builtin.hpp"
#include "runtime/sim/memory_plan.hpp"
#include "runtime/sim/sim_error.hpp"

using namespace k3::sim;

namespace {
const model_desc& k3m() {
  static const model_desc m = load_model_desc("kimi-k3");
  return m;
}
plan builtin_plan(const std::string& n) { return load_plan(n, "", 0, k3m()); }
} // namespace

TEST_CASE("every hardware preset parses and every value names its source", "[sim]") {
  const auto names = builtin_names("hardware");
  REQUIRE(names.size() == 7);
  for (const auto& n : names) {
    const auto g = load_gpu_spec(n);
    INFO(n);
    CHECK(g.sources.size() == 11);
    for (const auto& [field, src] : g.sources) CHECK(src.size() > 10);
    CHECK(g.usable_memory_gb <= g.memory_gb);
  }
  // The sourced card sizes, not the guide's 192 / 144 GB.
  CHECK(load_gpu_spec("b300").memory_gb == 288);
  CHECK(load_gpu_spec("b300").usable_memory_gb == 268);
  CHECK(load_gpu_spec("B200").memory_gb == 180);
  CHECK(load_gpu_spec("gb200-nvl72").nvlink_domain == 72);
}

TEST_CASE("hardware files: missing source, unknown key and bad values are named", "[sim]") {
  const std::string good = std::string(*builtin("hardware", "h100"));
  auto bad = good;
  bad.replace(bad.find("\"source\": \"NVIDIA H100 SXM: 3.35 TB/s\""), 38, "\"source\": \"\"");
  CHECK_THROWS_WITH(parse_gpu_spec(bad, "my.json"), Catch::Contains("my.json: hbm_tb_s.source"));
  auto extra = good;
  extra.insert(1, "\"colour\": \"green\", ");
  CHECK_THROWS_WITH(parse_gpu_spec(extra, "my.json"), Catch::Contains("unknown key 'colour'"));
  auto neg = good;
  neg.replace(neg.find("{\"value\": 3.35"), 14, "{\"value\": -1");
  CHECK_THROWS_WITH(parse_gpu_spec(neg, "my.json"), Catch::Contains("hbm_tb_s.value"));
  CHECK_THROWS_WITH(parse_gpu_spec("{", "my.json"), Catch::Contains("not valid JSON"));
  CHECK_THROWS_WITH(load_gpu_spec("tpu9"), Catch::Contains("neither a preset"));
}

TEST_CASE("K3 arithmetic from the real config matches the spec", "[sim]") {
  const auto& m = k3m();
  CHECK(m.n_kda == 69);
  CHECK(m.n_mla == 24);
  CHECK(m.n_moe == 92);
  CHECK(m.expert_params == 3.0 * 3072 * 3584);
  CHECK(m.expert_bytes(wdtype::mxfp4) == 17547264.0); // 17.55 MB (mxfp4.md §6.4)
  CHECK(std::abs(m.active_params() / 1e9 - 104.2) < 0.1);
  // Trunk parts of hardware.md §3.2: KDA 30.6B, MLA 5.6B, shared/latent/router 17.5B.
  CHECK(std::abs(m.n_kda * m.kda_params / 1e9 - 30.6) < 0.05);
  CHECK(std::abs(m.n_mla * m.mla_params / 1e9 - 5.6) < 0.05);
  CHECK(std::abs(m.n_moe * m.moe_trunk_params / 1e9 - 17.5) < 0.05);
  // Routed experts 1,446 GB; checkpoint 1,560.9 GB with the vision tower (not modeled, ~1 GB).
  CHECK(std::abs(m.n_moe * m.experts * m.expert_bytes(wdtype::mxfp4) / 1e9 - 1446.5) < 0.1);
  CHECK(std::abs(m.checkpoint_bytes() / 1e9 - 1560.9) < 1.5);
  // State per slot 428.6 MiB; MLA 27,648 B per token (model.md §13).
  const double slot = m.n_kda * (m.kda_state_bytes() + m.conv_state_bytes());
  CHECK(std::abs(slot / 1048576.0 - 428.6) < 0.05);
  CHECK(m.n_mla * m.mla_row() * 2 == 27648);
}

TEST_CASE("plan A: 8x B300 TP8 EP8, memory per GPU exactly", "[sim]") {
  const auto p = builtin_plan("A");
  const cost_params c;
  const auto mp = plan_memory(k3m(), p, c);
  CHECK(p.world == 8);
  CHECK(p.attn_tp == 8);
  CHECK(p.ep == 8);
  CHECK(p.max_model_len == 131072);
  CHECK(p.gpu_memory_utilization == 0.95);
  CHECK(mp.experts_per_gpu == 112);
  CHECK(mp.expert_weights == 112.0 * 92 * 17547264.0);
  const auto& m = k3m();
  CHECK(mp.trunk_weights == Approx(((m.trunk_params() - m.head_params) * 2 + (m.embed_params + m.head_params) * 2) / 8).epsilon(1e-12));
  CHECK(std::abs(mp.weights() / 1e9 - 195.0) < 1.0); // "~195 GB" (hardware.md §3.1)
  // The guide's arithmetic and the sourced one, side by side.
  CHECK(mp.cluster_guide == 8 * 192e9);   // 1536 GB
  CHECK(mp.cluster_nominal == 8 * 288e9); // 2304 GB
  CHECK(mp.cluster_usable == 8 * 268e9);  // 2144 GB
  CHECK(mp.budget == 268e9 * 0.95);
  // At the guide's 192 GB per card the ~195 GB of weights per GPU would not even fit.
  CHECK(mp.guide_kv_budget < 0);
  CHECK(mp.kv_budget == Approx(mp.budget - mp.weights() - mp.activations - mp.reserved));
  CHECK(mp.fits);
  CHECK(std::abs(mp.state_per_seq / 1048576.0 - 53.6) < 0.05); // 53.6 MiB per GPU at TP8
  CHECK(mp.kv_per_token == 27648);                             // latent replicated on every TP rank
  const auto per_seq = mp.state_per_seq + 131072.0 * mp.kv_per_token;
  CHECK(mp.max_seqs_at_context == static_cast<std::int64_t>(std::floor(mp.kv_budget / per_seq)));
  CHECK(mp.max_seqs_at_context == 14);
}

TEST_CASE("plan B: 16x B200 TP16 EP16 MXFP4, 512K context", "[sim]") {
  const auto p = builtin_plan("B");
  const auto mp = plan_memory(k3m(), p, cost_params{});
  CHECK(p.world == 16);
  CHECK(p.nodes() == 2);
  CHECK(p.expert_dtype == wdtype::mxfp4);
  CHECK(p.max_model_len == 524288);
  CHECK(mp.experts_per_gpu == 56);
  CHECK(mp.expert_weights == 56.0 * 92 * 17547264.0);
  CHECK(std::abs(mp.weights() / 1e9 - 97.5) < 1.0); // "~98 GB/GPU"
  CHECK(mp.cluster_guide == 16 * 144e9);            // 2304 GB
  CHECK(mp.cluster_nominal == 16 * 180e9);          // 2880 GB
  CHECK(mp.fits);
  CHECK(mp.guide_kv_budget == Approx(144e9 * 0.9 - mp.weights() - mp.activations - mp.reserved));
  CHECK(mp.guide_kv_budget > 0);
  CHECK(mp.state_per_seq == Approx(69 * (6291456.0 + 221184.0) / 16));
}

TEST_CASE("plan C: GB200 NVL72 TP8 PP3 EP72 in BF16, 1M context", "[sim]") {
  const auto p = builtin_plan("C");
  const auto mp = plan_memory(k3m(), p, cost_params{});
  CHECK(p.world == 72);
  CHECK(p.pp == 3);
  CHECK(p.dp == 3);
  CHECK(p.ep == 72);
  CHECK(p.ep_spans_stages());
  CHECK(p.expert_dtype == wdtype::bf16);
  CHECK(p.trunk_dtype == wdtype::bf16);
  CHECK(mp.experts_per_gpu == 13); // ceil(896 / 72)
  CHECK(mp.moe_layers_held == 92);
  CHECK(mp.expert_weights == 13.0 * 92 * (3.0 * 3072 * 3584 * 2));
  CHECK(mp.fits);
  // Layers split over 3 stages: 23 KDA and 8 MLA layers per stage.
  CHECK(mp.kv_per_token == 8.0 * 576 * 2);
  CHECK(mp.state_per_seq == Approx(23 * (6291456.0 + 221184.0) / 8));
  CHECK(mp.max_seqs_at_context >= 1);
}

TEST_CASE("layouts that do not fit say which part and by how much", "[sim]") {
  const auto& m = k3m();
  // 8x B200: ~195 GB of weights per GPU on 180 GB cards (hardware.md §3.1).
  const auto p = plan_from_command("--tp 8 --ep 8 --max-model-len 131072", load_gpu_spec("b200"), 8, m);
  const auto mp = plan_memory(m, p, cost_params{});
  CHECK_FALSE(mp.fits);
  CHECK_THAT(mp.why, Catch::Contains("exceed") && Catch::Contains("per GPU by"));
  // 16x H200 TP16/EP16 fits with ~40 GB left before the KV budget.
  const auto h = plan_from_command("--tp 16 --ep 16 --max-model-len 131072", load_gpu_spec("h200"), 16, m);
  const auto hm = plan_memory(m, h, cost_params{});
  CHECK(hm.fits);
  CHECK(std::abs((141e9 - hm.weights()) / 1e9 - 43.5) < 2.0);
}

TEST_CASE("plan command lines: vLLM / SGLang spellings, layouts and clear errors", "[sim]") {
  const auto& m = k3m();
  const auto g = load_gpu_spec("b300");
  const auto v = plan_from_command("python -m vllm.entrypoints.openai.api_server --model moonshotai/Kimi-K3 --tensor-parallel-size 8 "
                                   "--enable-expert-parallel --kv-cache-dtype fp8 --max-num-batched-tokens 4096",
                                   g, 0, m);
  CHECK(v.world == 8);
  CHECK(v.ep == 8);
  CHECK(v.kv_bytes == 1);
  CHECK(v.max_num_batched_tokens == 4096);
  const auto s = plan_from_command("python -m sglang.launch_server --model-path x --tp 8 --dp 8 --enable-dp-attention --ep 8", g, 0, m);
  CHECK(s.world == 8);
  CHECK(s.attn_tp == 1);
  CHECK(s.dp == 8);
  CHECK_THROWS_WITH(plan_from_command("--tp 8 --frobnicate 3", g, 0, m), Catch::Contains("--frobnicate"));
  CHECK_THROWS_WITH(plan_from_command("--tp 8 --pp 3 --ep 48", g, 72, m), Catch::Contains("not the whole cluster"));
  CHECK_THROWS_WITH(plan_from_command("--tp 8 --ep 4", g, 8, m), Catch::Contains("below TP"));
  CHECK_THROWS_WITH(plan_from_command("--tp 8", g, 12, m), Catch::Contains("not a multiple"));
  CHECK_THROWS_WITH(plan_from_command("--tp 8 --max-model-len 4000000", g, 8, m), Catch::Contains("exceeds the model"));
  CHECK_THROWS_WITH(plan_from_command("--tp 8 --dtype float16", g, 8, m), Catch::Contains("--dtype float16"));
  CHECK_THROWS_WITH(load_plan("--tp 8", "", 0, m), Catch::Contains("needs --hardware"));
  CHECK_THROWS_WITH(load_plan("Z", "", 0, m), Catch::Contains("not a built-in plan"));
}

TEST_CASE("other models: Kimi Linear and the DeepSeek-V3 architecture", "[sim]") {
  const auto kl = load_model_desc("kimi-linear-48b");
  CHECK(kl.n_kda == 20);
  CHECK(kl.n_mla == 7);
  CHECK(std::abs(kl.total_params() / 1e9 - 48) < 2.5);
  CHECK(std::abs(kl.active_params() / 1e9 - 3) < 0.5);
  const auto ds = load_model_desc("deepseek-v3");
  CHECK(std::abs(ds.total_params() / 1e9 - 671) < 10);
  CHECK(std::abs(ds.active_params() / 1e9 - 37) < 2);
  const auto k2 = load_model_desc("kimi-k2");
  CHECK(std::abs(k2.total_params() / 1e9 - 1030) < 40);
  CHECK(k2.trunk_dtype == wdtype::fp8);
  CHECK_THROWS_WITH(parse_model_desc(R"({"model_type":"llama"})", "c.json"), Catch::Contains("c.json: model_type 'llama'"));
}
