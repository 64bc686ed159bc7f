#pragma once
// Step time of one scheduler step of one attention replica: a roofline per layer kind.
//
//   t_step = Σ_kinds max(bytes / (HBM · eff), FLOPs / (peak · eff))        trunk GEMMs per kind
//          + lm_head (sampled rows) + KDA state / math + MLA cache / math
//          + n_moe · max_over_EP_ranks(expert bytes, expert FLOPs)            skew + placement
//          + TP all-reduces (NVLink ring, or hierarchical NVLink + NIC across domains)
//          + EP dispatch/combine (bytes over NVLink inside the domain, NIC outside) + latencies
//          + pipeline hand-offs and bubbles (pp_microbatches in flight)
//          + per-layer launch gaps + per-step host overhead
//
// Bytes and FLOPs are per GPU (TP splits heads and dense weights, EP splits experts; the MLA
// latent is read whole on every TP rank). MoE layers see the tokens of every attention group
// that feeds the EP group (DP attention, or DP replicas when EP spans the cluster). The
// routed-expert part for N tokens is memoized: a simulated run calls step() per step.
// Every factor is a named cost_params field.

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/sim/model_desc.hpp"
#include "runtime/sim/params.hpp"
#include "runtime/sim/plan.hpp"
#include "runtime/sim/routing.hpp"

namespace k3::sim {

/// One sequence's part of a step: `tokens` new tokens after `position` computed ones.
struct seq_chunk {
  std::int64_t tokens = 1;
  std::int64_t position = 0;
  bool sampled = true;
};

struct step_cost {
  double total = 0;
  double trunk = 0, lm_head = 0, kda = 0, mla = 0, moe = 0, allreduce = 0, all_to_all = 0, pipeline = 0, overhead = 0;
  std::int64_t tokens = 0;       ///< tokens computed this step (after the PD rule)
  std::int64_t moe_tokens = 0;   ///< tokens entering each MoE layer's EP group
};

class cost_model {
public:
  cost_model(model_desc m, plan p, cost_params c, const std::vector<double>& popularity);

  [[nodiscard]] step_cost step(std::span<const seq_chunk> chunks) const;
  /// `batch` decode tokens at `context` each (one step).
  [[nodiscard]] step_cost decode(int batch, std::int64_t context) const;
  /// One prompt of `tokens` prefilled alone in chunks of max_num_batched_tokens: total seconds.
  [[nodiscard]] double prefill_alone(std::int64_t tokens) const;

  /// One EP rank's routed-expert time for one MoE layer: `experts` active experts, `rows`
  /// token rows (what an expert-shard actor charges for one job).
  [[nodiscard]] double rank_time(double experts, double rows) const;

  [[nodiscard]] const expert_load& load() const noexcept { return load_; }
  [[nodiscard]] const model_desc& model() const noexcept { return m_; }
  [[nodiscard]] const plan& deployment() const noexcept { return p_; }
  [[nodiscard]] const cost_params& params() const noexcept { return c_; }
  /// Attention groups whose tokens meet in one MoE layer's EP group.
  [[nodiscard]] int moe_groups() const noexcept { return groups_; }

private:
  [[nodiscard]] step_cost model_time(std::span<const seq_chunk> chunks) const;
  [[nodiscard]] double moe_layer(std::int64_t tokens) const;
  [[nodiscard]] double allreduce(double bytes) const;
  [[nodiscard]] double all_to_all(double bytes) const;

  model_desc m_;
  plan p_;
  cost_params c_;
  expert_load load_;
  int groups_ = 1;
  double bw_ = 0, f_trunk_ = 0, f_expert_ = 0, f_bf16_ = 0, nvl_ = 0, nic_ = 0;
  mutable std::unordered_map<std::int64_t, double> moe_memo_;
  mutable std::vector<seq_chunk> scratch_;
};

} // namespace k3::sim
