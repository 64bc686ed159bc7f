#include "bench/sim_bench.hpp"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "actors/sim_cluster.hpp"
#include "runtime/sim/deployment.hpp"
#include "runtime/sim/simulator.hpp"

namespace k3::bench {

int run_sim_benchmark(const sim_bench_options& o) {
  using namespace k3::sim;
  const auto m = load_model_desc("kimi-k3");
  const cost_params c;
  struct scenario {
    std::string name, plan, workload;
    int input, output;
  };
  const int n = o.quick ? 2000 : 10000;
  const std::vector<scenario> list = {
      {"plan C, Poisson 20 req/s, 2000/200", "C", "poisson:20", 2000, 200},
      {"plan C, closed loop 512, 2000/200", "C", "closed:512", 2000, 200},
      {"plan A, Poisson 4 req/s, 8192/1024", "A", "poisson:4", 8192, 1024},
      {"plan B, overload 100 req/s, 4000/400", "B", "poisson:100", 4000, 400},
  };
  std::printf("k3 bench sim: %d requests per scenario, median of %d runs\n", n, o.repeats);
  std::printf("  %-40s %10s %14s %14s %12s\n", "scenario", "wall s", "requests/s", "steps/s", "virtual s");
  for (const auto& s : list) {
    const auto d = make_deployment(m, load_plan(s.plan, "", 0, m), c);
    const auto w = parse_workload(s.workload, fixed_workload(workload_spec::kind::poisson, 1, n, s.input, s.output));
    std::vector<sim_result> runs;
    for (int r = 0; r < o.repeats; ++r) runs.push_back(simulate(*d.cost, d.memory, w, sim_options{}));
    std::sort(runs.begin(), runs.end(), [](const sim_result& a, const sim_result& b) { return a.wall_seconds < b.wall_seconds; });
    const auto& med = runs[runs.size() / 2];
    std::printf("  %-40s %10.3f %14.0f %14.0f %12.1f\n", s.name.c_str(), med.wall_seconds, double(med.submitted) / med.wall_seconds,
                double(med.steps) / med.wall_seconds, med.duration);
  }
  // The same traffic through the production actors (mock stream + 8 mock shard actors, every
  // MoE layer of every step as messages) vs the plain discrete-event run.
  {
    const auto d = make_deployment(m, load_plan("A", "", 0, m), c);
    const auto w = fixed_workload(workload_spec::kind::closed, 16, n / 20, 2000, 100);
    const auto des = simulate(*d.cost, d.memory, w, sim_options{});
    const auto act = actors::simulate_actors(d.cost, d.memory, w, sim_options{});
    std::printf("  plan A, closed 16, 2000/100, %lld requests: discrete-event %.3f s wall (%.0f req/s), actors %.3f s wall (%.0f req/s);\n"
                "    TPOT p50 %.2f vs %.2f ms, TTFT p50 %.1f vs %.1f ms\n",
                static_cast<long long>(w.num_requests), des.wall_seconds, double(des.submitted) / des.wall_seconds, act.wall_seconds,
                double(act.submitted) / act.wall_seconds, des.tpot.p50 * 1e3, act.tpot.p50 * 1e3, des.ttft.p50 * 1e3, act.ttft.p50 * 1e3);
  }
  return 0;
}

} // namespace k3::bench
