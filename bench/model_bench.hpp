#pragma once
// `k3 bench model --model DIR`: decode tok/s at batch 1 and prefill tok/s (512-token prompt)
// of a checkpoint, against the memory floor measured in the same run:
//   floor time per token = active bytes per token / streaming-read bandwidth
// where active bytes = weights one decode token reads (attention, dense/shared FFN, top-k
// experts, head) + KDA state read and written + the MLA cache rows read, and the bandwidth is
// measured by streaming the checkpoint's own mapped bytes (bigger than L3). Decode steps and
// the streaming read are timed alternately so both see the same machine state.

#include <string>

namespace k3::bench {

struct model_bench_options {
  std::string model_dir;
  int prompt_tokens = 512;
  double seconds = 6.0;
};

int run_model_benchmark(const model_bench_options& o);

} // namespace k3::bench
