#pragma once
// The model's weights, bound from a checkpoint by tensor name with every shape checked
// (spec model.md §11, §12), and the matmul that consumes them.
//
// Storage policy:
//   * bf16 matrices stay in the memory-mapped file (zero copy) when 2-byte aligned; F16 and F32
//     matrices are widened to fp32 once (owned). dense_weight::matmul dispatches on the kind.
//   * Vectors the spec keeps in fp32 (norm weights, conv weights, A_log, dt_bias, the router's
//     e_score_correction_bias, the AttnRes pseudo-queries fused as norm ⊙ proj) are owned fp32.
//   * MLA kv_b_proj is upcast to fp32 (the absorbed attention kernel reads it per head).
//   * Routed experts: compressed-tensors MXFP4 (`weight_packed` / `weight_scale`) are used in
//     place — never re-encoded; bf16 experts stay bf16, or with quantize_experts are quantized
//     once at load with the OCP rule into owned MXFP4 buffers.
//
// load_weights() consumes tensors from the checkpoint; afterwards any unconsumed tensor is an
// error (strict audit), except `vision_tower.*` / `mm_projector.*` (noted) and MTP layers
// beyond num_hidden_layers when the config declares them.
//
// Lifetime: a model_weights refers into the checkpoint's mappings; keep both alive together
// (model owns both). Immutable after load; safe to read from any thread.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/common/bf16.hpp"
#include "kernels/mxfp4/mxfp4_gemm.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/safetensors.hpp"

namespace k3::model {

/// A [rows, cols] matrix (y = x · Wᵀ) in bf16 or fp32.
struct dense_weight {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  const bf16_t* bf16 = nullptr;
  const float* f32 = nullptr;
  std::vector<float> own_f32;
  std::vector<bf16_t> own_bf16;
  /// Activation precision of matmul (bf16 weights only): bf16 with load_options::
  /// bf16_activations (never for the router); fp32 for the router and with exact_fp32; else
  /// fp32_bf16x2 (16-bit activations: two bf16 parts on the bf16 × bf16 prefill routes).
  activations act = activations::fp32;

  // Move-only: bf16/f32 may point into own_* (a copy would dangle).
  dense_weight() = default;
  dense_weight(const dense_weight&) = delete;
  dense_weight& operator=(const dense_weight&) = delete;
  dense_weight(dense_weight&&) noexcept = default;
  dense_weight& operator=(dense_weight&&) noexcept = default;

  [[nodiscard]] bool empty() const noexcept { return rows == 0; }
  [[nodiscard]] std::int64_t bytes() const noexcept { return rows * cols * (bf16 ? 2 : 4); }
  /// Row r widened to fp32 (embedding lookup).
  void row(std::int64_t r, float* out) const;
  /// y[m, rows] = x[m, cols] · Wᵀ (strides ldx, ldy).
  void matmul(const float* x, std::int64_t ldx, std::int64_t m, float* y, std::int64_t ldy) const;
};

/// One product of matmul_shared_input: y (stride ldy) = x · wᵀ.
struct dense_target {
  const dense_weight* w;
  float* y;
  std::int64_t ldy;
};

/// Several weights applied to the same input x[m, cols]: each y as its own matmul gives it, bit
/// for bit, with the bf16 weights of one activation precision in one kernel call
/// (dense::gemm_bf16_multi: at decode one fork/join and one contiguous row range per thread for
/// the lot). Every weight must have x's column count.
void matmul_shared_input(const float* x, std::int64_t ldx, std::int64_t m, std::span<const dense_target> targets);

/// One routed-expert projection: MXFP4 (view into the file or owned) or dense bf16.
struct expert_matrix {
  bool mxfp4 = false;
  mxfp4::matrix_view q;
  mxfp4::packed_matrix own; ///< backing store when quantized at load
  dense_weight d;
  [[nodiscard]] std::int64_t bytes() const noexcept { return mxfp4 ? q.bytes() : d.bytes(); }
};

struct expert_weights {
  expert_matrix w1, w3, w2; ///< gate, up, down
};

struct mlp_weights {
  dense_weight gate, up, down;
  [[nodiscard]] bool empty() const noexcept { return gate.empty(); }
  [[nodiscard]] std::int64_t bytes() const noexcept { return gate.bytes() + up.bytes() + down.bytes(); }
};

struct kda_weights {
  dense_weight q, k, v, f_a, f_b, b, g_a, g_b, g, o;
  std::vector<float> conv; ///< [3, P, K]: q, k, v streams
  std::vector<float> a_log; ///< [H] (K3: narrowed from the padded tensor)
  std::vector<float> dt_bias; ///< [P]
  std::vector<float> o_norm;  ///< [head_dim]
};

struct mla_weights {
  dense_weight q, q_a, q_b, kv_a, g, o;
  std::vector<float> q_a_norm, kv_a_norm;
  std::vector<float> kv_b; ///< [H·(nope + v), latent] fp32
};

struct moe_weights {
  dense_weight gate;          ///< router [E, hidden]
  std::vector<float> bias;    ///< e_score_correction_bias [E] (zeros if absent)
  std::vector<expert_weights> experts;
  mlp_weights shared;
  dense_weight latent_down, latent_up;
  std::vector<float> latent_norm;
  activations expert_act = activations::fp32; ///< routed experts' activation precision
};

struct layer_weights {
  bool kda = false;
  bool moe = false;
  std::vector<float> in_norm, post_norm;
  std::vector<float> attn_res_w, mlp_res_w; ///< fused AttnRes queries (K3)
  kda_weights kda_w;
  mla_weights mla_w;
  mlp_weights mlp;
  moe_weights moe_w;
};

struct model_weights {
  dense_weight embed;
  dense_weight lm_head; ///< empty when tied (embed is used)
  std::vector<float> final_norm;
  std::vector<float> out_res_w;
  std::vector<layer_weights> layers;

  [[nodiscard]] const dense_weight& head() const noexcept { return lm_head.empty() ? embed : lm_head; }
};

struct load_options {
  bool quantize_experts = false; ///< --quantization mxfp4 for bf16 experts
  int progress = -1;             ///< 1 always, 0 never, -1 when stderr is a terminal
  bool prefault = true;          ///< touch every mapped page under the progress bar
  /// With prefault: copy every tensor the model reads in place (bf16 matrices, MXFP4 experts)
  /// from the file mapping into anonymous, huge-page-advised memory
  /// (mapped_file::copy_to_memory) when the checkpoint fits in 90% of host_memory_available(),
  /// else keep serving from the mapping (a note says so).
  /// false (--mmap-weights): always serve from the mapping (page cache shared between processes).
  bool copy_to_memory = true;
  /// Reference numerics: MLA latent cache in fp32, routed-expert outputs not rounded to bf16
  /// before the combine, and fp32 activations into the bf16 matmuls. Production keeps the
  /// first two bf16 (spec §6) and gives the bf16 matmuls (the router excepted) 16-bit
  /// activations (activations::fp32_bf16x2, ≤ 2⁻¹⁷ relative: two bf16 parts instead of three on
  /// the bf16 × bf16 prefill routes); the invariance tests use this mode because a 1e-7
  /// difference can flip one bf16 rounding and show up as ~1e-3.
  bool exact_fp32 = false;
  /// Opt-in: round the activations entering bf16 and MXFP4 matmuls to bf16 (vdpbf16ps on
  /// AVX512-BF16; sums stay fp32; the router keeps fp32). Off by default because the prefill
  /// GEMM (OpenBLAS above 64 tokens) and the GEMV sum in different orders, and with a bf16
  /// rounding after every such difference greedy outputs then depend on batching and chunking
  /// (seen: 1 of 32 concurrent requests diverged from its solo run at token 10). Ignored with
  /// exact_fp32.
  bool bf16_activations = false;
  /// Opt-in: round the activations entering the routed MXFP4 experts to int8 per 32-column
  /// block (kernels/mxfp4/mxfp4_q8.hpp) and sum the integer products with AVX512-VNNI where the
  /// CPU has it (~2× the fp32 kernel from 5 tokens per expert: prefill and batched decode).
  /// Takes precedence over bf16_activations for the experts. Ignored with exact_fp32.
  bool int8_activations = false;
};

/// Binds every tensor; throws checkpoint_error naming the file and tensor on any mismatch.
/// `notes` (optional) receives human lines such as "skipped 312 vision tensors".
[[nodiscard]] model_weights load_weights(checkpoint& ckpt, const model_config& cfg, const load_options& opt,
                                         std::vector<std::string>* notes = nullptr);

/// Bytes of weights one decode token reads (attention, dense/shared FFN, top_k experts per MoE
/// layer, one embedding row, the head) — the numerator of the decode floor.
[[nodiscard]] std::int64_t active_weight_bytes(const model_weights& w, const model_config& cfg);

} // namespace k3::model
