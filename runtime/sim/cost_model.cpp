#include "runtime/sim/cost_model.hpp"

#include <algorithm>
#include <cmath>

namespace k3::sim {

cost_model::cost_model(model_desc m, plan p, cost_params c, const std::vector<double>& pop)
    : m_(std::move(m)), p_(std::move(p)), c_(std::move(c)), load_(pop, m_.top_k, p_.ep_ranks(), p_.ep > 1 ? p_.num_redundant_experts : 0) {
  const auto& g = p_.gpu;
  bw_ = g.hbm_tb_s * 1e12;
  f_bf16_ = g.bf16_tflops * 1e12;
  f_trunk_ = p_.trunk_dtype == wdtype::fp8 && g.fp8_tflops > 0 ? g.fp8_tflops * 1e12 : f_bf16_;
  // MXFP4 experts: W4A8 (MXFP8 activations) on FP4-capable parts (SGLang K3 on Blackwell),
  // dequantized to bf16 on Hopper (Marlin / triton W4A16).
  if (p_.expert_dtype == wdtype::fp8 && g.fp8_tflops > 0) f_expert_ = g.fp8_tflops * 1e12;
  else if (p_.expert_dtype == wdtype::mxfp4 && g.fp4_tensor_cores) f_expert_ = g.fp8_tflops * 1e12;
  else f_expert_ = f_bf16_;
  nvl_ = g.nvlink_gb_s * 1e9 * c_.nvlink_efficiency;
  nic_ = g.scale_out_gb_s * 1e9 * c_.scale_out_efficiency;
  if (p_.ep > 1) groups_ = p_.ep_spans_stages() ? p_.dp : std::max(1, p_.ep / p_.attn_tp);
}

double cost_model::allreduce(double bytes) const {
  const int n = p_.attn_tp;
  if (n <= 1) return 0;
  const int dom = std::min(n, p_.gpu.nvlink_domain);
  const double lat = c_.allreduce_latency_us * 1e-6;
  if (n <= p_.gpu.nvlink_domain) return 2.0 * (n - 1) / n * bytes / nvl_ + lat;
  // Hierarchical: reduce-scatter / all-gather inside each domain, all-reduce of 1/dom across.
  const int nodes = (n + dom - 1) / dom;
  return 2.0 * (dom - 1) / dom * bytes / nvl_ + 2.0 * (nodes - 1) / nodes * (bytes / dom) / nic_ + 2 * lat +
         p_.gpu.scale_out_latency_us * 1e-6 * 2;
}

double cost_model::all_to_all(double bytes) const {
  // `bytes` leave each GPU for the other ep − 1 ranks, evenly; those outside the NVLink domain
  // go over the NIC concurrently with the NVLink part.
  const int ep = p_.ep;
  if (ep <= 1) return 0;
  const double remote = bytes * (ep - 1) / ep;
  const int in_dom = std::min(ep, p_.gpu.nvlink_domain);
  const double inside = ep > 1 ? remote * (in_dom - 1) / (ep - 1) : 0, outside = remote - inside;
  double t = std::max(inside / nvl_, outside / nic_) + c_.a2a_latency_us * 1e-6;
  if (outside > 0) t += p_.gpu.scale_out_latency_us * 1e-6;
  return t;
}

double cost_model::rank_time(double experts, double rows) const {
  if (experts <= 0) return 0;
  const double eb = m_.expert_bytes(p_.expert_dtype), ef = 2.0 * m_.expert_params;
  const double shard = p_.ep > 1 ? 1.0 : p_.attn_tp; // TP-sharded experts split every expert
  return std::max(experts * eb / shard / (bw_ * c_.moe_mem_efficiency), rows * ef / shard / (f_expert_ * c_.moe_compute_efficiency)) +
         experts * c_.moe_expert_overhead_us * 1e-6;
}

double cost_model::moe_layer(std::int64_t N) const {
  if (N <= 0) return 0;
  if (auto it = moe_memo_.find(N); it != moe_memo_.end()) return it->second;
  double worst = 0;
  for (const auto& r : load_.ranks(double(N))) worst = std::max(worst, rank_time(r.experts, r.rows));
  moe_memo_.emplace(N, worst);
  return worst;
}

step_cost cost_model::model_time(std::span<const seq_chunk> chunks) const {
  step_cost s;
  const double tp = p_.attn_tp, me = c_.mem_efficiency;
  double T = 0, S = 0, prefill_tokens = 0;
  double kda_bytes = 0, kda_flops = 0, mla_bytes = 0, mla_flops = 0;
  const double heads_kda = m_.kda_heads / tp, heads_mla = m_.mla_heads / tp;
  const double dk = m_.kda_dim, row = m_.mla_row(), kvb = p_.kv_bytes;
  for (const auto& ch : chunks) {
    double n = double(ch.tokens), pos = double(ch.position);
    if (c_.pd_decode && (ch.tokens > 1 || ch.position == 0)) { // prefilled elsewhere: only its sampled token runs here
      if (!ch.sampled) continue;
      pos += n - 1;
      n = 1;
    }
    if (n <= 0) continue;
    T += n;
    if (ch.sampled) S += 1;
    if (n > 1) prefill_tokens += n;
    // KDA: state read + written once per step per sequence (fp32), conv state; chunked math.
    kda_bytes += 2.0 * (m_.kda_state_bytes() + m_.conv_state_bytes()) / tp;
    kda_flops += n * 2.0 * heads_kda * (3.0 * dk * dk + 64.0 * 2 * dk);
    // MLA: decode reads the whole latent context (absorbed form); prefill attends causally
    // (non-absorbed head dims) and expands the context through kv_b.
    if (n == 1) {
      mla_bytes += (pos + 1) * row * kvb;
      mla_flops += 2.0 * heads_mla * (pos + 1) * (row + m_.kv_lora);
    } else {
      mla_bytes += (pos + n) * row * kvb;
      mla_flops += 2.0 * heads_mla * n * (pos + n / 2) * (m_.qk_nope + m_.qk_rope + m_.v_dim) +
                   2.0 * (pos + n) * m_.kv_lora * heads_mla * (m_.qk_nope + m_.v_dim);
    }
  }
  s.tokens = static_cast<std::int64_t>(T);
  if (T == 0) return s;
  const double tb = bytes_per_param(p_.trunk_dtype);
  auto gemm = [&](double params, double rows, double flops_rate) {
    return std::max(params * tb / tp / (bw_ * me), 2.0 * params * rows / tp / (flops_rate * c_.gemm_efficiency));
  };
  s.trunk = m_.n_kda * gemm(m_.kda_params, T, f_trunk_) + m_.n_mla * gemm(m_.mla_params, T, f_trunk_) +
            m_.n_dense * gemm(m_.dense_ffn_params, T, f_trunk_) + m_.n_moe * gemm(m_.moe_trunk_params, T, f_trunk_);
  s.lm_head = S > 0 ? std::max(m_.head_params * 2.0 / tp / (bw_ * me), 2.0 * m_.head_params * S / tp / (f_bf16_ * c_.gemm_efficiency)) : 0;
  s.kda = m_.n_kda * std::max(kda_bytes / (bw_ * me), kda_flops / (f_bf16_ * c_.attn_efficiency));
  s.mla = m_.n_mla * std::max(mla_bytes / (bw_ * me), mla_flops / (f_bf16_ * c_.attn_efficiency));
  s.moe_tokens = static_cast<std::int64_t>(T) * groups_;
  s.moe = m_.n_moe * moe_layer(s.moe_tokens);
  // Communication: one all-reduce after every mixer and every FFN (hidden, bf16); EP
  // dispatch + combine when experts live outside the TP group.
  const double hid_bytes = T * m_.hidden * 2.0;
  s.allreduce = (m_.layers + m_.n_dense + m_.n_moe) * allreduce(hid_bytes);
  if (p_.ep > p_.attn_tp) {
    const double copies = T / tp * m_.top_k;
    const bool latent = c_.dispatch == "latent" && m_.expert_width < m_.hidden;
    const double width = latent ? m_.expert_width : m_.hidden;
    const double d_bytes = c_.dispatch == "fp8" ? width + width / 128 * 4 : width * 2.0;
    s.all_to_all = m_.n_moe * (all_to_all(copies * d_bytes) + all_to_all(copies * width * 2.0));
  }
  if (p_.pp > 1) {
    const bool in_domain = p_.world <= p_.gpu.nvlink_domain || p_.attn_tp * p_.pp <= p_.gpu.nvlink_domain;
    s.pipeline = (p_.pp - 1) * (hid_bytes / tp / (in_domain ? nvl_ : nic_) + c_.p2p_latency_us * 1e-6);
  }
  s.overhead = m_.layers * c_.layer_overhead_us * 1e-6 + c_.step_overhead_us * 1e-6 + prefill_tokens * c_.prefill_token_overhead_us * 1e-6;
  s.total = s.trunk + s.lm_head + s.kda + s.mla + s.moe + s.allreduce + s.all_to_all + s.pipeline + s.overhead;
  return s;
}

step_cost cost_model::step(std::span<const seq_chunk> chunks) const {
  const int m = std::min<int>(c_.pp_microbatches, static_cast<int>(chunks.size()));
  if (p_.pp <= 1 || m <= 1) return model_time(chunks);
  // m micro-batches (round-robin) kept in flight through pp stages (steady state: the
  // pipeline stays full across steps): the slowest micro-batch sets the pace, each stage runs
  // max(m, pp) stage-slots per step: t = max(m, pp) / pp · max_i t_i.
  step_cost total;
  double sum = 0, worst = 0;
  for (int g = 0; g < m; ++g) {
    scratch_.clear();
    for (std::size_t i = static_cast<std::size_t>(g); i < chunks.size(); i += static_cast<std::size_t>(m)) scratch_.push_back(chunks[i]);
    const auto part = model_time(scratch_);
    sum += part.total;
    worst = std::max(worst, part.total);
    total.trunk += part.trunk / p_.pp;
    total.lm_head += part.lm_head / p_.pp;
    total.kda += part.kda / p_.pp;
    total.mla += part.mla / p_.pp;
    total.moe += part.moe / p_.pp;
    total.allreduce += part.allreduce / p_.pp;
    total.all_to_all += part.all_to_all / p_.pp;
    total.pipeline += part.pipeline / p_.pp;
    total.overhead += part.overhead / p_.pp;
    total.tokens += part.tokens;
    total.moe_tokens = std::max(total.moe_tokens, part.moe_tokens);
  }
  total.total = double(std::max(m, p_.pp)) / p_.pp * worst;
  total.pipeline += std::max(0.0, total.total - sum / p_.pp); // idle stage-slots (bubble, imbalance)
  return total;
}

step_cost cost_model::decode(int batch, std::int64_t context) const {
  std::vector<seq_chunk> v(static_cast<std::size_t>(batch), seq_chunk{1, context, true});
  return step(v);
}

double cost_model::prefill_alone(std::int64_t tokens) const {
  double t = 0;
  for (std::int64_t pos = 0; pos < tokens; pos += p_.max_num_batched_tokens) {
    const std::int64_t n = std::min<std::int64_t>(p_.max_num_batched_tokens, tokens - pos);
    const seq_chunk ch{n, pos, pos + n == tokens};
    t += step(std::span<const seq_chunk>(&ch, 1)).total;
  }
  return t;
}

} // namespace k3::sim
