#pragma once
// Routed experts of one MoE layer on the GPU, decode and prefill paths:
//
//   for every token t and slot s (expert e = ids[t,s], weight w = weights[t,s]):
//     h      = SiTU-GLU(W1_e · x_t, W3_e · x_t)          (or SiLU-GLU)
//     y_t   += w · (W2_e · h)                              summed over s in slot order
//
// Steps, all on the stream with no host synchronization (capturable in a CUDA graph):
//   1. routing metadata: (expert, pair) sorted by expert with CUB's stable radix sort; segment
//      heads flagged and compacted (CUB select) → segment starts and their count, on device;
//   2. gate/up, decode path (few rows per expert): one warp per (segment, output row) reads that row of W1 and W3 once and
//      applies it to every token of the segment (weights stream once per step: the decode
//      bound), MXFP4 decoded in registers (E2M1 table, exact E8M0 scale), fp32 math, the
//      activation fused;
//   3. down: one warp per (segment, output column), the routing weight applied;
//      prefill path (many rows per expert): tensor-core grouped GEMM, 64-row tiles of each
//      segment, MXFP4 decoded to bf16 per K step, bf16 WMMA with fp32 sums (moe_mma.cuh);
//   4. combine: per token the k slot outputs summed in slot order (deterministic: no atomics),
//      optionally rounding each expert output to bf16 first (K3's production numerics).
// The grid is sized from T·k on the host (no device read-back); warps past the device-side
// segment count exit at once.
//
// Layouts: x [T, width] fp32; ids/weights [T, k]; expert e's matrices are MXFP4 in the
// compressed-tensors layout (W1, W3: [inter, width]; W2: [width, inter]), reached through
// device arrays of per-expert pointers (weights stay where the loader put them). y [T, width].
// REQUIRES: width % 32 == 0, inter % 32 == 0, 16-byte aligned packed rows, ids in [0, experts].
// Expert parallelism: an id equal to `experts` marks a slot whose expert lives on another rank;
// it is sorted into a segment the kernels skip and contributes nothing to y (the ranks' partial
// sums are then all-reduced).

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/device.cuh"

namespace k3::cuda {

struct moe_weights {
  const std::uint8_t* const* w1_packed = nullptr; ///< device array [experts] of device pointers
  const std::uint8_t* const* w1_scales = nullptr;
  const std::uint8_t* const* w3_packed = nullptr;
  const std::uint8_t* const* w3_scales = nullptr;
  const std::uint8_t* const* w2_packed = nullptr;
  const std::uint8_t* const* w2_scales = nullptr;
  int experts = 0, inter = 0, width = 0;
};

/// Which GEMM form runs steps 2–3. automatic picks mma when the batch averages ≥ 8 rows per
/// active expert (tokens·k / min(tokens·k, experts + 1)), where re-reading a weight row per
/// 8-token pass of the decode kernels stops being free.
enum class moe_path { automatic, gemv, mma };

struct moe_activation {
  bool situ = true;          ///< false: SiLU-GLU (Kimi Linear)
  float beta = 4.0f;         ///< activation_situ_beta
  float linear_beta = 25.0f; ///< activation_situ_linear_beta (≤ 0: up branch untransformed)
  bool round_expert_outputs_bf16 = false;
};

/// Device scratch for up to `max_tokens` tokens; one allocation of bytes() reused every step.
class moe_workspace {
public:
  /// Sizes the scratch (queries CUB); no device memory is allocated here.
  moe_workspace(int max_tokens, int top_k, int experts, int inter, int width);
  [[nodiscard]] std::size_t bytes() const noexcept { return total_; }
  /// `base` must point at bytes() of device memory, 256-byte aligned (cudaMalloc is).
  void bind(void* base) noexcept { base_ = static_cast<char*>(base); }

  int max_tokens, top_k, experts, inter, width;

private:
  friend status moe_routed_experts(const float*, const std::int32_t*, const float*, int, const moe_weights&,
                                   const moe_activation&, moe_workspace&, float*, cudaStream_t, moe_path);
  std::size_t off_keys_in = 0, off_keys = 0, off_pairs_in = 0, off_pairs = 0, off_flags = 0, off_starts = 0,
              off_nseg = 0, off_tiles = 0, off_h = 0, off_out = 0, off_cub = 0, cub_bytes = 0, total_ = 0;
  int key_bits = 1;
  char* base_ = nullptr;
};

/// The routed-expert part of one MoE layer for `tokens` tokens (≤ ws.max_tokens). The gemv path
/// computes in fp32 from fp32 x; the mma path rounds x and h to bf16 at the MMA inputs (W4A16).
status moe_routed_experts(const float* x, const std::int32_t* ids, const float* weights, int tokens, const moe_weights& w,
                          const moe_activation& act, moe_workspace& ws, float* y, cudaStream_t stream,
                          moe_path path = moe_path::automatic);

} // namespace k3::cuda
