#pragma once
// MXFP4 (compressed-tensors layout) x fp32 GEMV on the GPU: y[r] = Σ_k W[r,k] x[k].
//
// One warp per output row; each lane reads 16 packed bytes (one 32-element block) per step,
// decodes through a shared 16-entry E2M1 table and applies the E8M0 scale exactly. This is the
// first CUDA kernel of the backend (issue 8 builds the grouped MoE GEMM on tensor cores); it
// exists now so the CUDA build, launcher conventions and the [gpu] test harness are exercised.
//
// REQUIRES: cols % 32 == 0; device pointers; returns a status instead of aborting.
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/device.cuh"

namespace k3::cuda {

status mxfp4_gemv(const std::uint8_t* packed, const std::uint8_t* scales, int rows, int cols, const float* x,
                  float* y, cudaStream_t stream);

} // namespace k3::cuda
