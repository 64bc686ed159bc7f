#pragma once
// A deployment plan: a GPU model, a GPU count and the `k3 serve` (= vLLM / SGLang) launch flags
// that say how the model is split. Built in: the deployment guide's plans A, B and C
// (config/plans/*.json: {"name", "title", "hardware", "gpus", "guide_memory_gb", "guide_claim",
// "command"}); any plan file in that form; or a bare command line with --hardware / --gpus.
//
// Layout rules (what the flags mean here; docs/simulator.md has the reasoning):
//   world   = gpus;  replica = attn_tp × pp GPUs;  dp = world / replica (attention replicas)
//   --dp N without --enable-dp-attention adds N replicas: world = tp × pp × dp
//   --enable-dp-attention (SGLang): attention runs TP = tp / dp inside each of dp groups
//   ep      = GPUs that share one MoE layer's experts: --expert-parallel-size, or tp × dp with
//             --enable-expert-parallel; ep ≤ 1 → experts are TP-sharded like dense weights.
//             ep larger than a pipeline stage (tp × dp) must equal world: the experts of
//             every layer are spread over the whole cluster (plan C: TP8 PP3 EP72 on 72 GPUs).

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/sim/hardware.hpp"
#include "runtime/sim/model_desc.hpp"

namespace k3::sim {

struct plan {
  std::string name;        ///< "A", or the file / "command line"
  std::string title;
  std::string command;     ///< the launch line as given
  std::string guide_claim; ///< what the deployment guide says about memory (built-in plans)
  double guide_memory_gb = 0; ///< the guide's per-card figure (192 for B300, 144 for B200)
  gpu_spec gpu;
  int world = 1;           ///< GPUs
  int attn_tp = 1;         ///< tensor parallelism of attention and dense weights
  int pp = 1;              ///< pipeline stages
  int dp = 1;              ///< attention replicas (each runs its own scheduler)
  int ep = 0;              ///< expert-parallel ranks of one MoE layer (≤ 1: TP-sharded experts)
  int num_redundant_experts = 0; ///< extra expert replicas per layer, spread over the EP ranks
  std::int64_t max_model_len = 0;
  int max_num_seqs = 0;            ///< per replica; 0: as many as the memory plan holds
  int max_num_batched_tokens = 8192;
  double gpu_memory_utilization = 0.9;
  wdtype trunk_dtype = wdtype::bf16, expert_dtype = wdtype::mxfp4; ///< as served
  int kv_bytes = 2;               ///< MLA cache element: 2 (bf16) or 1 (fp8)
  std::string dtype_note;          ///< how --dtype / --quantization were read

  [[nodiscard]] int nodes() const { return (world + gpu.nvlink_domain - 1) / gpu.nvlink_domain; }
  [[nodiscard]] int ep_ranks() const { return ep > 1 ? ep : 1; }
  /// True when one layer's experts span pipeline stages (every GPU holds a slice of every layer).
  [[nodiscard]] bool ep_spans_stages() const { return ep > attn_tp * dp; }
  [[nodiscard]] std::string describe() const;
};

/// Parses a launch line ("k3 serve …", "vllm serve MODEL …", "python -m sglang.launch_server …",
/// or bare flags) against `gpu`; gpus = 0 derives the count from the flags. Unknown flags and
/// impossible layouts throw sim_error naming the flag.
[[nodiscard]] plan plan_from_command(std::string_view command, const gpu_spec& gpu, int gpus, const model_desc& m);
/// "A" / "B" / "C", a plan file, or a command line (needs `hardware`). `hardware` / `gpus`
/// override a plan's own when set.
[[nodiscard]] plan load_plan(const std::string& spec, const std::string& hardware, int gpus, const model_desc& m);

} // namespace k3::sim
