#pragma once
// Row-wise GPU ops of the forward pass, fp32, the same contracts as the CPU kernels
// (kernels/ops/norms.hpp, kernels/router/router.hpp): one block per row, block reductions.
//
//   rms_norm        y = x / sqrt(mean(x²) + eps) ⊙ w
//   rms_norm_gated  y = rms_norm(x, w) ⊙ sigmoid(gate)
//   l2_norm         y = x · rsqrt(Σx² + eps)
//   route           sigmoid router with selection bias, top-k (ties: lower id first, ids in
//                   descending choice order), weights = sigmoid scores renormalized and scaled;
//                   one expert group (both Kimi models use num_expert_group = 1)
// In place allowed for the norms (y == x).

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/device.cuh"

namespace k3::cuda {

status rms_norm(const float* x, const float* w, float eps, int rows, int n, float* y, cudaStream_t stream);
/// Rows of n values at row strides ldx / ldy (e.g. the latent part of [c_kv | k_rot] rows).
status rms_norm_strided(const float* x, long long ldx, const float* w, float eps, int rows, int n, float* y, long long ldy,
                        cudaStream_t stream);
status rms_norm_gated(const float* x, const float* gate, const float* w, float eps, int rows, int n, float* y, cudaStream_t stream);
status l2_norm(const float* x, float eps, int rows, int n, float* y, cudaStream_t stream);

struct route_params {
  int num_experts = 0, top_k = 0;
  bool renormalize = true;
  float scaling = 1.0f;
};

/// logits [T, E]; bias [E] or nullptr; ids [T, k]; weights [T, k]. REQUIRES top_k ≤ 64.
status route(const float* logits, int tokens, const float* bias, const route_params& p, std::int32_t* ids, float* weights,
             cudaStream_t stream);

} // namespace k3::cuda
