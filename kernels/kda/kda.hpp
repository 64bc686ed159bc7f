#pragma once
// Kimi Delta Attention (KDA) CPU kernels, fp32 throughout (spec §5, §6).
//
// Layouts (one sequence, token-major as the projections produce them):
//   q, k    [T, H, dk]   after prepare_qk (per-head L2 norm eps 1e-6; q scaled by dk^-0.5)
//   v, o    [T, H, dv]
//   g       [T, H, dk]   log-decay (≤ 0), from decay_gate
//   beta    [T, H]       sigmoid(b_proj x)
//   state   [H, dk, dv]  fp32, rows = k channel; carried across calls (prefill -> decode)
//
// recurrent() is the literal delta rule per token (decode, and the reference order);
// chunked() is the WY/UT form over chunks of `chunk` tokens and gives the same result up to
// rounding for ANY gate values: every exponential it evaluates has an argument ≤ 80 (decays
// are factored only over spans that decay by at most 80 nats, and evaluated pairwise or
// through sub-block boundaries otherwise; see kda_chunk.cpp), so exp(cumsum) can never
// overflow, not even for the unbounded softplus gate. Both advance `state` in place, so prefill of T tokens
// followed by decode steps equals one call over all tokens.
//
// Chunk size: 16 is fastest on CPU (the per-token cost of the inter-chunk products is 3·dk·dv
// whatever the chunk; larger chunks only add intra-chunk work) and, with K3's bounded gate
// (g > −5), guarantees the single-product fast path (16 · 5 = 80 nats ≤ the fp32 range).
//
// Threading: heads are independent and run on the kernel pool; calls are reentrant.
// REQUIRES: T ≥ 0, H, dk, dv ≥ 1; buffers sized as above and non-aliasing.

#include <cstdint>

namespace k3::kda {

struct dims {
  int heads = 0;
  int dk = 128;
  int dv = 128;
};

// ---- short convolution ------------------------------------------------------------------

/// Causal depthwise conv + SiLU with carried state. x, y: [T, C]; w: [C, K] (w[c][K-1] multiplies
/// the current token); state: [C, K-1], the last K-1 pre-conv inputs, oldest first, updated in
/// place (zeros for a fresh sequence). y may alias x.
/// On AVX-512 sixteen channels per vector, on AVX2 eight, with the vector exponential
/// (fast_math_avx512.hpp / fast_math_avx2.hpp; within ~1e-6 of the scalar form); the scalar
/// path goes channel by channel with libm exp.
void short_conv(const float* x, std::int64_t T, std::int64_t C, const float* w, int K, float* state, float* y);

namespace detail {
/// The AVX-512 form over channels [c0, c1) (serial; short_conv parallelises over blocks).
void short_conv_avx512(const float* x, std::int64_t T, std::int64_t C, const float* w, int K, float* state, float* y,
                       std::int64_t c0, std::int64_t c1);
/// The AVX2+FMA form, same contract.
void short_conv_avx2(const float* x, std::int64_t T, std::int64_t C, const float* w, int K, float* state, float* y,
                     std::int64_t c0, std::int64_t c1);
} // namespace detail

// ---- gates --------------------------------------------------------------------------------

enum class gate_kind {
  softplus,    ///< Kimi Linear: g = −exp(A_log[h]) · softplus(graw + dt_bias)
  lower_bound, ///< K3:          g = lb · sigmoid(exp(A_log[h]) · (graw + dt_bias)), lb < 0
};

struct gate_params {
  gate_kind kind = gate_kind::softplus;
  float lower_bound = -5.0f; ///< gate_lower_bound (lower_bound kind only)
};

/// graw: [T, H·dk]; A_log: [H] (already narrowed to H for K3); dt_bias: [H·dk]; g: [T, H·dk].
void decay_gate(const float* graw, std::int64_t T, int H, int dk, const float* A_log, const float* dt_bias,
                const gate_params& p, float* g);

/// In place: b[i] = sigmoid(b[i]).
void beta_sigmoid(float* b, std::int64_t n);

/// In place per head: q ← l2norm(q)·dk^-0.5, k ← l2norm(k), eps 1e-6 (fla use_qk_l2norm_in_kernel).
void prepare_qk(float* q, float* k, std::int64_t T, int H, int dk);

// ---- delta-rule scan ------------------------------------------------------------------------

void recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta, std::int64_t T,
               const dims& d, float* state, float* o);

void chunked(const float* q, const float* k, const float* v, const float* g, const float* beta, std::int64_t T,
             const dims& d, float* state, float* o, int chunk = 16);

/// Scan of several sequences' decode tokens at once (one token each): q/k/g [N, H, dk],
/// v/o [N, H, dv], beta [N, H], states[n] → [H, dk, dv] of sequence n. Parallel over (n, head).
void recurrent_batch(const float* q, const float* k, const float* v, const float* g, const float* beta,
                     std::int64_t N, const dims& d, float* const* states, float* o);

} // namespace k3::kda
