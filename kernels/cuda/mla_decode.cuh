#pragma once
// Gated MLA decode on the GPU, absorbed form over the paged bf16 latent cache (spec §10; the
// CPU kernel is kernels/mla/mla.hpp): for sequence n (its new token's row already written at
// position ctx[n] − 1) and head h
//
//   q̃     = W_UK,hᵀ q_nope;   s_p = scale·(q̃·c_p + q_rot·kr_p), p < ctx[n]
//   o_lat = Σ softmax(s)_p c_p   (online softmax: each warp a strided share of the positions,
//                                 merged across the block — one pass over the cache)
//   o_h   = W_UV,h o_lat;   K3: o_h ⊙= sigmoid(gate_h)
//
// One block per (sequence, head). Cache rows [c_kv | k_rot] bf16, row p of sequence n at
// tables[n][p / block_size] + layer_offset + (p % block_size)·(latent + rope) (layer_offset: elements
// from a block's first layer to this layer's rows, so one block table serves every MLA layer). kv_b fp32 [H·(nope + v), latent].
// REQUIRES: latent % 32 == 0, latent ≤ 1024, nope, v ≤ 1024; ctx[n] ≥ 1.

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/device.cuh"

namespace k3::cuda {

struct mla_dims {
  int heads = 0, nope = 128, rope = 64, latent = 512, v = 128;
};

status mla_decode(const float* q_nope, const float* q_rot, const float* kv_b, const std::uint16_t* const* const* tables,
                  const std::int64_t* ctx, int block_size, std::int64_t layer_offset, const mla_dims& d, const float* gate, int sequences, float* out,
                  cudaStream_t stream);

} // namespace k3::cuda
