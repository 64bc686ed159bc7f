#pragma once
// Gated MLA (NoPE) attention in the absorbed form over a per-token latent cache (spec §10).
//
// Cache row per token per MLA layer: [c_kv (latent, already kv_a-normed) | k_rot (rope)] in
// bf16 — 576 values = 1152 bytes for K3/Kimi Linear. Rows live in fixed-size blocks (paged):
// row p is blocks[p / block_size] + (p % block_size) · row_width.
//
// For token t (absolute position pos0 + t) and head h:
//   q̃      = W_UK,hᵀ q_nope            (latent-sized; W_UK,h = kv_b rows [h·256, h·256+128))
//   s_p    = scale · (q̃ · c_p + q_rot · kr_p),  p ≤ pos0 + t,  scale = (nope + rope)^-0.5
//   o_lat  = Σ softmax(s)_p c_p          (fp32 softmax, online over the cache)
//   o_h    = W_UV,h o_lat               (W_UV,h = kv_b rows [h·256+128, h·256+256))
//   K3:    o_h ⊙= sigmoid(gate_h)       (gate = g_proj x, pass nullptr for Kimi Linear)
// No RoPE anywhere: k_rot is shared by all heads and never rotated.
//
// Threading: parallel over (token group, head group) on the kernel pool; a decode step on
// AVX-512 also splits the cache positions over the threads. The cache must already hold rows
// [0, pos0 + T) (write this chunk with cache_write first), so one prefill, chunked prefill and
// token-by-token decode see identical inputs.

#include <cstdint>

#include "kernels/common/bf16.hpp"

namespace k3::mla {

struct dims {
  int heads = 0;
  int nope = 128;   ///< qk_nope_head_dim
  int rope = 64;    ///< qk_rope_head_dim
  int latent = 512; ///< kv_lora_rank
  int v = 128;      ///< v_head_dim
  [[nodiscard]] int row_width() const noexcept { return latent + rope; }
};

struct cache_view {
  bf16_t* const* blocks = nullptr;
  int block_size = 0;
  /// Rows hold fp32 instead of bf16 (blocks then point at float storage of the same row
  /// count): the exact-numerics mode used by invariance tests, twice the memory.
  bool fp32 = false;
  [[nodiscard]] bf16_t* row(std::int64_t p, int width) const noexcept {
    return blocks[p / block_size] + (p % block_size) * width;
  }
  [[nodiscard]] float* row_f32(std::int64_t p, int width) const noexcept {
    return reinterpret_cast<float*>(blocks[p / block_size]) + (p % block_size) * width;
  }
};

/// Stores T rows (c_kv [T, latent] and k_rot [T, rope], row strides ld_c / ld_r) at positions
/// pos0 … pos0+T−1, rounding to bf16 (or exactly, for an fp32 cache).
void cache_write(const cache_view& cache, const dims& d, std::int64_t pos0, std::int64_t T, const float* ckv,
                 std::int64_t ld_c, const float* krot, std::int64_t ld_r);

/// q_nope [T, H, nope], q_rot [T, H, rope]; kv_b [H·(nope+v), latent] fp32 (the checkpoint's
/// kv_b_proj, upcast); gate [T, H·v] or nullptr; out [T, H·v].
///
/// Tiled (flash-attention style): a work item is up to 4 query tokens × the heads, walking the
/// cache in 64-row tiles widened to fp32 once per tile and shared by all its query rows, with
/// an online softmax per query row. Two paths, chosen by the active ISA:
/// - AVX-512: the queries in the lanes (mla_tile.hpp); the softmax over fixed 1024-position
///   spans folded in order, which lets decode split the positions over the threads. Every sum
///   has a fixed order per query: one prefill, chunked prefill and token-by-token decode give
///   the same bits at any thread count.
/// - Otherwise: scores 4 × 4 register-blocked, the weighted row sum as one small sgemm per tile,
///   decode splitting the heads over the threads; the orders agree to fp32 rounding (≤ 1e-6
///   relative), not bit for bit.
void attention(const float* q_nope, const float* q_rot, const float* kv_b, const cache_view& cache, const dims& d,
               std::int64_t pos0, std::int64_t T, const float* gate, float* out);
/// One decode token for each of N sequences (a batched decode step): token i (row i of q_nope
/// [N, H, nope], q_rot, gate and out) sits at position pos[i] of its own cache caches[i], which
/// already holds rows [0, pos[i]]. Each token's output has the bits of
/// attention(..., caches[i], d, pos[i], 1, ...) alone, while W_UK / W_UV are read once per 4
/// tokens and the step takes one fork/join instead of a few per sequence. With fewer sequences
/// than threads each runs alone (a long cache is then split over the threads).
void attention_decode(const float* q_nope, const float* q_rot, const float* kv_b, const cache_view* caches,
                      const std::int64_t* pos, std::int64_t N, const dims& d, const float* gate, float* out);
/// The previous kernel (one cache row at a time per token and head): the comparison point of
/// `k3 bench kernels` and a second implementation for the tests.
void attention_rowwise(const float* q_nope, const float* q_rot, const float* kv_b, const cache_view& cache, const dims& d,
                       std::int64_t pos0, std::int64_t T, const float* gate, float* out);
/// exp(x) elementwise in place, vectorized (relative error ≤ 3e-7; x < −87.3 and −inf give 0).
void exp_inplace(float* x, int n);

} // namespace k3::mla
