#pragma once
// MoE router of the noaux_tc family (Kimi Linear, Kimi K3; spec §9), fp32, and the token
// permutation that feeds the expert-grouped GEMM.
//
//   s      = sigmoid(logits)                      logits = x · W_gateᵀ (fp32, computed by caller)
//   choice = s + e_score_correction_bias          bias is for SELECTION only
//   groups: keep `topk_group` of `num_groups` groups ranked by the sum of their top-2 choices
//   idx    = top-k of choice among kept experts   (ties: lower expert id first)
//   w      = s[idx]; if renormalize: w /= Σw + 1e-20; w *= routed_scaling_factor
//
// Output ids are sorted by descending choice score. Pure functions, safe from any thread.

#include <cstdint>
#include <vector>

namespace k3::router {

struct params {
  int num_experts = 0;
  int top_k = 0;
  int num_groups = 1;   ///< num_expert_group
  int topk_group = 1;   ///< groups kept
  bool renormalize = true;
  float scaling = 1.0f; ///< routed_scaling_factor
};

/// logits [T, E]; bias [E] or nullptr; ids [T, k]; weights [T, k].
/// Throws std::invalid_argument for inconsistent params (naming the field).
void route(const float* logits, std::int64_t T, const float* bias, const params& p, std::int32_t* ids,
           float* weights);

/// Token order for an expert-grouped GEMM: assignments (token t, slot j) sorted by expert id
/// (stable in t). offsets[e]..offsets[e+1] are the rows of expert e; token[r] / slot[r] say
/// where sorted row r came from; row_of[t·k + j] is the inverse.
struct moe_plan {
  std::vector<std::int64_t> offsets; ///< [E + 1]
  std::vector<std::int32_t> token;   ///< [T·k]
  std::vector<std::int32_t> slot;    ///< [T·k]
  std::vector<std::int32_t> row_of;  ///< [T·k]
};

[[nodiscard]] moe_plan plan(const std::int32_t* ids, std::int64_t T, int k, int num_experts);

} // namespace k3::router
