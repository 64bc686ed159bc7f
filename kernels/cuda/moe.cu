#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/moe_mma.cuh"

#include <cub/cub.cuh>
#include <thrust/iterator/counting_iterator.h>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/scratch_layout.cuh"
#include "kernels/cuda/mxfp4_device.cuh"

namespace k3::cuda {
namespace {

constexpr int kWarp = 32;
// Tokens of a segment per pass over a weight row. 4, not 8: on an H200, 8 ran 6 % slower at
// batch 1–16 (measured with 16-byte blocks per lane, when gate_up took 119 registers at 8 and
// fewer warps stayed resident to hide HBM latency).
constexpr int kTokChunk = 4;

using detail::e8m0;
using detail::round_bf16;
using detail::warp_sum;

__global__ void init_pairs(const std::int32_t* __restrict__ ids, int n, std::int32_t* keys, std::int32_t* pairs) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    keys[i] = ids[i];
    pairs[i] = i;
  }
}

__global__ void flag_heads(const std::int32_t* __restrict__ keys, int n, std::int32_t* flags) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) flags[i] = (i == 0 || keys[i] != keys[i - 1]) ? 1 : 0;
}

// Segment `seg` covers sorted positions [starts[seg], starts[seg+1]) (the last ends at n).
__device__ __forceinline__ bool segment(const std::int32_t* starts, const std::int32_t* nseg, int n, int seg, int& begin,
                                        int& end) {
  const int count = *nseg;
  if (seg >= count) return false;
  begin = starts[seg];
  end = seg + 1 < count ? starts[seg + 1] : n;
  return true;
}

// One warp per (segment, row of W1/W3): h[pair, row] = act(W1[row]·x, W3[row]·x).
__global__ void gate_up_kernel(const float* __restrict__ x, int width, const std::int32_t* __restrict__ keys,
                               const std::int32_t* __restrict__ pairs, const std::int32_t* __restrict__ starts,
                               const std::int32_t* __restrict__ nseg, int n, int top_k, moe_weights w, moe_activation act,
                               float* __restrict__ h) {
  const long long gw = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int seg = static_cast<int>(gw / w.inter), row = static_cast<int>(gw % w.inter);
  int begin = 0, end = 0;
  if (!segment(starts, nseg, n, seg, begin, end)) return;
  const int e = keys[begin];
  if (e >= w.experts) return; // another rank's experts (expert parallelism)
  const int nb = width / 32, nw = width / 8;
  const auto* p1 = reinterpret_cast<const std::uint32_t*>(w.w1_packed[e] + static_cast<long long>(row) * (width / 2));
  const std::uint8_t* s1 = w.w1_scales[e] + static_cast<long long>(row) * nb;
  const auto* p3 = reinterpret_cast<const std::uint32_t*>(w.w3_packed[e] + static_cast<long long>(row) * (width / 2));
  const std::uint8_t* s3 = w.w3_scales[e] + static_cast<long long>(row) * nb;
  for (int t0 = begin; t0 < end; t0 += kTokChunk) {
    const int nt = min(kTokChunk, end - t0);
    float g[kTokChunk] = {}, u[kTokChunk] = {};
    const float* xr[kTokChunk];
#pragma unroll
    for (int j = 0; j < kTokChunk; ++j) xr[j] = x + static_cast<long long>(pairs[t0 + min(j, nt - 1)] / top_k) * width;
    // Lane l takes 32-bit words l, l + 32, … of the row (8 codes each): the warp's weight loads
    // are 128 contiguous bytes, and its activation loads 32-byte steps (16-byte blocks per lane
    // put every lane's activations in another cache line: ncu showed L1 at 81 % and DRAM at 17 %).
    for (int wd = lane; wd < nw; wd += kWarp) {
      const std::uint32_t c1 = p1[wd], c3 = p3[wd];
      const float sc1 = e8m0(s1[wd / 4]), sc3 = e8m0(s3[wd / 4]);
      float v1[8], v3[8]; // the codes times 2^-14, decoded once for all tokens of the pass
      detail::e2m1x8_times_2m14(c1, v1);
      detail::e2m1x8_times_2m14(c3, v3);
#pragma unroll
      for (int j = 0; j < kTokChunk; ++j) { // unrolled: the per-token sums stay in registers
        if (j >= nt) break;
        const float4* xb = reinterpret_cast<const float4*>(xr[j] + 8 * wd);
        const float4 x0 = xb[0], x1 = xb[1];
        const float a1 = v1[0] * x0.x + v1[1] * x0.y + v1[2] * x0.z + v1[3] * x0.w + v1[4] * x1.x + v1[5] * x1.y + v1[6] * x1.z + v1[7] * x1.w;
        const float a3 = v3[0] * x0.x + v3[1] * x0.y + v3[2] * x0.z + v3[3] * x0.w + v3[4] * x1.x + v3[5] * x1.y + v3[6] * x1.z + v3[7] * x1.w;
        g[j] += (a1 * 16384.f) * sc1; // powers of two: exact, and no overflow from folding them first
        u[j] += (a3 * 16384.f) * sc3;
      }
    }
#pragma unroll
    for (int j = 0; j < kTokChunk; ++j) {
      if (j >= nt) break;
      const float a = warp_sum(g[j]), bsum = warp_sum(u[j]);
      if (lane != 0) continue;
      h[static_cast<long long>(pairs[t0 + j]) * w.inter + row] = detail::moe_glu(act, a, bsum);
    }
  }
}

// One warp per (segment, column of the output): out[pair, col] = weight · (W2[col] · h[pair]).
__global__ void down_kernel(const float* __restrict__ h, const float* __restrict__ weights, const std::int32_t* __restrict__ keys,
                            const std::int32_t* __restrict__ pairs, const std::int32_t* __restrict__ starts,
                            const std::int32_t* __restrict__ nseg, int n, moe_weights w, bool round_bf16_out,
                            float* __restrict__ out) {
  const long long gw = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int seg = static_cast<int>(gw / w.width), col = static_cast<int>(gw % w.width);
  int begin = 0, end = 0;
  if (!segment(starts, nseg, n, seg, begin, end)) return;
  const int e = keys[begin];
  if (e >= w.experts) return; // another rank's experts (expert parallelism)
  const int nb = w.inter / 32, nw = w.inter / 8;
  const auto* p2 = reinterpret_cast<const std::uint32_t*>(w.w2_packed[e] + static_cast<long long>(col) * (w.inter / 2));
  const std::uint8_t* s2 = w.w2_scales[e] + static_cast<long long>(col) * nb;
  for (int t0 = begin; t0 < end; t0 += kTokChunk) {
    const int nt = min(kTokChunk, end - t0);
    float acc[kTokChunk] = {};
    const float* hr[kTokChunk];
#pragma unroll
    for (int j = 0; j < kTokChunk; ++j) hr[j] = h + static_cast<long long>(pairs[t0 + min(j, nt - 1)]) * w.inter;
    for (int wd = lane; wd < nw; wd += kWarp) { // word-interleaved lanes, as in gate_up
      const std::uint32_t c = p2[wd];
      const float sc = e8m0(s2[wd / 4]);
      float v[8];
      detail::e2m1x8_times_2m14(c, v);
#pragma unroll
      for (int j = 0; j < kTokChunk; ++j) {
        if (j >= nt) break;
        const float4* hb = reinterpret_cast<const float4*>(hr[j] + 8 * wd);
        const float4 h0 = hb[0], h1 = hb[1];
        const float a = v[0] * h0.x + v[1] * h0.y + v[2] * h0.z + v[3] * h0.w + v[4] * h1.x + v[5] * h1.y + v[6] * h1.z + v[7] * h1.w;
        acc[j] += (a * 16384.f) * sc;
      }
    }
#pragma unroll
    for (int j = 0; j < kTokChunk; ++j) {
      if (j >= nt) break;
      float v = warp_sum(acc[j]);
      if (lane != 0) continue;
      if (round_bf16_out) v = round_bf16(v);
      const int pair = pairs[t0 + j];
      out[static_cast<long long>(pair) * w.width + col] = weights[pair] * v;
    }
  }
}

// y[t, c] = Σ_s out[t·k + s, c], slots in order.
__global__ void combine_kernel(const float* __restrict__ out, const std::int32_t* __restrict__ ids, int experts, int tokens,
                               int top_k, int width, float* __restrict__ y) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(tokens) * width) return;
  const long long t = i / width, c = i % width;
  float s = 0.f;
  for (int k = 0; k < top_k; ++k)
    if (ids[t * top_k + k] < experts) s += out[(t * top_k + k) * width + c]; // skipped slots were never written
  y[i] = s;
}

} // namespace

moe_workspace::moe_workspace(int max_tokens_, int top_k_, int experts_, int inter_, int width_)
    : max_tokens(max_tokens_), top_k(top_k_), experts(experts_), inter(inter_), width(width_) {
  const std::size_t n = static_cast<std::size_t>(max_tokens) * top_k;
  while ((1 << key_bits) < experts + 1) ++key_bits; // id == experts: another rank's expert
  std::size_t sort_bytes = 0, select_bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const std::int32_t*>(nullptr), static_cast<std::int32_t*>(nullptr),
                                  static_cast<const std::int32_t*>(nullptr), static_cast<std::int32_t*>(nullptr), static_cast<int>(n), 0,
                                  key_bits);
  cub::DeviceSelect::Flagged(nullptr, select_bytes, thrust::counting_iterator<std::int32_t>(0), static_cast<const std::int32_t*>(nullptr),
                             static_cast<std::int32_t*>(nullptr), static_cast<std::int32_t*>(nullptr), static_cast<int>(n));
  cub_bytes = std::max(sort_bytes, select_bytes);
  detail::scratch_layout lay;
  auto take = [&lay](std::size_t bytes) { return lay.take(bytes); };
  off_keys_in = take(n * 4);
  off_keys = take(n * 4);
  off_pairs_in = take(n * 4);
  off_pairs = take(n * 4);
  off_flags = take(n * 4);
  off_starts = take(n * 4);
  off_nseg = take(4);
  off_tiles = take((static_cast<std::size_t>(experts) + 2) * 4);
  off_h = take(n * static_cast<std::size_t>(inter) * 4);
  off_out = take(n * static_cast<std::size_t>(width) * 4);
  off_cub = take(cub_bytes);
  total_ = lay.total;
}

status moe_routed_experts(const float* x, const std::int32_t* ids, const float* weights, int tokens, const moe_weights& w,
                          const moe_activation& act, moe_workspace& ws, float* y, cudaStream_t stream, moe_path path) {
  if (tokens < 0 || tokens > ws.max_tokens) return {false, "moe_routed_experts: tokens outside [0, workspace max_tokens]"};
  if (w.width % 32 != 0 || w.inter % 32 != 0 || w.width <= 0 || w.inter <= 0)
    return {false, "moe_routed_experts: width and inter must be positive multiples of 32"};
  if (w.width != ws.width || w.inter != ws.inter || w.experts != ws.experts)
    return {false, "moe_routed_experts: the workspace was sized for other dimensions"};
  if (!ws.base_) return {false, "moe_routed_experts: workspace not bound to device memory"};
  if (tokens == 0) return {};
  const int n = tokens * ws.top_k;
  char* b = ws.base_;
  auto* keys_in = reinterpret_cast<std::int32_t*>(b + ws.off_keys_in);
  auto* keys = reinterpret_cast<std::int32_t*>(b + ws.off_keys);
  auto* pairs_in = reinterpret_cast<std::int32_t*>(b + ws.off_pairs_in);
  auto* pairs = reinterpret_cast<std::int32_t*>(b + ws.off_pairs);
  auto* flags = reinterpret_cast<std::int32_t*>(b + ws.off_flags);
  auto* starts = reinterpret_cast<std::int32_t*>(b + ws.off_starts);
  auto* nseg = reinterpret_cast<std::int32_t*>(b + ws.off_nseg);
  auto* h = reinterpret_cast<float*>(b + ws.off_h);
  auto* out = reinterpret_cast<float*>(b + ws.off_out);
  void* cub_tmp = b + ws.off_cub;
  constexpr int threads = 256;
  const int eblocks = (n + threads - 1) / threads;

  init_pairs<<<eblocks, threads, 0, stream>>>(ids, n, keys_in, pairs_in);
  K3_CUDA_TRY(cudaGetLastError());
  std::size_t tmp = ws.cub_bytes;
  K3_CUDA_TRY(cub::DeviceRadixSort::SortPairs(cub_tmp, tmp, keys_in, keys, pairs_in, pairs, n, 0, ws.key_bits, stream));
  flag_heads<<<eblocks, threads, 0, stream>>>(keys, n, flags);
  K3_CUDA_TRY(cudaGetLastError());
  tmp = ws.cub_bytes;
  K3_CUDA_TRY(cub::DeviceSelect::Flagged(cub_tmp, tmp, thrust::counting_iterator<std::int32_t>(0), flags, starts, nseg, n, stream));

  const long long max_seg = std::min(n, w.experts + 1); // + the skipped segment of other ranks' experts
  if (path == moe_path::automatic) path = n >= 8 * max_seg ? moe_path::mma : moe_path::gemv;
  if (path == moe_path::mma) {
    const detail::moe_routing r{keys, pairs, starts, nseg, n, ws.top_k};
    auto* tiles = reinterpret_cast<std::int32_t*>(b + ws.off_tiles);
    auto* hb = reinterpret_cast<__nv_bfloat16*>(h); // bf16 rows: half of the fp32 scratch
    if (auto st = detail::moe_mma_gate_up(x, w.width, r, w, act, tiles, hb, stream); !st) return st;
    if (auto st = detail::moe_mma_down(hb, weights, r, w, act.round_expert_outputs_bf16, tiles, out, stream); !st) return st;
  } else {
    // At most min(n, experts) segments; warps beyond the device-side count exit.
    const long long gu_warps = max_seg * w.inter, dn_warps = max_seg * w.width;
    const auto blocks_for = [&](long long warps) { return static_cast<unsigned>((warps * kWarp + threads - 1) / threads); };
    gate_up_kernel<<<blocks_for(gu_warps), threads, 0, stream>>>(x, w.width, keys, pairs, starts, nseg, n, ws.top_k, w, act, h);
    K3_CUDA_TRY(cudaGetLastError());
    down_kernel<<<blocks_for(dn_warps), threads, 0, stream>>>(h, weights, keys, pairs, starts, nseg, n, w, act.round_expert_outputs_bf16, out);
    K3_CUDA_TRY(cudaGetLastError());
  }
  const long long cells = static_cast<long long>(tokens) * w.width;
  combine_kernel<<<static_cast<unsigned>((cells + threads - 1) / threads), threads, 0, stream>>>(out, ids, w.experts, tokens, ws.top_k, w.width, y);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

} // namespace k3::cuda
