#include "runtime/sim/validation.hpp"

#include <cmath>
#include <cstdio>

#include "runtime/sim/deployment.hpp"
#include "runtime/sim/simulator.hpp"

namespace k3::sim {

std::vector<validation_point> run_validation(const cost_params& params) {
  std::vector<validation_point> out;
  const auto k3m = load_model_desc("kimi-k3");
  {
    const auto p = plan_from_command("vllm serve moonshotai/Kimi-K3 --tensor-parallel-size 8 --expert-parallel-size 8 --max-model-len 131072 "
                                     "--gpu-memory-utilization 0.95",
                                     load_gpu_spec("b300"), 8, k3m);
    const auto d = make_deployment(k3m, p, params);
    const double published[] = {83, 167, 258};
    const int conc[] = {1, 4, 16};
    for (int i = 0; i < 3; ++i) {
      const auto w = fixed_workload(workload_spec::kind::closed, conc[i], 4 * conc[i], 8192, 1024);
      const auto r = simulate(*d.cost, d.memory, w, sim_options{});
      out.push_back({"K3 8x B300 TP8 EP8, 8K/1K, concurrency " + std::to_string(conc[i]),
                     "vLLM v0.27.1 baseline (vllm-project.github.io 2026-09-13 K3 post)", "output tok/s per node", published[i],
                     r.output_throughput});
    }
  }
  {
    const auto p = plan_from_command("--tp 8 --ep 8 --max-model-len 131072", load_gpu_spec("gb300_nvl72"), 8, k3m);
    out.push_back({"K3 8x GB300 TP8, batch-1 decode", "SGLang day-0 blog (after 15 optimizations, no DSpark)", "tok/s", 112.5,
                   1.0 / make_deployment(k3m, p, params).cost->decode(1, 2048).total});
  }
  {
    const auto k2 = load_model_desc("kimi-k2");
    auto c = params;
    c.pd_decode = true;
    const auto p = plan_from_command("--tp 96 --dp 96 --enable-dp-attention --ep 96 --max-model-len 131072", load_gpu_spec("h200"), 96, k2);
    const int batch = 480;
    out.push_back({"Kimi K2, 96x H200 decode (DP attention, EP96), 480 per GPU, 2000/100", "SGLang + OME (lmsys blog 2025-07-20)",
                   "decode tok/s per GPU", 288000.0 / 96, batch / make_deployment(k2, p, c).cost->decode(batch, 2050).total});
  }
  return out;
}

std::string validation_table(const std::vector<validation_point>& pts) {
  std::string s = "| point | unit | published | simulated | error |\n|---|---|---|---|---|\n";
  char buf[512];
  for (const auto& p : pts) {
    std::snprintf(buf, sizeof buf, "| %s | %s | %.1f | %.1f | %+.1f%% |\n", p.name.c_str(), p.unit.c_str(), p.published, p.simulated, 100 * p.error());
    s += buf;
  }
  return s;
}

} // namespace k3::sim
