#pragma once
// Per-GPU memory plan of a deployment (the most loaded GPU: pipeline stage with the embedding
// or lm_head, EP rank with the rounded-up expert count):
//
//   usable × gpu_memory_utilization = trunk weights + expert weights + activations + reserved
//                                     + KV budget
//   KV budget = sequences × (KDA state slots × state per sequence + tokens × MLA row bytes)
//
// KDA state is sharded by heads over TP and by layers over PP; the MLA latent is replicated on
// every TP rank (one latent per token shared by all heads) and split by layers over PP.
// The guide's own figures (192 GB per B300, 144 GB per B200) are shown next to the sourced ones.

#include <cstdint>
#include <string>

#include "runtime/sim/model_desc.hpp"
#include "runtime/sim/params.hpp"
#include "runtime/sim/plan.hpp"

namespace k3::sim {

struct memory_plan {
  // Per GPU, bytes.
  double trunk_weights = 0;     ///< attention, dense, shared/latent/router, embedding / lm_head share
  double expert_weights = 0;    ///< routed experts (incl. redundant replicas)
  double activations = 0;       ///< activation workspace at max_num_batched_tokens
  double reserved = 0;          ///< CUDA context, NCCL, graphs
  double usable = 0;            ///< usable HBM (gpu.usable_memory_gb)
  double budget = 0;            ///< usable × gpu_memory_utilization
  double kv_budget = 0;         ///< what is left for state and cache (negative: does not fit)
  double state_per_seq = 0;     ///< KDA + conv state of one sequence on this GPU (all slots)
  double kv_per_token = 0;      ///< MLA latent bytes per token on this GPU
  int experts_per_gpu = 0;      ///< routed experts per MoE layer held here (incl. redundant)
  int moe_layers_held = 0;      ///< MoE layers whose experts this GPU holds a slice of
  bool fits = false;
  std::string why;              ///< when it does not fit: which part and by how much
  std::int64_t max_seqs_at_context = 0; ///< per replica, every sequence at max_model_len
  std::int64_t state_only_seqs = 0;     ///< per replica if the whole budget went to state
  std::int64_t kv_token_capacity = 0;   ///< per replica if the whole budget went to MLA cache
  // Cluster totals.
  double cluster_nominal = 0, cluster_usable = 0, cluster_guide = 0;
  double checkpoint = 0;        ///< weights as served, whole model
  /// The same plan at the guide's per-card figure (0 when the plan states none): what is left
  /// for state and cache (negative: the guide's own card would not hold the weights).
  double guide_kv_budget = 0;
  int replicas = 1;

  [[nodiscard]] double weights() const { return trunk_weights + expert_weights; }
};

[[nodiscard]] memory_plan plan_memory(const model_desc& m, const plan& p, const cost_params& c);

} // namespace k3::sim
