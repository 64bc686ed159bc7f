#include "kernels/cuda/mxfp4_gemv.cuh"

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/mxfp4_device.cuh"

namespace k3::cuda {
namespace {

using detail::e8m0;

__global__ void mxfp4_gemv_kernel(const std::uint8_t* __restrict__ packed, const std::uint8_t* __restrict__ scales,
                                  int rows, int cols, const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float lut[16];
  if (threadIdx.x < 16) {
    const float v[16] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};
    lut[threadIdx.x] = v[threadIdx.x];
  }
  __syncthreads();
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= rows) return;
  const int nb = cols / 32;
  const std::uint8_t* p = packed + static_cast<long long>(warp) * (cols / 2);
  const std::uint8_t* s = scales + static_cast<long long>(warp) * nb;
  float acc = 0.f;
  for (int b = lane; b < nb; b += 32) {
    const uint4 q = *reinterpret_cast<const uint4*>(p + b * 16);
    const std::uint32_t words[4] = {q.x, q.y, q.z, q.w};
    const float* xb = x + b * 32;
    float part = 0.f;
#pragma unroll
    for (int w = 0; w < 4; ++w)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const std::uint32_t byte = (words[w] >> (8 * j)) & 0xFF;
        part += lut[byte & 0xF] * xb[(w * 4 + j) * 2] + lut[byte >> 4] * xb[(w * 4 + j) * 2 + 1];
      }
    acc += part * e8m0(s[b]);
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) y[warp] = acc;
}

} // namespace

status mxfp4_gemv(const std::uint8_t* packed, const std::uint8_t* scales, int rows, int cols, const float* x,
                  float* y, cudaStream_t stream) {
  if (cols <= 0 || cols % 32 != 0 || rows < 0) return {false, "mxfp4_gemv: cols must be a positive multiple of 32"};
  if (rows == 0) return {};
  if ((reinterpret_cast<std::uintptr_t>(packed) % 16) != 0 || (cols / 2) % 16 != 0)
    return {false, "mxfp4_gemv: packed rows must be 16-byte aligned"};
  constexpr int threads = 256;
  const int blocks = (rows * 32 + threads - 1) / threads;
  mxfp4_gemv_kernel<<<blocks, threads, 0, stream>>>(packed, scales, rows, cols, x, y);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

} // namespace k3::cuda
