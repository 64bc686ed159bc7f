// Dense MLP and the (latent) MoE with shared experts (spec §8, §9).
#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "kernels/common/bf16.hpp"
#include "kernels/common/parallel.hpp"
#include "kernels/mxfp4/mxfp4_gemm.hpp"
#include "kernels/ops/activations.hpp"
#include "kernels/ops/norms.hpp"
#include "kernels/router/router.hpp"
#include "runtime/model/experts.hpp"
#include "runtime/model/forward.hpp"

namespace k3::model {
namespace {

void glu(const model_config& c, const float* gate, const float* up, std::int64_t n, float* out) {
  if (c.act == activation::situ) ops::situ_glu(gate, up, n, ops::situ_params{c.situ_beta, c.situ_linear_beta}, out);
  else ops::silu_glu(gate, up, n, out);
}

// glu over n elements in chunks on the pool once n is worth a fork/join (a batch's experts or
// MLP: 16 decode tokens give 18K–115K elements, ~1.7 ns each on one core for SiTU, an exp and
// a division apiece — counted as 8 operations; one token's stay serial).
void glu_parallel(const model_config& c, const float* gate, const float* up, std::int64_t n, float* out) {
  constexpr std::int64_t chunk = 4096;
  parallel_for_work((n + chunk - 1) / chunk, 8 * n, [&](std::int64_t i) {
    const std::int64_t b = i * chunk;
    glu(c, gate + b, up + b, std::min(chunk, n - b), out + b);
  });
}

} // namespace

void run_experts(const model_config& c, const moe_weights& w, std::span<const std::int32_t> experts,
                 std::span<const std::int64_t> offsets, const float* xs, float* ys) {
  const std::int64_t X = c.expert_width(), I = c.moe_inter;
  const std::int64_t R = offsets.empty() ? 0 : offsets.back();
  thread_local std::vector<float> b1, b3;
  if (static_cast<std::int64_t>(b1.size()) < R * I) {
    b1.resize(static_cast<std::size_t>(R * I));
    b3.resize(static_cast<std::size_t>(R * I));
  }
  float* e1 = b1.data();
  float* e3 = b3.data();
  std::vector<mxfp4::expert_segment> s1, s3, s2;
  for (std::size_t i = 0; i < experts.size(); ++i) {
    const std::int64_t b0 = offsets[i], b1r = offsets[i + 1];
    if (b0 == b1r) continue;
    if (experts[i] < 0 || experts[i] >= c.num_experts)
      throw std::out_of_range("run_experts: expert " + std::to_string(experts[i]) + " does not exist");
    const auto& ex = w.experts[static_cast<std::size_t>(experts[i])];
    if (ex.w1.mxfp4 && ex.w3.mxfp4 && ex.w2.mxfp4) {
      s1.push_back({ex.w1.q, b0, b1r});
      s3.push_back({ex.w3.q, b0, b1r});
      s2.push_back({ex.w2.q, b0, b1r});
    } else { // bf16 experts (Kimi Linear without --quantization mxfp4)
      const std::int64_t m = b1r - b0;
      const dense_target in[2] = {{&ex.w1.d, e1 + b0 * I, I}, {&ex.w3.d, e3 + b0 * I, I}};
      matmul_shared_input(xs + b0 * X, X, m, in);
      glu(c, e1 + b0 * I, e3 + b0 * I, m * I, e1 + b0 * I);
      ex.w2.d.matmul(e1 + b0 * I, I, m, ys + b0 * X, X);
    }
  }
  if (!s1.empty()) {
    mxfp4::grouped_gemm(xs, X, s1, e1, I, w.expert_act);
    mxfp4::grouped_gemm(xs, X, s3, e3, I, w.expert_act);
    // The segments are usually one contiguous run of rows (every used expert MXFP4): one pass.
    bool contiguous = true;
    for (std::size_t i = 1; i < s1.size(); ++i) contiguous = contiguous && s1[i].begin == s1[i - 1].end;
    if (contiguous) {
      const std::int64_t b0 = s1.front().begin;
      glu_parallel(c, e1 + b0 * I, e3 + b0 * I, (s1.back().end - b0) * I, e1 + b0 * I);
    } else {
      for (const auto& s : s1) glu(c, e1 + s.begin * I, e3 + s.begin * I, (s.end - s.begin) * I, e1 + s.begin * I);
    }
    mxfp4::grouped_gemm(e1, I, s2, ys, X, w.expert_act);
  }
}

namespace {

// The second half of an MLP: out = down(glu(g, u)), g overwritten.
void mlp_down(const model_config& c, const mlp_weights& w, float* g, const float* u, std::int64_t n, float* out) {
  const std::int64_t I = w.gate.rows;
  glu_parallel(c, g, u, n * I, g);
  w.down.matmul(g, I, n, out, c.hidden);
}

} // namespace

void mlp_forward(const model_config& c, const mlp_weights& w, const float* x, std::int64_t n, float* out,
                 workspace& ws) {
  const std::int64_t Hd = c.hidden, I = w.gate.rows;
  float* g = ws.get(workspace::ffn_gate, n * I);
  float* u = ws.get(workspace::ffn_up, n * I);
  const dense_target in[2] = {{&w.gate, g, I}, {&w.up, u, I}};
  matmul_shared_input(x, Hd, n, in);
  mlp_down(c, w, g, u, n, out);
}

void moe_forward(const model_config& c, const moe_weights& w, const float* x, std::int64_t n, float* out,
                 workspace& ws, bool round_outputs, std::vector<std::int64_t>& expert_tokens, int moe_layer,
                 expert_dispatcher* dispatcher) {
  const std::int64_t Hd = c.hidden, E = c.num_experts, k = c.top_k, X = c.expert_width();

  // Every projection of the input in one call (one fork/join at decode): the router (fp32
  // activations), the latent projection (K3) and the shared experts' gate and up.
  float* logits = ws.get(workspace::logits, n * E);
  float* lat = c.routed_hidden > 0 ? ws.get(workspace::lat, n * X) : nullptr;
  const std::int64_t Is = w.shared.empty() ? 0 : w.shared.gate.rows;
  float* sg = Is ? ws.get(workspace::ffn_gate, n * Is) : nullptr;
  float* su = Is ? ws.get(workspace::ffn_up, n * Is) : nullptr;
  {
    dense_target in[4] = {{&w.gate, logits, E}};
    std::size_t count = 1;
    if (lat) in[count++] = {&w.latent_down, lat, X};
    if (Is) {
      in[count++] = {&w.shared.gate, sg, Is};
      in[count++] = {&w.shared.up, su, Is};
    }
    matmul_shared_input(x, Hd, n, std::span(in, count));
  }
  ws.ids.resize(static_cast<std::size_t>(n * k));
  ws.weights.resize(static_cast<std::size_t>(n * k));
  const router::params rp{c.num_experts, c.top_k, c.num_expert_groups, c.topk_group, c.renormalize, c.routed_scaling};
  router::route(logits, n, w.bias.data(), rp, ws.ids.data(), ws.weights.data());
  const auto plan = router::plan(ws.ids.data(), n, c.top_k, c.num_experts);
  for (std::int64_t e = 0; e < E; ++e) expert_tokens[static_cast<std::size_t>(e)] += plan.offsets[e + 1] - plan.offsets[e];

  // Expert input: the latent projection (K3) or the input itself, gathered in expert order.
  const float* src = lat ? lat : x;
  const std::int64_t R = n * k;
  float* xs = ws.get(workspace::xs, R * X);
  // Gather: a decode step's few rows copy faster than a fork/join costs.
  auto gather = [&](std::int64_t r) { std::memcpy(xs + r * X, src + plan.token[r] * X, sizeof(float) * X); };
  parallel_for_work(R, R * X, gather);

  float* ys = ws.get(workspace::ys, R * X);
  std::vector<std::int32_t> used;
  std::vector<std::int64_t> offs{0};
  for (std::int64_t e = 0; e < E; ++e)
    if (plan.offsets[e + 1] > plan.offsets[e]) {
      used.push_back(static_cast<std::int32_t>(e));
      offs.push_back(plan.offsets[e + 1]);
    }
  if (dispatcher) dispatcher->run(moe_layer, used, offs, xs, X, ys);
  else run_experts(c, w, used, offs, xs, ys);

  // Combine in slot order (fixed per token, so batch composition cannot change the sum):
  // each expert output rounded to bf16, weighted sum in fp32 (NeMo's order, spec §6).
  float* y = ws.get(workspace::comb, n * X);
  parallel_for_work(n, n * k * X, [&](std::int64_t t) {
    float* yt = y + t * X;
    std::fill_n(yt, X, 0.0f);
    for (std::int64_t j = 0; j < k; ++j) {
      const float wt = ws.weights[static_cast<std::size_t>(t * k + j)];
      const float* ye = ys + static_cast<std::int64_t>(plan.row_of[static_cast<std::size_t>(t * k + j)]) * X;
      if (round_outputs)
        for (std::int64_t i = 0; i < X; ++i) yt[i] += wt * round_bf16(ye[i]);
      else
        for (std::int64_t i = 0; i < X; ++i) yt[i] += wt * ye[i];
    }
  });

  if (c.routed_hidden > 0) {
    if (c.latent_norm) ops::rms_norm(y, w.latent_norm.data(), c.rms_eps, n, X, y);
    w.latent_up.matmul(y, X, n, out, Hd);
  } else {
    std::memcpy(out, y, sizeof(float) * n * Hd);
  }
  if (!w.shared.empty()) {
    float* sh = ws.get(workspace::shared, n * Hd);
    mlp_down(c, w.shared, sg, su, n, sh);
    for (std::int64_t i = 0; i < n * Hd; ++i) out[i] += sh[i];
  }
}

} // namespace k3::model
