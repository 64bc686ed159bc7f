#pragma once
// Device-side MXFP4 decoding and small numeric helpers shared by the CUDA kernels
// (spec mxfp4.md): E2M1 codes (bit 3 sign, bits 2–1 exponent, bit 0 mantissa) and E8M0 block
// scales 2^(e − 127), 0xFF = NaN, decoded exactly as the CPU reference does.
#include <cstdint>

#include <cuda_runtime.h>

namespace k3::cuda::detail {

__device__ __forceinline__ float e8m0(std::uint8_t e) {
  if (e == 0xFF) return __int_as_float(0x7fc00000);
  if (e == 0) return __int_as_float(0x00400000); // 2^-127 is an fp32 subnormal
  return __int_as_float(static_cast<int>(e) << 23);
}

__device__ __forceinline__ float e2m1(unsigned code) {
  constexpr float mag[8] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float v = mag[code & 7u];
  return (code & 8u) ? -v : v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

/// Block-wide sum; every thread gets it. scratch: 32 shared floats. Contains barriers; the
/// scratch is reusable when it returns.
__device__ inline float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float t = threadIdx.x < blockDim.x / 32 ? scratch[threadIdx.x] : 0.f;
  if (threadIdx.x < 32) t = warp_sum(t);
  if (threadIdx.x == 0) scratch[0] = t;
  __syncthreads();
  t = scratch[0];
  __syncthreads();
  return t;
}

/// Block-wide arg-max of every thread's (v, i), ties to the lower index; every thread gets the
/// result. sv, si: shared scratch of blockDim.x / 32 entries. Contains barriers (call from all
/// threads); the scratch is reusable when it returns.
__device__ inline void block_argmax(float& v, int& i, float* sv, int* si) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, off);
    const int oi = __shfl_xor_sync(0xffffffffu, i, off);
    if (ov > v || (ov == v && oi < i)) v = ov, i = oi;
  }
  if (threadIdx.x % 32 == 0) sv[threadIdx.x / 32] = v, si[threadIdx.x / 32] = i;
  __syncthreads();
  v = sv[0], i = si[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w)
    if (sv[w] > v || (sv[w] == v && si[w] < i)) v = sv[w], i = si[w];
  __syncthreads();
}

/// Round to the nearest bf16 (ties to even), kept as fp32; inf and NaN unchanged.
__device__ __forceinline__ float round_bf16(float v) {
  unsigned u = __float_as_uint(v);
  if ((u & 0x7f800000u) == 0x7f800000u) return v;
  u += 0x7fffu + ((u >> 16) & 1u);
  return __uint_as_float(u & 0xffff0000u);
}

} // namespace k3::cuda::detail
