#pragma once
// One simulated deployment: model + plan + parameters + routing, with the cost model and the
// memory plan derived from them — what `k3 sim`, `k3 serve --simulate`, the validation points,
// the benchmark and the tests all build the same way.

#include <memory>
#include <vector>

#include "runtime/sim/cost_model.hpp"
#include "runtime/sim/memory_plan.hpp"
#include "runtime/sim/workload.hpp"

namespace k3::sim {

struct deployment {
  std::shared_ptr<const cost_model> cost;
  memory_plan memory;
  [[nodiscard]] const model_desc& model() const { return cost->model(); }
  [[nodiscard]] const plan& layout() const { return cost->deployment(); }
};

[[nodiscard]] inline deployment make_deployment(const model_desc& m, const plan& p, const cost_params& c = {},
                                                const routing_spec& r = {}) {
  deployment d;
  d.cost = std::make_shared<const cost_model>(m, p, c, expert_popularity(r, m.experts));
  d.memory = plan_memory(m, p, c);
  return d;
}

/// Fixed-length traffic: poisson / fixed_rate (`load` = requests/s) or closed (`load` = clients).
[[nodiscard]] inline workload_spec fixed_workload(workload_spec::kind k, double load, std::int64_t requests, std::int64_t input,
                                                  std::int64_t output) {
  workload_spec w;
  w.k = k;
  if (k == workload_spec::kind::closed) w.concurrency = static_cast<int>(load);
  else w.rate = load;
  w.num_requests = requests;
  w.input = {length_dist::kind::fixed, double(input), 0};
  w.output = {length_dist::kind::fixed, double(output), 0};
  return w;
}

} // namespace k3::sim
