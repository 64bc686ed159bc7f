#pragma once
// Gated MLA prefill on the GPU, absorbed form over the paged bf16 latent cache: the same
// formulas as mla_decode.cuh (spec §10) for a chunk of `tokens` query tokens of ONE sequence
// at positions pos0 … pos0 + tokens − 1, causal (token t sees cache rows p ≤ pos0 + t, which
// must already be written: mla_cache_write first), so one prefill, chunked prefill and decode
// read identical inputs.
//
// One block per (16-token query tile, head): the tile's q̃ = W_UK,hᵀ q_nope rows and q_rot sit
// in shared memory; the cache is walked in 32-row tiles staged once in shared memory (bf16)
// for all 16 queries — scores (16 × 32), online softmax per query in fp32, o_lat accumulated
// in registers — then o_h = W_UV,h o_lat and the K3 sigmoid gate. SIMT fp32 (no tensor
// cores yet): the staged tile cuts cache reads 16× against per-token decode blocks.
//
// Layouts: q_nope [T, H, nope], q_rot [T, H, rope], gate [T, H·v] or nullptr, out [T, H·v];
// table: device block table of the sequence (rows [c_kv | k_rot], latent + rope bf16 each, this
// layer's rows layer_offset elements past each block pointer);
// kv_b fp32 [H·(nope + v), latent]. REQUIRES latent % 16 == 0, latent ≤ 1024, rope ≤ 128.

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/mla_decode.cuh"

namespace k3::cuda {

status mla_prefill(const float* q_nope, const float* q_rot, const float* kv_b, const std::uint16_t* const* table,
                   int block_size, std::int64_t layer_offset, std::int64_t pos0, int tokens, const mla_dims& d, const float* gate, float* out,
                   cudaStream_t stream);

} // namespace k3::cuda
