#pragma once
// `k3 bench sim`: wall time of the cluster simulator (the goal: >= 10k simulated
// requests per wall second on plan C). Each scenario runs `repeats` times; the median is
// reported with the simulated steps per wall second.

namespace k3::bench {

struct sim_bench_options {
  int repeats = 3;
  bool quick = false; ///< 2k instead of 10k requests
};

int run_sim_benchmark(const sim_bench_options& o);

} // namespace k3::bench
