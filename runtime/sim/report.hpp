#pragma once
// What `k3 sim` prints and writes: a text report, one JSON document for scripts, per-request
// CSV, and SVG plots (memory breakdown per GPU, latency vs load, pool usage over time, EP rank
// load). All plain string building; no plotting library.

#include <string>
#include <vector>

#include "runtime/sim/cost_model.hpp"
#include "runtime/sim/memory_plan.hpp"
#include "runtime/sim/simulator.hpp"

namespace k3::sim {

/// One simulated point of a load sweep (or the single run).
struct load_point {
  std::string label; ///< "poisson 4 req/s", "closed 16"
  double load = 0;   ///< the swept value (rate or concurrency)
  sim_result r;
};

struct report_input {
  const model_desc* model = nullptr;
  const plan* deployment = nullptr;
  const memory_plan* memory = nullptr;
  const cost_model* cost = nullptr;
  const workload_spec* workload = nullptr;
  std::string routing;
  std::vector<load_point> points; ///< empty: memory plan only
  sim_options options;
};

[[nodiscard]] std::string text_report(const report_input& in);
[[nodiscard]] std::string json_report(const report_input& in);
[[nodiscard]] std::string requests_csv(const sim_result& r);
[[nodiscard]] std::string svg_memory(const report_input& in);
[[nodiscard]] std::string svg_latency_vs_load(const report_input& in);
[[nodiscard]] std::string svg_pools(const sim_result& r, const std::string& title);
[[nodiscard]] std::string svg_expert_load(const report_input& in);

} // namespace k3::sim
