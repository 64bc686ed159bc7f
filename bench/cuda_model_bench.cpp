// `k3 bench cuda --model DIR`: whole model steps on the GPU through the CUDA executor (the
// path `k3 serve --device cuda` runs), prefill and decode, against the decode floor of active
// weight bytes per token / the card's measured read bandwidth. Wall-clock per step, including
// the executor's synchronisation and sampling (greedy, on the device).
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench/cuda_bench_util.hpp"
#include "runtime/cuda/cuda_executor.hpp"
#include "runtime/engine/kv_manager.hpp"

namespace k3::bench {

int run_cuda_model_table(const std::string& dir, bool quick, const cuda_ceilings& ceil) {
  try {
    const auto cfg = model::load_config(dir);
    model::load_options lo;
    lo.progress = 0;
    lo.copy_to_memory = false; // the weights are uploaded to the GPU
    lo.quantize_experts = cfg.num_experts > 0 && !cfg.experts_mxfp4; // the CUDA experts are MXFP4
    const auto m = model::model::load(dir, lo);
    const auto& c = m->config();
    gpu::cuda_model_options go;
    go.progress = 0;
    go.decode_graphs = gpu::decode_graphs_enabled(); // as the engine actor runs it (K3_CUDA_GRAPHS=0: eager)
    gpu::cuda_executor ex(*m, go);
    engine::kv_config k;
    k.memory_bytes = 4ll << 30;
    k.block_size = 64;
    k.max_model_len = 4096;
    k.max_num_seqs = 64;
    k.allocate = ex.pool_allocator();
    engine::kv_manager kv(c, k);
    sampling::params greedy;
    greedy.temperature = 0.f;
    std::vector<std::unique_ptr<sampling::sampler>> samplers;
    std::uint64_t next_id = 1;
    std::vector<std::int32_t> prompt(512);
    for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<std::int32_t>((i * 7919 + 13) % static_cast<std::size_t>(c.vocab));
    auto step = [&](std::vector<std::uint64_t>& ids, std::vector<std::vector<std::int32_t>>& feed,
                    std::vector<std::int64_t>& pos) -> engine::step_result {
      engine::batch_plan plan;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        auto* st = kv.allocate(ids[i], pos[i] + static_cast<std::int64_t>(feed[i].size()));
        if (!st) throw std::runtime_error("KV pools exhausted");
        while (samplers.size() <= i) samplers.push_back(std::make_unique<sampling::sampler>(greedy, 1));
        plan.entries.push_back({ids[i], st, feed[i], pos[i], true, samplers[i].get()});
      }
      auto r = ex.run(plan);
      if (r.error != engine::errc::none) throw std::runtime_error(r.message);
      for (std::size_t i = 0; i < ids.size(); ++i) {
        pos[i] += static_cast<std::int64_t>(feed[i].size());
        feed[i] = {r.tokens[i]};
      }
      return r;
    };
    using clock = std::chrono::steady_clock;
    std::printf("  model steps on the GPU (%s), greedy, decode steps %s:\n", c.describe().c_str(),
                go.decode_graphs ? "replayed from CUDA graphs" : "eager (K3_CUDA_GRAPHS=0)");
    std::printf("  %-22s %10s %12s %12s\n", "step", "ms", "tokens/s", "of floor");
    // Prefill: a 512-token prompt in one step (fresh sequence each time).
    double best = 1e30;
    for (int rep = 0; rep < (quick ? 2 : 4); ++rep) {
      std::vector<std::uint64_t> ids{next_id++};
      std::vector<std::vector<std::int32_t>> feed{prompt};
      std::vector<std::int64_t> pos{0};
      const auto t0 = clock::now();
      step(ids, feed, pos);
      const double s = std::chrono::duration<double>(clock::now() - t0).count();
      if (rep > 0) best = std::min(best, s); // the first run sizes the buffers
      kv.release(ids[0]);
    }
    std::printf("  %-22s %10.2f %12.0f %12s\n", "prefill 512", best * 1e3, 512 / best, "-");
    const double floor_s = static_cast<double>(model::active_weight_bytes(m->weights(), c)) / (ceil.copy_bytes_per_s / 2);
    for (int B : {1, 8, 32}) {
      std::vector<std::uint64_t> ids;
      std::vector<std::vector<std::int32_t>> feed;
      std::vector<std::int64_t> pos;
      for (int b = 0; b < B; ++b) {
        ids.push_back(next_id++);
        feed.emplace_back(prompt.begin(), prompt.begin() + 16);
        pos.push_back(0);
      }
      step(ids, feed, pos); // 16-token prompts
      step(ids, feed, pos); // warm-up decode (sizes the decode buffers)
      const int steps = quick ? 5 : 20;
      const auto t0 = clock::now();
      for (int i = 0; i < steps; ++i) step(ids, feed, pos);
      const double s = std::chrono::duration<double>(clock::now() - t0).count() / steps;
      char label[32];
      std::snprintf(label, sizeof label, "decode batch %d", B);
      std::printf("  %-22s %10.2f %12.0f %12.3f\n", label, s * 1e3, B / s, floor_s / s);
      for (auto id : ids) kv.release(id);
    }
    std::printf("  (floor = active weight bytes per decode step / half the measured copy bandwidth; the ratio is\n"
                "   floor time / step time, so 1.0 would be a step that only streams its weights once)\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "k3 bench cuda --model %s: %s\n", dir.c_str(), e.what());
    return 2;
  }
}

} // namespace k3::bench
