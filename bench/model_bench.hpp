#pragma once
// `k3 bench model --model DIR`: llama-bench's protocol on a k3 checkpoint, so the numbers
// compare directly with `llama-bench` on the same weights converted to GGUF:
//   pp<P>   prompt processing: P tokens in one step on an empty sequence, tokens/s
//   tg<N>   text generation: N single-token steps from an empty sequence (or after a D-token
//           prompt with --depth D, llama-bench's -d), tokens/s
// each repeated -r times and reported as mean ± standard deviation of the per-run rates, at
// --threads N (kernel pool size). After the table, decode is set against its memory floor
// measured in the same run:
//   floor time per token = active bytes per token / streaming-read bandwidth
// where active bytes = weights one decode token reads (attention, dense/shared FFN, top-k
// experts, head) + KDA state read and written + the MLA cache rows read at the tg run's mean
// context, and the bandwidth is measured by streaming the weights' own bytes where the model
// reads them (the in-memory copy, or the file mapping; bigger than L3); decode steps and the streaming read are timed alternately so both see the same
// machine state. Then --batch B sequences (16 by default) decode one token each per step,
// against the same floor for the bytes such a step reads (every routed expert once).

#include <string>

namespace k3::bench {

struct model_bench_options {
  std::string model_dir;
  int threads = 0;         ///< 0: the kernel pool's default (OMP_NUM_THREADS or the cores)
  int prompt_tokens = 512; ///< -p
  int gen_tokens = 128;    ///< -n
  int repetitions = 5;     ///< -r
  int depth = 0;           ///< -d: tokens already in the context before tg
  double seconds = 3.0;    ///< floor measurement: seconds of alternating decode / streaming read
  int batch = 16;          ///< --batch: sequences decoding together in the batched-decode rows
  bool bf16_activations = false; ///< --bf16-activations: the opt-in vdpbf16ps numerics
  bool int8_activations = false; ///< --int8-activations: the opt-in int8 expert numerics
  bool mmap_weights = false;     ///< --mmap-weights: weights read from the file mapping (no in-memory copy)
};

int run_model_benchmark(const model_bench_options& o);

} // namespace k3::bench
