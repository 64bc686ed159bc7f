#pragma once
// The elementwise KDA pieces on the GPU, same contracts as kernels/kda/kda.hpp:
//   short_conv   causal depthwise conv + SiLU with carried state [C, K−1] (oldest first);
//                x, y: [N, T, C] for N sequences of T tokens each (decode: T = 1; prefill:
//                N = 1), states: device array of N state pointers; y may alias x
//   decay_gate   softplus (Kimi Linear) or lower-bound sigmoid (K3) log-decay, [T, H·dk]
//   beta_sigmoid in place
//   prepare_qk   per-head L2 norm (eps 1e-6) of q and k, q scaled by dk^-0.5, in place

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/device.cuh"

namespace k3::cuda {

status short_conv(const float* x, int sequences, int tokens, int channels, const float* w, int kernel, float* const* states, float* y,
                  cudaStream_t stream);

enum class gate_kind { softplus, lower_bound };
status decay_gate(const float* graw, int tokens, int heads, int dk, const float* A_log, const float* dt_bias, gate_kind kind,
                  float lower_bound, float* g, cudaStream_t stream);
status beta_sigmoid(float* b, long long n, cudaStream_t stream);
status prepare_qk(float* q, float* k, int tokens, int heads, int dk, cudaStream_t stream);

} // namespace k3::cuda
