#pragma once
// KDA prefill on the GPU (spec model.md §5.3–§5.4): the delta-rule scan over whole prompts of
// several sequences packed back to back, each sequence's state [H, dk, dv] advanced in place.
//
//   kda_chunked_prefill    WY/UT chunked form, chunk 16 (the production path)
//   kda_recurrent_prefill  the literal per-token recurrence (baseline for `k3 bench cuda` and
//                          a second device-side oracle)
//
// Both give the CPU kda::chunked / kda::recurrent result up to rounding for ANY log-decay
// g ≤ 0 — K3's bounded gate and Kimi Linear's unbounded softplus gate alike: the chunked
// kernel evaluates every intra-chunk decay pairwise as e^(G_i − G_j) with j ≤ i (argument
// ≤ 0) and the operand decays e^G, e^(G_last − G) (arguments ≤ 0), so nothing overflows; it
// never factors e^(G_i)·e^(−G_j) the way the CPU fast path does.
//
// Work split (chunked): one block per (value tile of 32 columns, head, sequence). Columns of
// the state evolve independently given the chunk's keys, so a head's dv columns split over
// dv/32 blocks that run concurrently and share the chunk's q/k/g rows through L2; per chunk a
// block forms the decayed operands and the 16×16 score matrices (recomputed per tile: cheap
// next to the state products), solves T = (I + A)⁻¹ diag(β) by forward substitution, then
//   P = [e^G⊙K; e^G⊙Q]·S,  Vn = T (V − P_top),  O = P_bot + Aqk Vn,
//   S ← diag(e^G_last) S + (e^(G_last − G)⊙K)ᵀ Vn
// with the state tile resident in shared memory for the whole sequence (loaded once, stored
// once). No host synchronisation; capturable in a CUDA graph.
//
// Layouts (token-major, as the projections produce them): q, k, g [T_total, H, dk] (q, k after
// prepare_qk), v, o [T_total, H, dv], beta [T_total, H]; cu_seqlens: device [N + 1] token
// offsets (cu_seqlens[0] = 0); states: device array of N device pointers to [H, dk, dv], fp32
// or bf16 (state_dtype). With bf16 states the math stays fp32; the state is rounded to bf16
// once per call (on the store). REQUIRES 1 ≤ dk ≤ 256, 1 ≤ dv ≤ 256, non-aliasing buffers.
// dk·dv·4 bytes of shared memory per recurrent block (≤ 200 KiB).

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/device.cuh"

namespace k3::cuda {

enum class state_dtype { fp32, bf16 };

struct kda_prefill_args {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* g = nullptr;
  const float* beta = nullptr;
  const long long* cu_seqlens = nullptr; ///< device, N + 1 entries
  void* const* states = nullptr;         ///< device, N pointers (float* or __nv_bfloat16*)
  float* o = nullptr;
  int sequences = 0;
  int heads = 0;
  int dk = 128;
  int dv = 128;
  state_dtype state = state_dtype::fp32;
};

inline constexpr int kda_prefill_chunk = 16;

status kda_chunked_prefill(const kda_prefill_args& a, cudaStream_t stream);
status kda_recurrent_prefill(const kda_prefill_args& a, cudaStream_t stream);

/// Floating-point operations of the chunked form for `tokens` tokens (the bench's TFLOP/s).
[[nodiscard]] double kda_chunked_flops(long long tokens, int heads, int dk, int dv);

} // namespace k3::cuda
