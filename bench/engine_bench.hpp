#pragma once
// `k3 bench engine`: the actor engine's own overhead and its throughput.
//   1. null executor (steps cost nothing): steps/s, tokens/s and µs per step at 1, 64 and 256
//      concurrent requests — everything but the model: scheduling, KV bookkeeping, the
//      scheduler→stream→scheduler round trip, one token event per request per step, the
//      request actors and their sinks;
//   2. the demo-size model: generated tokens/s at concurrency 1, 8, 32;
//   3. balanced vs skewed routing (2 hot experts), experts local / on 4 shards / on 4 shards
//      with 4 redundant experts.
// Checkpoints are written to a temporary directory by make_model.

#include <string>

namespace k3::bench {

struct engine_bench_options {
  std::string work_dir = "/tmp"; ///< where the demo checkpoints are written
  bool quick = false;
};

int run_engine_benchmark(const engine_bench_options& o);

} // namespace k3::bench
