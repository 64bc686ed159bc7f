// `k3 serve [--model DIR] [vLLM / SGLang launch flags]`: the OpenAI-compatible server. Without
// --model it serves the built-in demo checkpoint, written once by make_model into the cache
// directory (--cache-dir, $K3_CACHE_DIR, or ~/.cache/k3serve). See config/server_config.hpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <CLI/CLI.hpp>
#include <caf/all.hpp>

#include "actors/sim_stream_actor.hpp"
#include "apps/k3/commands.hpp"
#include "k3/engine.hpp"
#include "net/http_server.hpp"
#include "runtime/vision/vision_model.hpp"
#include "config/server_config.hpp"
#include "runtime/model/make_model.hpp"
#include "runtime/model/host_memory.hpp"
#include "runtime/model/model_path.hpp"
#include "runtime/sim/deployment.hpp"
#include "runtime/sim/sim_executor.hpp"
#include "runtime/tokenizer/kimi_tokenizer.hpp"

namespace k3::app {
namespace {

std::int64_t mem_available() {
  const std::int64_t b = model::host_memory_available();
  return b < 0 ? 4ll << 30 : b;
}

std::int64_t dir_bytes(const std::string& dir) {
  std::int64_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") n += static_cast<std::int64_t>(e.file_size());
  return n;
}

} // namespace

void add_serve_command(CLI::App& root, int& rc) {
  auto* cmd = root.add_subcommand("serve", "OpenAI-compatible HTTP/SSE + WebSocket server (vLLM / SGLang launch flags "
                                           "accepted; --config FILE reads `key: value` lines of the same options)");
  auto c = std::make_shared<conf::server_config>();
  conf::add_server_options(*cmd, *c);
  auto config_file = std::make_shared<std::string>(); // expanded by main before parsing; declared for --help
  cmd->add_option("--config", *config_file, "A file of `key: value` lines (keys are these options without dashes), read where it "
                              "appears; later flags override it");
  cmd->callback([c, cmd, config_file, &rc] {
    auto& cfg = *c;
    const bool batched_flag_given = cmd->count("--max-num-batched-tokens") > 0;
    if (auto err = cfg.validate(); !err.empty()) throw std::invalid_argument(err);
    if (cfg.trust_remote_code)
      std::fprintf(stderr, "k3 serve: --trust-remote-code accepted (k3serve runs no Python; nothing to trust)\n");

    const auto where = model::resolve_model(cfg.model, cfg.cache_dir);
    cfg.model = where.dir;
    if (cfg.served_model_names.empty()) cfg.served_model_names.push_back(where.default_name);

    caf::actor_system_config acfg;
    llm_engine::add_types(acfg);
    caf::actor_system sys{acfg};

    const auto mc = model::load_config(cfg.model);
    engine_options eo;
    eo.model_dir = cfg.model;
    eo.max_model_len = cfg.max_model_len > 0 ? std::min<std::int64_t>(cfg.max_model_len, mc.max_position)
                                             : std::min<std::int64_t>(mc.max_position, 32768);
    if (cfg.max_model_len > mc.max_position)
      throw std::invalid_argument("--max-model-len " + std::to_string(cfg.max_model_len) + " exceeds the model's max_position_embeddings " +
                                  std::to_string(mc.max_position));
    eo.max_num_seqs = cfg.max_num_seqs;
    eo.max_num_batched_tokens = cfg.max_num_batched_tokens;
    eo.block_size = cfg.block_size;
    eo.prefix_caching = cfg.enable_prefix_caching;
    eo.exact_fp32 = cfg.exact_fp32;
    eo.bf16_activations = cfg.bf16_activations;
    eo.int8_activations = cfg.int8_activations;
    eo.mmap_weights = cfg.mmap_weights;
    eo.kda_checkpoint_interval = cfg.kda_checkpoint_interval;
    eo.prefix_cache_host_bytes = cfg.prefix_cache_host_bytes;
    eo.max_waiting_requests = cfg.max_queued_requests;
    eo.max_waiting_tokens = cfg.max_queued_tokens;
    eo.expert_parallel_size = cfg.device == "cpu" ? cfg.expert_parallel_size : 0; // on GPUs: EP = TP inside the group
    eo.num_redundant_experts = cfg.num_redundant_experts;
    eo.remote_shards = cfg.remote_shards;
    eo.quantize_experts = cfg.quantization == "mxfp4";
    eo.null_executor = cfg.null_executor;
    eo.device = cfg.device;
    eo.tensor_parallel_size = cfg.tensor_parallel_size;
    eo.gpu_memory_utilization = cfg.gpu_memory_utilization;
    eo.kv_memory_bytes_explicit = cfg.kv_cache_memory > 0;
    // CPU build: the KV pools live in RAM. --gpu-memory-utilization U reserves U of what is
    // available after the weights (capped at 8 GiB); pages are only touched when used.
    eo.kv_memory_bytes = cfg.kv_cache_memory > 0
                             ? cfg.kv_cache_memory
                             : std::clamp<std::int64_t>(static_cast<std::int64_t>(cfg.gpu_memory_utilization *
                                                                                 static_cast<double>(mem_available() - dir_bytes(cfg.model))),
                                                        64ll << 20, 8ll << 30);
    std::shared_ptr<sim::sim_executor> simx;
    if (!cfg.simulate.empty()) {
      // Mock GPU stream: the plan's K3 deployment paces the steps; the demo checkpoint only
      // supplies the tokenizer and chat format.
      const auto km = sim::load_model_desc("kimi-k3");
      const auto plan = sim::load_plan(cfg.simulate, cfg.simulate_hardware, cfg.simulate_gpus, km);
      const auto dep = sim::make_deployment(km, plan);
      const auto& mp = dep.memory;
      if (!mp.fits) throw std::invalid_argument("--simulate " + cfg.simulate + ": the plan does not fit: " + mp.why);
      const auto& cm = dep.cost;
      const auto tok = tok::kimi_tokenizer::load(cfg.model);
      auto ids = tok.encode("This is placeholder text from k3 serve --simulate, streamed at the pace the simulator models for "
                            "Kimi K3 on this plan. ", false);
      std::erase_if(ids, [&](std::int32_t t) { return t == mc.eos_id; });
      simx = std::make_shared<sim::sim_executor>(cm, std::move(ids));
      eo.executor = simx;
      eo.make_stream = [simx](caf::actor_system& s) { return actors::spawn_sim_stream(s, simx); };
      eo.kv_backed = false;
      eo.kv_memory_bytes = static_cast<std::int64_t>(mp.kv_budget);
      eo.kv_slot_bytes = static_cast<std::int64_t>(std::ceil(mp.state_per_seq));
      eo.kv_block_bytes = static_cast<std::int64_t>(std::ceil(mp.kv_per_token * eo.block_size));
      eo.max_model_len = cfg.max_model_len > 0 ? std::min(cfg.max_model_len, plan.max_model_len) : plan.max_model_len;
      eo.max_model_len = std::min<std::int64_t>(eo.max_model_len, mc.max_position);
      if (eo.max_num_seqs == 0) eo.max_num_seqs = plan.max_num_seqs > 0 ? plan.max_num_seqs : 256;
      const std::int64_t slot_cap =
          (eo.kv_memory_bytes - (eo.max_model_len + eo.block_size - 1) / eo.block_size * eo.kv_block_bytes) / std::max<std::int64_t>(1, eo.kv_slot_bytes);
      eo.max_num_seqs = static_cast<int>(std::clamp<std::int64_t>(slot_cap, 1, eo.max_num_seqs));
      if (!batched_flag_given) eo.max_num_batched_tokens = plan.max_num_batched_tokens;
      std::fprintf(stderr, "k3 serve: simulating %s (%s); one of %d attention replica(s); placeholder tokens\n",
                   plan.title.empty() ? plan.name.c_str() : plan.title.c_str(), plan.describe().c_str(), plan.dp);
    }
    auto eng = llm_engine::start(sys, eo);
    std::fprintf(stderr, "k3 serve: %s\nk3 serve: %s\n", eng->config().describe().c_str(), eng->sizing_note().c_str());
    cfg.max_model_len = eo.max_model_len;
    // The vision tower runs on the CPU backend (the CUDA path has no image features yet).
    std::shared_ptr<const vision::vision_model> vm;
    if (cfg.simulate.empty() && !cfg.null_executor && cfg.device == "cpu" && eng->config().fam == model::family::kimi_k3) {
      vm = vision::vision_model::load(cfg.model, cfg.exact_fp32);
      if (vm)
        std::fprintf(stderr, "k3 serve: vision tower %d layers × %d wide, %.1f MB (image_url parts accepted)\n",
                     vm->config.layers, vm->config.hidden, static_cast<double>(vm->net->bytes()) / 1e6);
    } else if (cfg.device != "cpu" && vision::vision_config::load(cfg.model)) {
      std::fprintf(stderr, "k3 serve: the checkpoint has a vision tower; image input runs on --device cpu only for now\n");
    }
    net::http_server server(*eng, cfg, vm);
    rc = server.run();
  });
}

} // namespace k3::app
