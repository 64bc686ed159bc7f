#pragma once
// The simulator's named model parameters: every efficiency factor and overhead of the step-time
// and memory models, with its unit, default and the reason for the default. One set of defaults
// reproduces all validation points (README, tests/sim/validation_test.cpp); `k3 sim --param
// NAME=VALUE` changes one, `k3 sim --list-params` prints this table.

#include <string>
#include <string_view>
#include <vector>

namespace k3::sim {

struct cost_params {
  // Memory-bound streams (weights, KDA state, MLA cache): fraction of HBM bandwidth achieved.
  double mem_efficiency = 0.8;         ///< AIConfigurator's memory factor (hardware.md §2)
  double moe_mem_efficiency = 0.8;     ///< routed-expert weight streaming (as the other streams)
  double moe_expert_overhead_us = 11;  ///< fixed cost per active expert per layer per GPU: fitted (README, validation)
  // Compute-bound parts: fraction of dense peak achieved.
  double gemm_efficiency = 0.6;        ///< dense GEMMs at large M (trunk projections, lm_head)
  double moe_compute_efficiency = 0.5; ///< routed-expert grouped GEMMs at large M
  double attn_efficiency = 0.4;        ///< MLA and KDA kernels (FlashMLA / FlashKDA class)
  // Interconnect.
  double nvlink_efficiency = 0.8;      ///< busBw / line rate: ~370 of 450 GB/s (nccl-tests#212)
  double scale_out_efficiency = 0.85;  ///< DeepEP internode 43 of 50 GB/s (mxfp4.md §7.1)
  double allreduce_latency_us = 8;     ///< one small NCCL all-reduce inside an NVLink domain
  double a2a_latency_us = 40;          ///< one EP dispatch or combine (pplx EP8 1 token: ~42 us)
  double p2p_latency_us = 10;          ///< pipeline hand-off between stages (AIC P2P ~10 us)
  std::string dispatch = "fp8";        ///< EP payload: bf16 | fp8 (dispatch; combine is bf16) | latent
  // Host and launch overheads.
  double layer_overhead_us = 4;        ///< per layer per step: launch gaps not hidden by graphs
  double step_overhead_us = 300;       ///< per step: scheduling, sampling, host sync
  double prefill_token_overhead_us = 0;///< per prefill token per step (unfused prefill paths)
  // Pipeline.
  int pp_microbatches = 1;             ///< batches in flight through the pipeline (1: full bubble)
  // Memory plan.
  double reserved_gb = 3.5;            ///< per GPU for CUDA context, NCCL, graphs (AIC "other")
  double activation_hidden_buffers = 24; ///< hidden-sized bf16 activation buffers per batched token
  int state_slots_per_request = 1;     ///< KDA state slots each running request holds
  int block_size = 64;                 ///< MLA cache tokens per block
  // Roles.
  bool pd_decode = false;              ///< decode instance of a PD split: prompts arrive prefilled

  /// Sets `name` from text; throws sim_error naming the parameter for unknown names or values.
  void set(std::string_view name, std::string_view value);
  /// Empty if valid, else the message naming the parameter.
  [[nodiscard]] std::string validate() const;

private:
  void assign(std::string_view name, std::string_view value);
};

struct param_doc {
  std::string name, value, doc;
};
/// Every parameter with its current value and documentation (for --list-params and the JSON).
[[nodiscard]] std::vector<param_doc> describe_params(const cost_params& p);

} // namespace k3::sim
