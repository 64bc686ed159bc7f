#pragma once
// Internal to kernels/cuda: the tensor-core (prefill) path of moe_routed_experts (moe.cuh) and
// the gated activation both paths share. Not a public API.
//
// Grouped GEMM over the expert segments of the sorted routing: the (expert, pair) rows of each
// segment are cut into tiles of 64 rows (a device-side tile map: exclusive prefix of
// ceil(rows / 64) over segments, built by one block, no host read-back); a thread block
// computes 64 rows × 64 outputs of one tile, K in steps of 32 = one MXFP4 block per weight
// row: the 64 weight rows' blocks are decoded (E2M1 × E8M0, exact in bf16) into shared memory
// as bf16, the activation rows gathered (x by token for gate/up, h by pair for down) and
// rounded to bf16, and four warps run bf16 WMMA 16×16×16 with fp32 accumulation (32×32 per
// warp). gate/up keeps both accumulators and applies the GLU on the fragments (same fragment
// type, same element mapping) before writing h in bf16; down applies the routing weight and
// the optional bf16 rounding of the expert output. Numerics: W4A16 — activations and h are
// bf16 at the MMA inputs, every sum fp32.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/moe.cuh"

namespace k3::cuda::detail {

inline constexpr int moe_tile_rows = 64;

/// The GLU of one hidden unit from its gate (W1·x) and up (W3·x) sums.
__device__ __forceinline__ float moe_glu(const moe_activation& act, float a, float b) {
  if (act.situ) {
    const float gate = act.beta * tanhf(a / act.beta) * (1.f / (1.f + expf(-a)));
    const float up = act.linear_beta > 0.f ? act.linear_beta * tanhf(b / act.linear_beta) : b;
    return gate * up;
  }
  return a / (1.f + expf(-a)) * b;
}

/// Sorted routing as moe.cu builds it: keys/pairs sorted by expert, segment starts and count.
struct moe_routing {
  const std::int32_t* keys = nullptr;
  const std::int32_t* pairs = nullptr;
  const std::int32_t* starts = nullptr;
  const std::int32_t* nseg = nullptr;
  int n = 0;     ///< tokens × top_k
  int top_k = 0;
};

/// Upper bound on the number of 64-row tiles (host side, for the grid).
[[nodiscard]] inline int moe_max_tiles(int n, int experts) {
  return (n + moe_tile_rows - 1) / moe_tile_rows + (n < experts + 1 ? n : experts + 1);
}

/// tiles: device [experts + 2] (tiles[experts + 1] receives the total).
status moe_mma_gate_up(const float* x, int width, const moe_routing& r, const moe_weights& w, const moe_activation& act,
                       std::int32_t* tiles, __nv_bfloat16* h, cudaStream_t stream);
status moe_mma_down(const __nv_bfloat16* h, const float* weights, const moe_routing& r, const moe_weights& w,
                    bool round_bf16_out, const std::int32_t* tiles, float* out, cudaStream_t stream);

} // namespace k3::cuda::detail
