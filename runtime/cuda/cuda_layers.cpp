// The layer bodies of the device forward pass (KDA, MLA, MLP, MoE), each the device twin of
// runtime/model/mixers.cpp and ffn.cpp; the step driver is cuda_model.cpp.
#include <algorithm>

#include "kernels/cuda/forward_ops.cuh"
#include "kernels/cuda/kda_decode.cuh"
#include "kernels/cuda/kda_ops.cuh"
#include "kernels/cuda/kda_prefill.cuh"
#include "kernels/cuda/mla_decode.cuh"
#include "kernels/cuda/mla_prefill.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/ops.cuh"
#include "runtime/cuda/cuda_model.hpp"
#include "runtime/cuda/cuda_staging.hpp"

namespace k3::gpu {

void cuda_model::kda_layer(const d_kda& w, int slot, const float* x, float* out) {
  auto& s = *st_;
  const std::int64_t n = s.n, Hd = c_.hidden, P = c_.kda_proj(), hd = c_.kda_head_dim, E = static_cast<std::int64_t>(s.off.size());
  const int H = c_.kda_heads, K = c_.conv_kernel;
  float* q = s.get(staging::q, n * P);
  float* k = s.get(staging::k, n * P);
  float* v = s.get(staging::v, n * P);
  blas_->matmul(w.q, x, Hd, n, q, P);
  blas_->matmul(w.k, x, Hd, n, k, P);
  blas_->matmul(w.v, x, Hd, n, v, P);
  auto conv_states = [&](int stream, std::int64_t e) { return s.dev<float*>(s.conv_at + (slot * 3 + stream) * E + e); };
  auto kda_states = [&](std::int64_t e) { return s.dev<float*>(s.kda_at + slot * E + e); };

  // Short conv per stream: one call per run of decode entries, one per prefill entry.
  float* streams[3] = {q, k, v};
  for (std::int64_t e = 0; e < E;) {
    std::int64_t j = e;
    if (s.len[e] == 1)
      while (j < E && s.len[j] == 1) ++j;
    else
      j = e + 1;
    const bool decode = s.len[e] == 1;
    for (int st = 0; st < 3; ++st) {
      float* xs = streams[st] + s.off[e] * P;
      check(cuda::short_conv(xs, decode ? static_cast<int>(j - e) : 1, decode ? 1 : static_cast<int>(s.len[e]), static_cast<int>(P),
                             w.conv + st * P * K, K, conv_states(st, e), xs, stream_));
    }
    e = j;
  }
  float* f = s.get(staging::f, n * hd);
  float* graw = s.get(staging::graw, n * P);
  float* g = s.get(staging::g, n * P);
  blas_->matmul(w.f_a, x, Hd, n, f, hd);
  blas_->matmul(w.f_b, f, hd, n, graw, P);
  check(cuda::decay_gate(graw, static_cast<int>(n), H, static_cast<int>(hd), w.a_log, w.dt_bias,
                         c_.bounded_gate ? cuda::gate_kind::lower_bound : cuda::gate_kind::softplus, c_.gate_lower_bound, g,
                         stream_));
  float* beta = s.get(staging::beta, n * H);
  blas_->matmul(w.b, x, Hd, n, beta, H);
  check(cuda::beta_sigmoid(beta, n * H, stream_));
  check(cuda::prepare_qk(q, k, static_cast<int>(n), H, static_cast<int>(hd), stream_));

  float* o = s.get(staging::o, n * P);
  for (std::int64_t e = 0; e < E;) {
    const std::int64_t r = s.off[e];
    if (s.len[e] == 1) {
      std::int64_t j = e;
      while (j < E && s.len[j] == 1) ++j;
      check(cuda::kda_recurrent_decode(q + r * P, k + r * P, v + r * P, g + r * P, beta + r * H, static_cast<int>(j - e), H,
                                       static_cast<int>(hd), static_cast<int>(hd), kda_states(e), o + r * P, stream_));
      e = j;
    } else {
      cuda::kda_prefill_args a;
      a.q = q + r * P, a.k = k + r * P, a.v = v + r * P, a.g = g + r * P, a.beta = beta + r * H, a.o = o + r * P;
      a.cu_seqlens = s.dev<long long>(s.cu_at + 2 * e);
      a.states = reinterpret_cast<void* const*>(kda_states(e));
      a.sequences = 1, a.heads = H, a.dk = static_cast<int>(hd), a.dv = static_cast<int>(hd);
      check(cuda::kda_chunked_prefill(a, stream_));
      ++e;
    }
  }
  float* og = s.get(staging::og, n * P);
  if (c_.full_rank_gate) {
    blas_->matmul(w.g, x, Hd, n, og, P);
  } else {
    blas_->matmul(w.g_a, x, Hd, n, f, hd);
    blas_->matmul(w.g_b, f, hd, n, og, P);
  }
  check(cuda::rms_norm_gated(o, og, w.o_norm, c_.rms_eps, static_cast<int>(n * H), static_cast<int>(hd), o, stream_));
  blas_->matmul(w.o, o, P, n, out, Hd);
  all_reduce(out, n * Hd); // heads split over the TP ranks: o_proj outputs are partial sums
}

void cuda_model::mla_layer(const d_mla& w, int slot, const float* x, float* out) {
  auto& s = *st_;
  const std::int64_t n = s.n, Hd = c_.hidden, H = c_.mla_heads, qd = c_.qk_nope + c_.qk_rope, L = c_.kv_lora_rank;
  const std::int64_t W = L + c_.qk_rope, V = c_.v_head_dim, E = static_cast<std::int64_t>(s.off.size());
  constexpr float low_rank_eps = 1e-6f;
  float* q = s.get(staging::q, n * H * qd);
  if (c_.q_lora_rank > 0) {
    float* qa = s.get(staging::qa, n * c_.q_lora_rank);
    blas_->matmul(w.q_a, x, Hd, n, qa, c_.q_lora_rank);
    check(cuda::rms_norm(qa, w.q_a_norm, low_rank_eps, static_cast<int>(n), c_.q_lora_rank, qa, stream_));
    blas_->matmul(w.q_b, qa, c_.q_lora_rank, n, q, H * qd);
  } else {
    blas_->matmul(w.q, x, Hd, n, q, H * qd);
  }
  float* qn = s.get(staging::qn, n * H * c_.qk_nope);
  float* qr = s.get(staging::qr, n * H * c_.qk_rope);
  check(cuda::split_heads(q, n * H, c_.qk_nope, c_.qk_rope, qn, qr, stream_));
  float* ckv = s.get(staging::ckv, n * W);
  blas_->matmul(w.kv_a, x, Hd, n, ckv, W);
  check(cuda::rms_norm_strided(ckv, W, w.kv_a_norm, low_rank_eps, static_cast<int>(n), static_cast<int>(L), ckv, W, stream_));
  float* gate = nullptr;
  if (c_.mla_output_gate) {
    gate = s.get(staging::gate, n * H * V);
    blas_->matmul(w.g, x, Hd, n, gate, H * V);
  }
  const std::int64_t lo = s.layer_offset * slot;
  check(cuda::mla_cache_write(ckv, W, static_cast<int>(W), s.dev<const std::uint16_t* const*>(s.tok_table_at),
                              s.dev<std::int64_t>(s.tok_pos_at), s.block_size, lo, static_cast<int>(n), stream_));
  const cuda::mla_dims d{static_cast<int>(H), c_.qk_nope, c_.qk_rope, c_.kv_lora_rank, c_.v_head_dim};
  float* o = s.get(staging::o, n * H * V);
  for (std::int64_t e = 0; e < E;) {
    const std::int64_t r = s.off[e];
    const float* ge = gate ? gate + r * H * V : nullptr;
    if (s.len[e] == 1) {
      std::int64_t j = e;
      while (j < E && s.len[j] == 1) ++j;
      check(cuda::mla_decode(qn + r * H * c_.qk_nope, qr + r * H * c_.qk_rope, w.kv_b,
                             s.dev<const std::uint16_t* const* const>(s.entry_table_at + e), s.dev<std::int64_t>(s.entry_ctx_at + e),
                             s.block_size, lo, d, ge, static_cast<int>(j - e), o + r * H * V, stream_));
      e = j;
    } else {
      check(cuda::mla_prefill(qn + r * H * c_.qk_nope, qr + r * H * c_.qk_rope, w.kv_b,
                              s.dev<const std::uint16_t* const>(s.seq_table_at[static_cast<std::size_t>(e)]), s.block_size, lo,
                              s.pos0[e], static_cast<int>(s.len[e]), d, ge, o + r * H * V, stream_));
      ++e;
    }
  }
  blas_->matmul(w.o, o, H * V, n, out, Hd);
  all_reduce(out, n * Hd);
}

void cuda_model::mlp_layer(const d_mlp& w, const float* x, std::int64_t n, float* out) {
  auto& s = *st_;
  const std::int64_t Hd = c_.hidden, I = w.gate.rows;
  float* g = s.get(staging::g, n * I);
  float* u = s.get(staging::up, n * I);
  blas_->matmul(w.gate, x, Hd, n, g, I);
  blas_->matmul(w.up, x, Hd, n, u, I);
  const cuda::glu_params gp{c_.act == model::activation::situ, c_.situ_beta, c_.situ_linear_beta};
  check(cuda::glu(g, u, n * I, gp, g, stream_));
  blas_->matmul(w.down, g, I, n, out, Hd);
  all_reduce(out, n * Hd); // intermediate units split over the TP ranks
}

void cuda_model::moe_layer(const d_moe& w, int slot, const float* x, float* out) {
  auto& s = *st_;
  const std::int64_t n = s.n, Hd = c_.hidden, Ex = c_.num_experts, k = c_.top_k, X = c_.expert_width();
  float* logits = s.get(staging::router, n * Ex);
  blas_->matmul(w.gate, x, Hd, n, logits, Ex);
  auto* ids = reinterpret_cast<std::int32_t*>(s.get(staging::ids, n * k));
  float* wts = s.get(staging::wts, n * k);
  const cuda::route_params rp{c_.num_experts, c_.top_k, c_.renormalize, c_.routed_scaling};
  check(cuda::route(logits, static_cast<int>(n), w.bias, rp, ids, wts, stream_));
  check(cudaMemcpyAsync(static_cast<std::int32_t*>(s.ids_host.get()) + slot * n * k, ids, static_cast<std::size_t>(n * k) * 4,
                        cudaMemcpyDeviceToHost, stream_),
        "cudaMemcpyAsync(router ids)");
  if (tp_size_ > 1) check(cuda::local_expert_ids(ids, n * k, w_->first_expert, w_->last_expert, stream_));
  const float* src = x;
  if (c_.routed_hidden > 0) {
    float* lat = s.get(staging::lat, n * X);
    blas_->matmul(w.latent_down, x, Hd, n, lat, X);
    src = lat;
  }
  if (!s.moe_ws_own || s.moe_ws_own->max_tokens < n) {
    s.moe_ws_own = std::make_unique<cuda::moe_workspace>(static_cast<int>(std::max<std::int64_t>(n, 16)), c_.top_k, w.experts.experts,
                                                         c_.moe_inter, static_cast<int>(X));
  }
  auto& mws = *s.moe_ws_own;
  mws.bind(s.get(staging::moe, static_cast<std::int64_t>((mws.bytes() + 3) / 4)));
  float* y = s.get(staging::y, n * X);
  cuda::moe_activation act;
  act.situ = c_.act == model::activation::situ;
  act.beta = c_.situ_beta;
  act.linear_beta = c_.situ_linear_beta;
  act.round_expert_outputs_bf16 = round_expert_outputs_;
  check(cuda::moe_routed_experts(src, ids, wts, static_cast<int>(n), w.experts, act, mws, y, stream_));
  all_reduce(y, n * X); // each rank summed its own experts' slots; before the (nonlinear) latent norm
  if (c_.routed_hidden > 0) {
    if (c_.latent_norm) check(cuda::rms_norm(y, w.latent_norm, c_.rms_eps, static_cast<int>(n), static_cast<int>(X), y, stream_));
    blas_->matmul(w.latent_up, y, X, n, out, Hd);
  } else {
    check(cudaMemcpyAsync(out, y, static_cast<std::size_t>(n * Hd) * 4, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync(moe out)");
  }
  if (!w.shared.empty()) {
    float* sh = s.get(staging::sh, n * Hd);
    // The shared MLP reuses the g/up scratch; mlp_layer's GLU runs in place there.
    mlp_layer(w.shared, x, n, sh);
    check(cuda::add_into(out, sh, n * Hd, stream_));
  }
}
} // namespace k3::gpu
