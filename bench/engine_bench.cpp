#include "bench/engine_bench.hpp"

#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>

#include "bench/bench_util.hpp"
#include "k3/engine.hpp"
#include "runtime/model/make_model.hpp"

namespace k3::bench {
namespace {

struct result {
  double seconds = 0;
  std::int64_t tokens = 0, steps = 0;
  actors::engine_stats stats;
};

/// Submits `n` requests (prompt `prompt_len`, `gen` tokens each, greedy, ignore_eos) at once and
/// waits for all of them.
result run_load(caf::actor_system& sys, const engine_options& o, int n, int prompt_len, int gen) {
  auto eng = llm_engine::start(sys, o);
  std::mutex mu;
  std::condition_variable cv;
  int open = n;
  std::int64_t tokens = 0;
  generation_params gp;
  gp.max_tokens = gen;
  gp.sampling.temperature = 0;
  gp.ignore_eos = true;
  const int vocab = eng->config().vocab - 256;
  const double t0 = now_s();
  for (int i = 0; i < n; ++i) {
    std::vector<std::int32_t> prompt(static_cast<std::size_t>(prompt_len));
    for (int j = 0; j < prompt_len; ++j) prompt[static_cast<std::size_t>(j)] = (i * 131 + j * 17) % vocab;
    const auto r = eng->submit(std::move(prompt), gp, [&](const stream_event& ev) {
      std::lock_guard lock(mu);
      if (ev.token >= 0) ++tokens;
      if (ev.finished && --open == 0) cv.notify_all();
    });
    if (!r.ok()) throw std::runtime_error(std::string("submit failed: ") + r.message);
  }
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return open == 0; });
  }
  result res;
  res.seconds = now_s() - t0;
  res.tokens = tokens;
  res.stats = eng->stats();
  res.steps = res.stats.steps;
  return res;
}

} // namespace

int run_engine_benchmark(const engine_bench_options& opt) {
  namespace fs = std::filesystem;
  const std::string base = (fs::path(opt.work_dir) / ("k3_engine_bench_" + std::to_string(::getpid()))).string();
  const std::string balanced = base + "/balanced", skewed = base + "/skewed";
  model::make_model_options mo; // the demo checkpoint
  model::make_model(mo, balanced);
  mo.hot_experts = 2;
  model::make_model(mo, skewed);

  caf::actor_system_config cfg;
  llm_engine::add_types(cfg);
  caf::actor_system sys{cfg};

  std::printf("1. runtime overhead: null executor (zero-cost steps), 8-token prompts, %d tokens each\n"
              "   us/step = wall time per step (round trip to the stream actor, request actors, sinks, on 2 cores);\n"
              "   policy = the scheduler actor in schedule() + apply(); +send = plus sending the token events\n",
              opt.quick ? 64 : 256);
  table t1({{"concurrent", 11}, {"steps", 8}, {"steps/s", 10}, {"tokens/s", 11}, {"us/step", 9},
            {"policy us/step", 15}, {"+send us/step", 14}});
  for (int n : {1, 64, 256}) {
    engine_options o;
    o.model_dir = balanced;
    o.null_executor = true;
    o.kv_memory_bytes = 512ll << 20;
    o.max_model_len = 1024;
    o.max_num_batched_tokens = 4096;
    const auto r = run_load(sys, o, n, 8, opt.quick ? 64 : 256);
    t1.row({std::to_string(n), std::to_string(r.steps), fmt(r.steps / r.seconds, 0), fmt(r.tokens / r.seconds, 0),
            fmt(r.seconds / r.steps * 1e6, 1), fmt(r.stats.policy_ns / 1e3 / r.steps, 1),
            fmt((r.stats.policy_ns + r.stats.deliver_ns) / 1e3 / r.steps, 1)});
  }

  std::printf("\n2. demo model (%s), 32-token prompts, 32 tokens each\n", "kimi_k3 4 layers, hidden 256, 8 experts top-2");
  table t2({{"concurrent", 11}, {"steps", 8}, {"seconds", 9}, {"gen tok/s", 11}});
  for (int n : {1, 8, 32}) {
    engine_options o;
    o.model_dir = balanced;
    o.kv_memory_bytes = 256ll << 20;
    o.max_model_len = 1024;
    const auto r = run_load(sys, o, n, 32, 32);
    t2.row({std::to_string(n), std::to_string(r.steps), fmt(r.seconds, 3), fmt(r.tokens / r.seconds, 1)});
  }

  std::printf("\n3. routing at concurrency 32 (demo model; skewed = 2 hot experts of 8)\n");
  table t3({{"routing", 9}, {"experts", 22}, {"gen tok/s", 11}, {"rows per shard", 30}});
  for (const auto* which : {"balanced", "skewed"}) {
    for (int mode = 0; mode < 3; ++mode) {
      engine_options o;
      o.model_dir = std::string(which) == "balanced" ? balanced : skewed;
      o.kv_memory_bytes = 256ll << 20;
      o.max_model_len = 1024;
      o.expert_parallel_size = mode ? 4 : 0;
      o.num_redundant_experts = mode == 2 ? 4 : 0;
      const auto r = run_load(sys, o, 32, 32, 32);
      std::string rows;
      for (auto x : r.stats.shard_rows) {
        if (!rows.empty()) rows.push_back(' ');
        rows.append(std::to_string(x));
      }
      t3.row({which, mode == 0 ? "in the step" : mode == 1 ? "4 shards" : "4 shards + 4 replicas",
              fmt(r.tokens / r.seconds, 1), rows.empty() ? "-" : rows});
    }
  }
  fs::remove_all(base);
  return 0;
}

} // namespace k3::bench
