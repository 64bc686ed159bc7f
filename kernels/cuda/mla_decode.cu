#include "kernels/cuda/mla_decode.cuh"

#include <cmath>

#include "kernels/cuda/check.cuh"

namespace k3::cuda {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32, kMaxPerLane = 32; // latent ≤ 1024

__device__ __forceinline__ float bf16(std::uint16_t b) { return __uint_as_float(static_cast<unsigned>(b) << 16); }

__global__ void mla_decode_kernel(const float* __restrict__ q_nope, const float* __restrict__ q_rot, const float* __restrict__ kv_b,
                                  const std::uint16_t* const* const* __restrict__ tables, const std::int64_t* __restrict__ ctx,
                                  int block_size, long long layer_offset, mla_dims d, const float* __restrict__ gate,
                                  float* __restrict__ out) {
  extern __shared__ float sh[];
  float* qt = sh;                        // [latent]  q̃
  float* qr = qt + d.latent;             // [rope]
  float* wm = qr + d.rope;               // [kWarps]  running max per warp
  float* wl = wm + kWarps;               // [kWarps]  running sum per warp
  float* wacc = wl + kWarps;             // [kWarps][latent]
  float* olat = wacc + kWarps * d.latent; // [latent]
  const int n = blockIdx.x / d.heads, h = blockIdx.x % d.heads;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const float* qn = q_nope + (static_cast<long long>(n) * d.heads + h) * d.nope;
  const long long krow = static_cast<long long>(h) * (d.nope + d.v);
  // q̃[c] = Σ_i q_nope[i] · kv_b[h·(nope+v) + i][c]
  for (int c = tid; c < d.latent; c += kThreads) {
    float s = 0.f;
    for (int i = 0; i < d.nope; ++i) s += qn[i] * kv_b[(krow + i) * d.latent + c];
    qt[c] = s;
  }
  for (int r = tid; r < d.rope; r += kThreads) qr[r] = q_rot[(static_cast<long long>(n) * d.heads + h) * d.rope + r];
  __syncthreads();
  const float scale = rsqrtf(static_cast<float>(d.nope + d.rope));
  const int width = d.latent + d.rope, per_lane = d.latent / 32;
  const std::int64_t len = ctx[n];
  const std::uint16_t* const* blocks = tables[n];
  float m = -INFINITY, l = 0.f, acc[kMaxPerLane];
  // Unrolled to kMaxPerLane with a guard: static indices keep acc in registers (a loop bound
  // known only at run time put it in local memory).
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) acc[j] = 0.f;
  for (std::int64_t p = warp; p < len; p += kWarps) {
    const std::uint16_t* row = blocks[p / block_size] + layer_offset + (p % block_size) * width;
    float part = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j)
      if (j < per_lane) part += qt[lane + 32 * j] * bf16(row[lane + 32 * j]);
    for (int r = lane; r < d.rope; r += 32) part += qr[r] * bf16(row[d.latent + r]);
#pragma unroll
    for (int off = 16; off > 0; off /= 2) part += __shfl_xor_sync(0xffffffffu, part, off);
    const float s = part * scale;
    const float mn = fmaxf(m, s), corr = expf(m - mn), e = expf(s - mn);
    l = l * corr + e;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j)
      if (j < per_lane) acc[j] = acc[j] * corr + e * bf16(row[lane + 32 * j]);
    m = mn;
  }
  if (lane == 0) {
    wm[warp] = m;
    wl[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j)
    if (j < per_lane) wacc[warp * d.latent + lane + 32 * j] = acc[j];
  __syncthreads();
  // Merge the warps' partial softmaxes.
  float gm = -INFINITY;
  for (int w = 0; w < kWarps; ++w) gm = fmaxf(gm, wm[w]);
  float gl = 0.f;
  for (int w = 0; w < kWarps; ++w) gl += wm[w] == -INFINITY ? 0.f : wl[w] * expf(wm[w] - gm);
  for (int c = tid; c < d.latent; c += kThreads) {
    float s = 0.f;
    for (int w = 0; w < kWarps; ++w)
      if (wm[w] != -INFINITY) s += wacc[w * d.latent + c] * expf(wm[w] - gm);
    olat[c] = s / gl;
  }
  __syncthreads();
  // o_h[j] = Σ_c kv_b[h·(nope+v) + nope + j][c] · o_lat[c], then the K3 output gate.
  for (int j = tid; j < d.v; j += kThreads) {
    const float* wrow = kv_b + (krow + d.nope + j) * d.latent;
    float s = 0.f;
    for (int c = 0; c < d.latent; ++c) s += wrow[c] * olat[c];
    const long long oi = static_cast<long long>(n) * d.heads * d.v + static_cast<long long>(h) * d.v + j;
    if (gate) s *= 1.f / (1.f + expf(-gate[oi]));
    out[oi] = s;
  }
}

} // namespace

status mla_decode(const float* q_nope, const float* q_rot, const float* kv_b, const std::uint16_t* const* const* tables,
                  const std::int64_t* ctx, int block_size, std::int64_t layer_offset, const mla_dims& d, const float* gate,
                  int sequences, float* out,
                  cudaStream_t stream) {
  if (d.heads < 1 || d.latent <= 0 || d.latent % 32 != 0 || d.latent > 32 * kMaxPerLane || d.nope < 1 || d.rope < 0 || d.v < 1 ||
      block_size < 1 || sequences < 0)
    return {false, "mla_decode: need heads >= 1, latent a multiple of 32 up to 1024, nope/v >= 1, block_size >= 1"};
  if (sequences == 0) return {};
  const std::size_t smem = sizeof(float) * (static_cast<std::size_t>(d.latent) * (2 + kWarps) + d.rope + 2 * kWarps);
  if (smem > 48 * 1024) K3_CUDA_TRY(cudaFuncSetAttribute(mla_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  mla_decode_kernel<<<sequences * d.heads, kThreads, smem, stream>>>(q_nope, q_rot, kv_b, tables, ctx, block_size, layer_offset, d, gate, out);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

} // namespace k3::cuda
