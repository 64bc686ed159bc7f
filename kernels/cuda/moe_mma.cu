// Tensor-core grouped GEMM path of the routed experts; contract in moe_mma.cuh.
#include "kernels/cuda/moe_mma.cuh"

#include <mma.h>

#include <cub/block/block_scan.cuh>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/mxfp4_device.cuh"

namespace k3::cuda::detail {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int TM = moe_tile_rows, TN = 64, TK = 32, kThreads = 128;
constexpr int LDS = TK + 8; // bf16 row stride of the operand tiles (80 B: 32-byte aligned 16-row steps)
constexpr int LDC = TN + 4; // fp32 row stride of the epilogue tile
constexpr int kScanThreads = 1024;

using frag_a = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
using frag_b = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major>;
using frag_c = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// tiles[s] = Σ_{s' < s} ceil(rows(s') / TM) for the device-side segment count (≤ experts + 1, the
// last possibly the skipped segment of other ranks' experts); tiles[experts + 1] = total.
__global__ void tile_map_kernel(const std::int32_t* __restrict__ starts, const std::int32_t* __restrict__ nseg, int n,
                                int experts, std::int32_t* __restrict__ tiles) {
  using scan = cub::BlockScan<int, kScanThreads>;
  __shared__ typename scan::TempStorage tmp;
  __shared__ int carry;
  const int count = *nseg;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int base = 0; base < count; base += kScanThreads) {
    const int s = base + static_cast<int>(threadIdx.x);
    int len = 0;
    if (s < count) {
      const int b = starts[s], e = s + 1 < count ? starts[s + 1] : n;
      len = (e - b + TM - 1) / TM;
    }
    int excl = 0, total = 0;
    scan(tmp).ExclusiveSum(len, excl, total);
    if (s < count) tiles[s] = carry + excl;
    __syncthreads();
    if (threadIdx.x == 0) carry += total;
    __syncthreads();
  }
  if (threadIdx.x == 0) tiles[experts + 1] = carry;
}

struct tile_info {
  int expert, m0, m1; // sorted rows [m0, m1) of this tile
};

// Thread 0 locates the tile's segment (binary search over the tile map); false past the end.
__device__ bool locate_tile(const moe_routing& r, const std::int32_t* tiles, int experts, int tile, tile_info& out) {
  if (tile >= tiles[experts + 1]) return false;
  const int count = *r.nseg;
  int lo = 0, hi = count - 1; // largest s with tiles[s] <= tile
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tiles[mid] <= tile) lo = mid;
    else hi = mid - 1;
  }
  const int begin = r.starts[lo], end = lo + 1 < count ? r.starts[lo + 1] : r.n;
  out.expert = r.keys[begin];
  out.m0 = begin + (tile - tiles[lo]) * TM;
  out.m1 = min(end, out.m0 + TM);
  return true;
}

// Block-wide: the tile of blockIdx.x and its rows' pair ids (−1 past the segment) in s_pair.
// false for the whole block past the last tile or on another rank's experts (expert parallelism).
__device__ bool load_tile(const moe_routing& r, const std::int32_t* tiles, int experts, int* s_pair, tile_info& t) {
  __shared__ tile_info s_tile;
  __shared__ bool s_valid;
  if (threadIdx.x == 0) s_valid = locate_tile(r, tiles, experts, blockIdx.x, s_tile) && s_tile.expert < experts;
  __syncthreads();
  if (!s_valid) return false;
  t = s_tile;
  for (int i = threadIdx.x; i < TM; i += kThreads) s_pair[i] = t.m0 + i < t.m1 ? r.pairs[t.m0 + i] : -1;
  __syncthreads();
  return true;
}

// 16 consecutive MXFP4 values of one weight row (8 packed bytes, one scale) → bf16 in smem.
__device__ __forceinline__ void decode16(const std::uint8_t* packed8, std::uint8_t scale, __nv_bfloat16* dst) {
  const uint2 q = *reinterpret_cast<const uint2*>(packed8);
  const float sc = e8m0(scale);
  const std::uint32_t words[2] = {q.x, q.y};
#pragma unroll
  for (int b = 0; b < 8; ++b) {
    const unsigned byte = (words[b / 4] >> (8 * (b % 4))) & 0xFFu;
    dst[2 * b] = __float2bfloat16(e2m1(byte & 0xFu) * sc); // exact: a power of two times ≤ 3 bits
    dst[2 * b + 1] = __float2bfloat16(e2m1(byte >> 4) * sc);
  }
}

__device__ __forceinline__ void zero16(__nv_bfloat16* dst) {
#pragma unroll
  for (int i = 0; i < 16; ++i) dst[i] = __float2bfloat16(0.f);
}

__global__ void __launch_bounds__(kThreads) gate_up_mma_kernel(const float* __restrict__ x, int width, moe_routing r,
                                                              moe_weights w, moe_activation act,
                                                              const std::int32_t* __restrict__ tiles,
                                                              __nv_bfloat16* __restrict__ h) {
  __shared__ __align__(32) __nv_bfloat16 As[TM * LDS], B1s[TN * LDS], B3s[TN * LDS];
  __shared__ __align__(32) float Cs[TM * LDC];
  __shared__ int s_pair[TM];
  const int tid = threadIdx.x, n0 = blockIdx.y * TN;
  tile_info t;
  if (!load_tile(r, tiles, w.experts, s_pair, t)) return;
  const int warp = tid / 32, wm = warp / 2, wn = warp % 2;
  frag_c g[2][2], u[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(g[i][j], 0.f), wmma::fill_fragment(u[i][j], 0.f);
  const int lrow = tid / 2, lhalf = tid % 2; // loader: one row, 16 of its 32 K values
  const int pair = s_pair[lrow];
  const float* xrow = pair >= 0 ? x + static_cast<long long>(pair / r.top_k) * width : nullptr;
  const int orow = n0 + lrow;
  const bool ovalid = orow < w.inter;
  const std::uint8_t *p1 = nullptr, *c1 = nullptr, *p3 = nullptr, *c3 = nullptr;
  if (ovalid) {
    p1 = w.w1_packed[t.expert] + static_cast<long long>(orow) * (width / 2);
    c1 = w.w1_scales[t.expert] + static_cast<long long>(orow) * (width / 32);
    p3 = w.w3_packed[t.expert] + static_cast<long long>(orow) * (width / 2);
    c3 = w.w3_scales[t.expert] + static_cast<long long>(orow) * (width / 32);
  }
  for (int k0 = 0; k0 < width; k0 += TK) {
    __nv_bfloat16* a = As + lrow * LDS + lhalf * 16;
    if (xrow) {
      const float4* src = reinterpret_cast<const float4*>(xrow + k0 + lhalf * 16);
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const float4 f = src[v];
        a[4 * v] = __float2bfloat16(f.x), a[4 * v + 1] = __float2bfloat16(f.y);
        a[4 * v + 2] = __float2bfloat16(f.z), a[4 * v + 3] = __float2bfloat16(f.w);
      }
    } else {
      zero16(a);
    }
    if (ovalid) {
      decode16(p1 + k0 / 2 + lhalf * 8, c1[k0 / 32], B1s + lrow * LDS + lhalf * 16);
      decode16(p3 + k0 / 2 + lhalf * 8, c3[k0 / 32], B3s + lrow * LDS + lhalf * 16);
    } else {
      zero16(B1s + lrow * LDS + lhalf * 16);
      zero16(B3s + lrow * LDS + lhalf * 16);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < TK; kk += 16) {
      frag_a fa[2];
      frag_b f1[2], f3[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], As + (wm * 32 + i * 16) * LDS + kk, LDS);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        wmma::load_matrix_sync(f1[j], B1s + (wn * 32 + j * 16) * LDS + kk, LDS);
        wmma::load_matrix_sync(f3[j], B3s + (wn * 32 + j * 16) * LDS + kk, LDS);
      }
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          wmma::mma_sync(g[i][j], fa[i], f1[j], g[i][j]);
          wmma::mma_sync(u[i][j], fa[i], f3[j], u[i][j]);
        }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      for (int e = 0; e < g[i][j].num_elements; ++e) g[i][j].x[e] = moe_glu(act, g[i][j].x[e], u[i][j].x[e]);
      wmma::store_matrix_sync(Cs + (wm * 32 + i * 16) * LDC + wn * 32 + j * 16, g[i][j], LDC, wmma::mem_row_major);
    }
  __syncthreads();
  for (int idx = tid; idx < TM * TN; idx += kThreads) {
    const int rr = idx / TN, cc = idx % TN, p = s_pair[rr], o = n0 + cc;
    if (p >= 0 && o < w.inter) h[static_cast<long long>(p) * w.inter + o] = __float2bfloat16(Cs[rr * LDC + cc]);
  }
}

__global__ void __launch_bounds__(kThreads) down_mma_kernel(const __nv_bfloat16* __restrict__ h,
                                                           const float* __restrict__ weights, moe_routing r,
                                                           moe_weights w, bool round_out,
                                                           const std::int32_t* __restrict__ tiles,
                                                           float* __restrict__ out) {
  __shared__ __align__(32) __nv_bfloat16 As[TM * LDS], Bs[TN * LDS];
  __shared__ __align__(32) float Cs[TM * LDC];
  __shared__ int s_pair[TM];
  const int tid = threadIdx.x, n0 = blockIdx.y * TN, K = w.inter;
  tile_info t;
  if (!load_tile(r, tiles, w.experts, s_pair, t)) return;
  const int warp = tid / 32, wm = warp / 2, wn = warp % 2;
  frag_c acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);
  const int lrow = tid / 2, lhalf = tid % 2;
  const int pair = s_pair[lrow];
  const __nv_bfloat16* hrow = pair >= 0 ? h + static_cast<long long>(pair) * K : nullptr;
  const int ocol = n0 + lrow;
  const bool ovalid = ocol < w.width;
  const std::uint8_t* p2 = ovalid ? w.w2_packed[t.expert] + static_cast<long long>(ocol) * (K / 2) : nullptr;
  const std::uint8_t* c2 = ovalid ? w.w2_scales[t.expert] + static_cast<long long>(ocol) * (K / 32) : nullptr;
  for (int k0 = 0; k0 < K; k0 += TK) {
    __nv_bfloat16* a = As + lrow * LDS + lhalf * 16;
    if (hrow) {
      const uint4* src = reinterpret_cast<const uint4*>(hrow + k0 + lhalf * 16);
      uint4* dst = reinterpret_cast<uint4*>(a); // 16-byte aligned: LDS·2 = 80 and 16·2 = 32
      dst[0] = src[0];
      dst[1] = src[1];
    } else {
      zero16(a);
    }
    if (ovalid) decode16(p2 + k0 / 2 + lhalf * 8, c2[k0 / 32], Bs + lrow * LDS + lhalf * 16);
    else zero16(Bs + lrow * LDS + lhalf * 16);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < TK; kk += 16) {
      frag_a fa[2];
      frag_b fb[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], As + (wm * 32 + i * 16) * LDS + kk, LDS);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], Bs + (wn * 32 + j * 16) * LDS + kk, LDS);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(Cs + (wm * 32 + i * 16) * LDC + wn * 32 + j * 16, acc[i][j], LDC, wmma::mem_row_major);
  __syncthreads();
  for (int idx = tid; idx < TM * TN; idx += kThreads) {
    const int rr = idx / TN, cc = idx % TN, p = s_pair[rr], o = n0 + cc;
    if (p < 0 || o >= w.width) continue;
    float v = Cs[rr * LDC + cc];
    if (round_out) v = round_bf16(v);
    out[static_cast<long long>(p) * w.width + o] = weights[p] * v;
  }
}

} // namespace

status moe_mma_gate_up(const float* x, int width, const moe_routing& r, const moe_weights& w, const moe_activation& act,
                       std::int32_t* tiles, __nv_bfloat16* h, cudaStream_t stream) {
  if (r.n == 0) return {};
  tile_map_kernel<<<1, kScanThreads, 0, stream>>>(r.starts, r.nseg, r.n, w.experts, tiles);
  K3_CUDA_TRY(cudaGetLastError());
  const dim3 grid(static_cast<unsigned>(moe_max_tiles(r.n, w.experts)), static_cast<unsigned>((w.inter + TN - 1) / TN));
  gate_up_mma_kernel<<<grid, kThreads, 0, stream>>>(x, width, r, w, act, tiles, h);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

status moe_mma_down(const __nv_bfloat16* h, const float* weights, const moe_routing& r, const moe_weights& w,
                    bool round_bf16_out, const std::int32_t* tiles, float* out, cudaStream_t stream) {
  if (r.n == 0) return {};
  const dim3 grid(static_cast<unsigned>(moe_max_tiles(r.n, w.experts)), static_cast<unsigned>((w.width + TN - 1) / TN));
  down_mma_kernel<<<grid, kThreads, 0, stream>>>(h, weights, r, w, round_bf16_out, tiles, out);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

} // namespace k3::cuda::detail
