#pragma once
// Device-side MXFP4 decoding and small numeric helpers shared by the CUDA kernels
// (spec mxfp4.md): E2M1 codes (bit 3 sign, bits 2–1 exponent, bit 0 mantissa) and E8M0 block
// scales 2^(e − 127), 0xFF = NaN, decoded exactly as the CPU reference does.
#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace k3::cuda::detail {

__device__ __forceinline__ float e8m0(std::uint8_t e) {
  if (e == 0xFF) return __int_as_float(0x7fc00000);
  if (e == 0) return __int_as_float(0x00400000); // 2^-127 is an fp32 subnormal
  return __int_as_float(static_cast<int>(e) << 23);
}

// No table: a local array indexed by a run-time code lives in local memory, and the MoE GEMV
// spent its time storing and reloading it (66 GB/s on an H200). Twice the magnitudes
// {0, .5, 1, 1.5, 2, 3, 4, 6} are the integers 0, 1, 2, 3, 4, 6, 8, 12: one nibble each of a
// 32-bit constant, then an exact int-to-float conversion and halving.
__device__ __forceinline__ float e2m1(unsigned code) {
  const unsigned twice = (0xC8643210u >> ((code & 7u) * 4u)) & 0xFu;
  const float v = static_cast<float>(twice) * 0.5f;
  return (code & 8u) ? -v : v;
}

/// The eight E2M1 codes of a 32-bit word (code i in bits 4i..4i+3), each as fp32 times 2^-14:
/// a code's sign, exponent and mantissa bits dropped into an fp16's fields (bits 15, 11–10, 9)
/// make exactly 2^-14 times its value (code 1, 0.5, becomes the fp16 subnormal 2^-15), and the
/// fp16 → fp32 conversion is exact. Four shifts and masks build two codes at a time, about a
/// third of the instructions of decoding each code on its own; callers multiply sums by 2^14.
__device__ __forceinline__ void e2m1x8_times_2m14(std::uint32_t w, float (&v)[8]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const std::uint32_t t = w >> (4 * j); // code j in bits 0–3, code j + 4 in bits 16–19
    const std::uint32_t h = ((t & 0x00070007u) << 9) | ((t & 0x00080008u) << 12);
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
    v[j] = f.x;
    v[j + 4] = f.y;
  }
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
