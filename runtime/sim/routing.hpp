#pragma once
// Expert routing skew and the per-GPU MoE load it causes.
//
// Popularity p_e (Σ = 1) comes from:
//   uniform            every expert equally likely (K3's Quantile-Balanced router is near this)
//   power-law:ALPHA    Zipf: the i-th most popular expert ∝ (i+1)^-ALPHA, popularity ranks
//                      assigned to experts in a seeded random order (hot experts land anywhere)
//   counts:FILE        recorded per-expert token counts: `k3 serve`'s /metrics text
//                      (k3:expert_tokens_total{…,expert="N"} C), CSV `expert,count`, or one
//                      count per line
// A token picks its top-k without replacement; expert e is picked with q_e = min(1, k·p_e)
// (water-filled so that Σ q_e = k).
//
// Placement over R EP ranks: without redundant experts, contiguous ranges (vLLM's linear
// placement: rank r holds experts [r·E/R, (r+1)·E/R)); with redundant experts, EPLB's policy
// (deepseek-ai/EPLB): each extra replica goes to the expert with the highest load per replica,
// then balanced packing of the replicas, heaviest first, onto the least loaded rank with room.
// Tokens of an expert split evenly over its replicas.
//
// For N tokens a rank's expected active experts and token rows are sums over its replicas;
// the simulator takes mean + z·σ with z = sqrt(2 ln R) (expected maximum of R roughly normal
// loads), so small batches see the imbalance of a random draw, not only the average.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace k3::sim {

struct routing_spec {
  enum class kind { uniform, power_law, counts } k = kind::uniform;
  double alpha = 1.0;
  std::string file;
  std::uint64_t seed = 1;
  [[nodiscard]] std::string describe() const;
};

/// "uniform", "power-law:1.2" (or "power:1.2"), "counts:FILE"; throws sim_error.
[[nodiscard]] routing_spec parse_routing(std::string_view s);
/// Per-expert popularity, Σ = 1. Throws sim_error for a counts file that does not match `experts`.
[[nodiscard]] std::vector<double> expert_popularity(const routing_spec& r, int experts);
/// Parses recorded counts (any of the three forms above); `source` names the file in errors.
[[nodiscard]] std::vector<double> parse_expert_counts(std::string_view text, int experts, const std::string& source);

class expert_load {
public:
  /// ranks ≤ 1: one rank holding every expert (TP-sharded experts).
  expert_load(const std::vector<double>& popularity, int top_k, int ranks, int redundant);

  struct rank_load {
    double experts = 0; ///< active expert replicas (expected max over ranks)
    double rows = 0;    ///< token rows (expected max over ranks)
    double experts_var = 0, rows_var = 0; ///< variances (ranks_mean only)
  };
  /// Most loaded rank for `tokens` tokens routed into the layer: per rank mean + z·σ, then the
  /// rank with the largest `weight_bytes·experts + flop_weight·rows` as the caller prices it.
  [[nodiscard]] std::vector<rank_load> ranks(double tokens) const;
  /// Expected (mean, no z·σ) load of each rank: what one step sends each expert-shard actor.
  [[nodiscard]] std::vector<rank_load> ranks_mean(double tokens) const;
  /// Expert ids placed on `rank` (a replicated expert appears on several ranks).
  [[nodiscard]] std::vector<int> rank_experts(int rank) const;
  [[nodiscard]] int num_ranks() const noexcept { return ranks_; }
  /// Share of token rows each rank gets (Σ = 1): the placement's imbalance at large batches.
  [[nodiscard]] std::vector<double> rank_share() const;
  [[nodiscard]] const std::vector<double>& selection() const noexcept { return q_; }
  [[nodiscard]] int replicas_of(int e) const { return replicas_[static_cast<std::size_t>(e)]; }

private:
  struct slot {
    int expert;
    double q; // per-token probability that this replica gets the token
  };
  std::vector<double> q_;
  std::vector<int> replicas_;
  std::vector<std::vector<slot>> placed_; // per rank
  int ranks_ = 1;
  double z_ = 0;
};

} // namespace k3::sim
