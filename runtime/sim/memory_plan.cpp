#include "runtime/sim/memory_plan.hpp"

#include <algorithm>
#include <cmath>

namespace k3::sim {
namespace {
int ceil_div(int a, int b) { return (a + b - 1) / b; }
std::string gb(double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", b / 1e9);
  return buf;
}
} // namespace

memory_plan plan_memory(const model_desc& m, const plan& p, const cost_params& c) {
  memory_plan r;
  const int tp = p.attn_tp, pp = p.pp;
  const int kda = ceil_div(m.n_kda, pp), mla = ceil_div(m.n_mla, pp), dense = ceil_div(m.n_dense, pp), moe = ceil_div(m.n_moe, pp);
  const double tb = bytes_per_param(p.trunk_dtype);
  // Embedding and lm_head are vocab-parallel over TP, on the first and last stage.
  const double vocab_part = (pp == 1 ? m.embed_params + m.head_params : std::max(m.embed_params, m.head_params)) * 2.0;
  r.trunk_weights = ((kda * m.kda_params + mla * m.mla_params + dense * m.dense_ffn_params + moe * m.moe_trunk_params) * tb + vocab_part) / tp;
  const double eb = m.expert_bytes(p.expert_dtype);
  if (p.ep > 1) {
    r.moe_layers_held = p.ep_spans_stages() ? m.n_moe : moe;
    r.experts_per_gpu = ceil_div(m.experts, p.ep) + ceil_div(p.num_redundant_experts, p.ep);
    r.expert_weights = double(r.moe_layers_held) * r.experts_per_gpu * eb;
  } else {
    r.moe_layers_held = moe;
    r.experts_per_gpu = m.experts;
    r.expert_weights = double(moe) * m.experts * eb / tp;
  }
  r.activations = double(p.max_num_batched_tokens) * m.hidden * 2.0 * c.activation_hidden_buffers +
                  double(std::min(p.max_num_batched_tokens, p.max_num_seqs > 0 ? p.max_num_seqs : 256)) * m.vocab / tp * 4.0;
  r.reserved = c.reserved_gb * 1e9;
  r.usable = p.gpu.usable_memory_gb * 1e9;
  r.budget = r.usable * p.gpu_memory_utilization;
  r.kv_budget = r.budget - r.weights() - r.activations - r.reserved;
  r.state_per_seq = double(c.state_slots_per_request) * kda * (m.kda_state_bytes() + m.conv_state_bytes()) / tp;
  r.kv_per_token = double(mla) * m.mla_row() * p.kv_bytes;
  r.replicas = p.dp;
  const double per_seq = r.state_per_seq + double(p.max_model_len) * r.kv_per_token;
  if (r.kv_budget > 0) {
    r.max_seqs_at_context = static_cast<std::int64_t>(std::floor(r.kv_budget / per_seq));
    r.state_only_seqs = r.state_per_seq > 0 ? static_cast<std::int64_t>(std::floor(r.kv_budget / r.state_per_seq)) : 0;
    r.kv_token_capacity = r.kv_per_token > 0 ? static_cast<std::int64_t>(std::floor((r.kv_budget - r.state_per_seq) / r.kv_per_token)) : 0;
  }
  if (r.kv_budget <= 0) {
    r.why = "weights " + gb(r.weights()) + " + activations " + gb(r.activations) + " + reserved " + gb(r.reserved) + " exceed " +
            gb(r.budget) + " (" + std::to_string(p.gpu_memory_utilization).substr(0, 4) + " of " + gb(r.usable) + ") per GPU by " +
            gb(-r.kv_budget);
  } else if (r.max_seqs_at_context < 1) {
    r.why = "after weights, " + gb(r.kv_budget) + " per GPU cannot hold one sequence at max-model-len " + std::to_string(p.max_model_len) +
            " (needs " + gb(per_seq) + ")";
  } else {
    r.fits = true;
  }
  r.cluster_nominal = p.world * p.gpu.memory_gb * 1e9;
  r.cluster_usable = p.world * p.gpu.usable_memory_gb * 1e9;
  r.cluster_guide = p.world * p.guide_memory_gb * 1e9;
  if (p.guide_memory_gb > 0)
    r.guide_kv_budget = p.guide_memory_gb * 1e9 * p.gpu_memory_utilization - r.weights() - r.activations - r.reserved;
  r.checkpoint = (m.trunk_params() - m.head_params) * tb + (m.embed_params + m.head_params) * 2.0 + double(m.n_moe) * m.experts * eb;
  return r;
}

} // namespace k3::sim
