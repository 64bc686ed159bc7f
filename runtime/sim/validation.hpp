#pragma once
// Published serving numbers the simulator must reproduce with one set of defaults
// (`../shared/spec/hardware.md` §5), each run with its own workload and layout:
//   * vLLM v0.27.1 (no speculation), K3 on 8x B300, TP8 EP8, 8K in / 1K out, concurrency
//     1 / 4 / 16 → 83 / 167 / 258 output tok/s per node: discrete-event runs, closed loop;
//   * SGLang day-0, K3 on 8x GB300, TP8, batch 1 decode → 112.5 tok/s: one decode step;
//   * SGLang + OME, Kimi K2 on H200, PD decode nodes, DP attention + EP96, 480 running per
//     GPU (our reading of the blog's "decode batch 480") at 2000 in / 100 out → 288k decode
//     tok/s on 96 GPUs (3.0k per GPU): one decode
//     step at the mean context of that workload.

#include <string>
#include <vector>

#include "runtime/sim/params.hpp"

namespace k3::sim {

struct validation_point {
  std::string name, source, unit;
  double published = 0, simulated = 0;
  [[nodiscard]] double error() const { return published != 0 ? simulated / published - 1 : 0; }
};

[[nodiscard]] std::vector<validation_point> run_validation(const cost_params& params);
[[nodiscard]] std::string validation_table(const std::vector<validation_point>& pts);

} // namespace k3::sim
