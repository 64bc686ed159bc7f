// KDA and MLA mixers over a mixed prefill/decode batch (spec §5.1, §10).
#include <algorithm>
#include <vector>

#include "kernels/common/parallel.hpp"
#include "kernels/kda/kda.hpp"
#include "kernels/mla/mla.hpp"
#include "kernels/ops/norms.hpp"
#include "runtime/model/forward.hpp"

namespace k3::model {

void kda_forward(const model_config& c, const kda_weights& w, int slot, const batch_layout& b, const float* x,
                 float* out, workspace& ws) {
  const std::int64_t n = b.n, Hd = c.hidden, P = c.kda_proj(), hd = c.kda_head_dim;
  const int H = c.kda_heads, K = c.conv_kernel;
  float* q = ws.get(workspace::q, n * P);
  float* k = ws.get(workspace::k, n * P);
  float* v = ws.get(workspace::v, n * P);
  float* f = ws.get(workspace::f, n * hd);
  float* beta = ws.get(workspace::beta, n * H);
  float* og = ws.get(workspace::og, n * P);
  // Every projection of the layer input in one call (one fork/join at decode); the low-rank
  // output gate's first half reuses f's buffer, so it waits for f_b below.
  {
    const dense_target in[6] = {{&w.q, q, P}, {&w.k, k, P}, {&w.v, v, P}, {&w.f_a, f, hd}, {&w.b, beta, H}, {&w.g, og, P}};
    matmul_shared_input(x, Hd, n, std::span(in, c.full_rank_gate ? 6 : 5));
  }

  // Causal short conv + SiLU per sequence, each stream with its own state section. Calls too
  // small to fork alone (a decode token: P channels) run as one parallel loop over (sequence,
  // stream) when the batch has enough of them; a longer chunk's call forks inside.
  {
    float* streams[3] = {q, k, v};
    std::int64_t longest = 0;
    for (std::size_t e = 0; e < b.entries(); ++e) longest = std::max(longest, b.len[e]);
    auto conv = [&](std::int64_t i) {
      const std::size_t e = static_cast<std::size_t>(i / 3);
      const int s = static_cast<int>(i % 3);
      float* st = b.seq[e]->conv[static_cast<std::size_t>(slot)];
      float* xs = streams[s] + b.off[e] * P;
      kda::short_conv(xs, b.len[e], P, w.conv.data() + s * P * K, K, st + s * P * (K - 1), xs);
    };
    const std::int64_t calls = static_cast<std::int64_t>(b.entries()) * 3;
    if (longest * P * K < min_parallel_work) parallel_for_work(calls, 3 * n * P * K, conv);
    else
      for (std::int64_t i = 0; i < calls; ++i) conv(i);
  }

  // Decay gate and β (fp32), q/k L2 norm.
  float* graw = ws.get(workspace::graw, n * P);
  float* g = ws.get(workspace::g, n * P);
  w.f_b.matmul(f, hd, n, graw, P);
  const kda::gate_params gp{c.bounded_gate ? kda::gate_kind::lower_bound : kda::gate_kind::softplus,
                            c.gate_lower_bound};
  kda::decay_gate(graw, n, H, static_cast<int>(hd), w.a_log.data(), w.dt_bias.data(), gp, g);
  kda::beta_sigmoid(beta, n * H);
  kda::prepare_qk(q, k, n, H, static_cast<int>(hd));

  // Delta-rule scan: chunked for prefill chunks, one batched recurrent call per run of
  // consecutive single-token (decode) entries.
  float* o = ws.get(workspace::o, n * P);
  const kda::dims d{H, static_cast<int>(hd), static_cast<int>(hd)};
  std::vector<float*> states;
  for (std::size_t e = 0; e < b.entries();) {
    const std::int64_t r = b.off[e];
    if (b.len[e] == 1) {
      std::size_t j = e;
      states.clear();
      while (j < b.entries() && b.len[j] == 1) states.push_back(b.seq[j++]->kda[static_cast<std::size_t>(slot)]);
      kda::recurrent_batch(q + r * P, k + r * P, v + r * P, g + r * P, beta + r * H,
                           static_cast<std::int64_t>(states.size()), d, states.data(), o + r * P);
      e = j;
    } else {
      kda::chunked(q + r * P, k + r * P, v + r * P, g + r * P, beta + r * H, b.len[e], d,
                   b.seq[e]->kda[static_cast<std::size_t>(slot)], o + r * P);
      ++e;
    }
  }

  // Output gate, per-head gated RMSNorm, projection.
  if (!c.full_rank_gate) {
    float* ga = ws.get(workspace::f, n * hd);
    w.g_a.matmul(x, Hd, n, ga, hd);
    w.g_b.matmul(ga, hd, n, og, P);
  }
  {
    // (token, head) rows over the pool once a batch makes it worth a fork/join (an exp per
    // value; 16 decode tokens: 320 rows, serial ~1% of the step). Each row is the same bits.
    const std::int64_t rows = n * H;
    parallel_for_work((rows + 15) / 16, rows * hd * 20, [&](std::int64_t i) {
      const std::int64_t r0 = i * 16;
      ops::rms_norm_gated(o + r0 * hd, og + r0 * hd, w.o_norm.data(), c.rms_eps, std::min<std::int64_t>(16, rows - r0), hd,
                          o + r0 * hd);
    });
  }
  w.o.matmul(o, P, n, out, Hd);
}

void mla_forward(const model_config& c, const mla_weights& w, int slot, const batch_layout& b, const float* x,
                 float* out, workspace& ws) {
  const std::int64_t n = b.n, Hd = c.hidden, H = c.mla_heads, qd = c.qk_nope + c.qk_rope, L = c.kv_lora_rank;
  const std::int64_t W = L + c.qk_rope, V = c.v_head_dim;
  constexpr float low_rank_eps = 1e-6f; // q_a / kv_a norms use the KimiRMSNorm default (spec §10.8)

  float* q = ws.get(workspace::q, n * H * qd);
  float* qa = c.q_lora_rank > 0 ? ws.get(workspace::qa, n * c.q_lora_rank) : nullptr;
  float* ckv = ws.get(workspace::ckv, n * W);
  float* gate = c.mla_output_gate ? ws.get(workspace::gate, n * H * V) : nullptr;
  // The projections of the layer input in one call (one fork/join at decode).
  {
    const dense_target in[3] = {qa ? dense_target{&w.q_a, qa, c.q_lora_rank} : dense_target{&w.q, q, H * qd},
                                {&w.kv_a, ckv, W}, {&w.g, gate, H * V}};
    matmul_shared_input(x, Hd, n, std::span(in, gate ? 3 : 2));
  }
  if (qa) {
    ops::rms_norm(qa, w.q_a_norm.data(), low_rank_eps, n, c.q_lora_rank, qa);
    w.q_b.matmul(qa, c.q_lora_rank, n, q, H * qd);
  }
  float* qn = ws.get(workspace::qn, n * H * c.qk_nope);
  float* qr = ws.get(workspace::qr, n * H * c.qk_rope);
  for (std::int64_t t = 0; t < n * H; ++t) {
    std::copy_n(q + t * qd, c.qk_nope, qn + t * c.qk_nope);
    std::copy_n(q + t * qd + c.qk_nope, c.qk_rope, qr + t * c.qk_rope);
  }

  for (std::int64_t t = 0; t < n; ++t) ops::rms_norm(ckv + t * W, w.kv_a_norm.data(), low_rank_eps, 1, L, ckv + t * W);

  float* att = ws.get(workspace::att, n * H * V);
  const mla::dims d{static_cast<int>(H), c.qk_nope, c.qk_rope, c.kv_lora_rank, c.v_head_dim};
  // Prefill chunks one by one; a run of consecutive decode entries (one token each) as one
  // batched call, which reads W_UK / W_UV once per 4 sequences and forks once.
  std::vector<mla::cache_view> views;
  std::vector<std::int64_t> positions;
  for (std::size_t e = 0; e < b.entries();) {
    const std::int64_t r = b.off[e];
    std::size_t j = e;
    views.clear();
    positions.clear();
    do {
      sequence_state& s = *b.seq[j];
      const std::int64_t T = b.len[j], pos0 = b.pos0[j];
      s.reserve(pos0 + T);
      views.push_back({s.mla_blocks[static_cast<std::size_t>(slot)].data(), s.block_size, s.fp32_cache});
      positions.push_back(pos0);
      mla::cache_write(views.back(), d, pos0, T, ckv + b.off[j] * W, W, ckv + b.off[j] * W + L, W);
      ++j;
    } while (b.len[e] == 1 && j < b.entries() && b.len[j] == 1);
    if (b.len[e] == 1)
      mla::attention_decode(qn + r * H * c.qk_nope, qr + r * H * c.qk_rope, w.kv_b.data(), views.data(),
                            positions.data(), static_cast<std::int64_t>(views.size()), d, gate ? gate + r * H * V : nullptr,
                            att + r * H * V);
    else
      mla::attention(qn + r * H * c.qk_nope, qr + r * H * c.qk_rope, w.kv_b.data(), views[0], d, positions[0], b.len[e],
                     gate ? gate + r * H * V : nullptr, att + r * H * V);
    e = j;
  }
  w.o.matmul(att, H * V, n, out, Hd);
}

} // namespace k3::model
