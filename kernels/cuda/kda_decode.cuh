#pragma once
// KDA recurrent decode on the GPU: one new token for each of N sequences, each sequence's fp32
// state [H, dk, dv] updated in place (spec model.md §5.3):
//
//   S ← Diag(exp(g)) · S;   S ← S + β · k ⊗ (v − Sᵀk);   o = Sᵀ q        (q pre-scaled)
//
// One block per (sequence, head), one thread per value column j: the thread walks column j of
// S twice (decayed dot with k, then the rank-1 update and the output dot), reading rows that
// are contiguous across the block (coalesced); q, k and exp(g) of the head sit in shared memory.
// The state traffic — read twice (the second from cache), written once — is the decode bound
// (≈0.87 GB per K3 token per sequence over a node, spec §13).
//
// Layouts as the CPU kda::recurrent_batch: q/k/g [N, H, dk], v/o [N, H, dv], beta [N, H];
// states: device array of N device pointers to [H, dk, dv]. REQUIRES dv ≤ 1024, dk ≤ 1024.

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/device.cuh"

namespace k3::cuda {

status kda_recurrent_decode(const float* q, const float* k, const float* v, const float* g, const float* beta, int sequences,
                            int heads, int dk, int dv, float* const* states, float* o, cudaStream_t stream);

} // namespace k3::cuda
