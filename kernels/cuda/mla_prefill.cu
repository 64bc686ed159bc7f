#include "kernels/cuda/mla_prefill.cuh"

#include <cmath>

#include "kernels/cuda/check.cuh"

namespace k3::cuda {
namespace {

constexpr int QT = 16;       // query tokens per block
constexpr int PT = 32;       // cache rows per tile
constexpr int kThreads = 256; // = QT · 16: 16 threads per query row
constexpr int kMaxAcc = 1024 / 16;

__device__ __forceinline__ float bf16(std::uint16_t b) { return __uint_as_float(static_cast<unsigned>(b) << 16); }

struct prefill_smem {
  int qt, qr, rows, S, m, l, corr, total; // offsets in floats (rows: bf16 pairs counted as floats)
  int RW;                                  // bf16 row stride of a staged cache row (odd word count)
  __host__ __device__ explicit prefill_smem(const mla_dims& d) {
    const int W = d.latent + d.rope;
    RW = W % 2 == 0 ? W + 2 : W + 1; // (RW / 2) words per row, odd, so rows fall in distinct banks
    if ((RW / 2) % 2 == 0) RW += 2;
    int at = 0;
    qt = at, at += QT * d.latent;
    qr = at, at += QT * d.rope;
    rows = at, at += (PT * RW + 1) / 2;
    S = at, at += QT * (PT + 1);
    m = at, at += QT;
    l = at, at += QT;
    corr = at, at += QT;
    total = at;
  }
};

template <int kPer> // latent / 16 when known at compile time (accumulators in registers), else 0
__global__ void __launch_bounds__(kThreads) mla_prefill_kernel(const float* __restrict__ q_nope, const float* __restrict__ q_rot,
                                                              const float* __restrict__ kv_b,
                                                              const std::uint16_t* const* __restrict__ table, int block_size,
                                                              long long layer_offset,
                                                              std::int64_t pos0, int T, mla_dims d, const float* __restrict__ gate,
                                                              float* __restrict__ out) {
  extern __shared__ float sh[];
  const prefill_smem L(d);
  float* qt = sh + L.qt;
  float* qr = sh + L.qr;
  auto* rows = reinterpret_cast<std::uint16_t*>(sh + L.rows);
  float* S = sh + L.S;
  float* sm = sh + L.m;
  float* sl = sh + L.l;
  float* scorr = sh + L.corr;
  const int tid = threadIdx.x, t0 = blockIdx.x * QT, h = blockIdx.y;
  const int nq = min(QT, T - t0), W = d.latent + d.rope, RW = L.RW;
  const long long krow = static_cast<long long>(h) * (d.nope + d.v);
  // q̃ rows of the tile (zero for rows past the chunk) and q_rot.
  for (int e = tid; e < QT * d.latent; e += kThreads) {
    const int i = e / d.latent, c = e % d.latent;
    float s = 0.f;
    if (i < nq) {
      const float* qn = q_nope + (static_cast<long long>(t0 + i) * d.heads + h) * d.nope;
      for (int k = 0; k < d.nope; ++k) s += qn[k] * kv_b[(krow + k) * d.latent + c];
    }
    qt[e] = s;
  }
  for (int e = tid; e < QT * d.rope; e += kThreads) {
    const int i = e / d.rope, r = e % d.rope;
    qr[e] = i < nq ? q_rot[(static_cast<long long>(t0 + i) * d.heads + h) * d.rope + r] : 0.f;
  }
  if (tid < QT) sm[tid] = -INFINITY, sl[tid] = 0.f;
  const float scale = rsqrtf(static_cast<float>(d.nope + d.rope));
  // Thread roles: query row qi = tid / 16; for scores two cache rows, for o_lat the latent
  // columns lane16 + 16·j.
  const int qi = tid / 16, lane16 = tid % 16, per = kPer > 0 ? kPer : d.latent / 16;
  // Rows past the chunk see the same limit as row 0 (finite math, results discarded).
  const std::int64_t limit = pos0 + t0 + (qi < nq ? qi : 0); // last visible position of query qi
  const std::int64_t p_end = pos0 + t0 + nq;                 // rows any query of the tile sees
  float acc[kMaxAcc];
  for (int j = 0; j < per; ++j) acc[j] = 0.f;
  __syncthreads();
  for (std::int64_t p0 = 0; p0 < p_end; p0 += PT) {
    const int np = static_cast<int>(min(static_cast<std::int64_t>(PT), p_end - p0));
    for (int e = tid; e < PT * W; e += kThreads) {
      const int j = e / W, c = e % W;
      std::uint16_t v = 0;
      if (j < np) {
        const std::int64_t p = p0 + j;
        v = table[p / block_size][layer_offset + (p % block_size) * W + c];
      }
      rows[j * RW + c] = v;
    }
    __syncthreads();
    // Scores: query qi against rows 2·lane16 and 2·lane16 + 1.
    for (int jj = 0; jj < 2; ++jj) {
      const int j = 2 * lane16 + jj;
      const std::uint16_t* row = rows + j * RW;
      float s = 0.f;
      for (int c = 0; c < d.latent; ++c) s += qt[qi * d.latent + c] * bf16(row[c]);
      for (int r = 0; r < d.rope; ++r) s += qr[qi * d.rope + r] * bf16(row[d.latent + r]);
      const bool visible = j < np && p0 + j <= limit;
      S[qi * (PT + 1) + j] = visible ? s * scale : -INFINITY;
    }
    __syncthreads();
    // Online softmax bookkeeping: 16 threads of a query row reduce its 32 scores.
    {
      float mx = fmaxf(S[qi * (PT + 1) + lane16], S[qi * (PT + 1) + lane16 + 16]);
#pragma unroll
      for (int off = 8; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off, 16));
      const float m_old = sm[qi], m_new = fmaxf(m_old, mx); // finite: position 0 is visible to all
      const float e0 = expf(S[qi * (PT + 1) + lane16] - m_new), e1 = expf(S[qi * (PT + 1) + lane16 + 16] - m_new);
      float sum = e0 + e1;
#pragma unroll
      for (int off = 8; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off, 16);
      __syncwarp();
      S[qi * (PT + 1) + lane16] = e0;
      S[qi * (PT + 1) + lane16 + 16] = e1;
      if (lane16 == 0) {
        const float c = expf(m_old - m_new);
        scorr[qi] = c;
        sl[qi] = sl[qi] * c + sum;
        sm[qi] = m_new;
      }
    }
    __syncthreads();
    {
      const float c = scorr[qi];
      for (int j = 0; j < per; ++j) acc[j] *= c;
      for (int j = 0; j < np; ++j) {
        const float pj = S[qi * (PT + 1) + j];
        const std::uint16_t* row = rows + j * RW;
        for (int k = 0; k < per; ++k) acc[k] += pj * bf16(row[lane16 + 16 * k]);
      }
    }
    __syncthreads(); // the next tile overwrites rows and S
  }
  // o_lat → shared (over q̃), then o_h = W_UV,h o_lat and the gate.
  {
    const float inv = 1.f / sl[qi];
    __syncthreads();
    for (int k = 0; k < per; ++k) qt[qi * d.latent + lane16 + 16 * k] = acc[k] * inv;
  }
  __syncthreads();
  for (int e = tid; e < nq * d.v; e += kThreads) {
    const int i = e / d.v, j = e % d.v;
    const float* wrow = kv_b + (krow + d.nope + j) * d.latent;
    float s = 0.f;
    for (int c = 0; c < d.latent; ++c) s += wrow[c] * qt[i * d.latent + c];
    const long long oi = static_cast<long long>(t0 + i) * d.heads * d.v + static_cast<long long>(h) * d.v + j;
    if (gate) s *= 1.f / (1.f + expf(-gate[oi]));
    out[oi] = s;
  }
}

} // namespace

status mla_prefill(const float* q_nope, const float* q_rot, const float* kv_b, const std::uint16_t* const* table, int block_size,
                   std::int64_t layer_offset, std::int64_t pos0, int tokens, const mla_dims& d, const float* gate, float* out, cudaStream_t stream) {
  if (d.heads < 1 || d.latent <= 0 || d.latent % 16 != 0 || d.latent > 1024 || d.rope < 0 || d.rope > 128 || d.nope < 1 ||
      d.v < 1 || block_size < 1 || tokens < 0 || pos0 < 0)
    return {false, "mla_prefill: need heads >= 1, latent a multiple of 16 up to 1024, rope <= 128, nope/v >= 1, "
                   "block_size >= 1, tokens and pos0 >= 0"};
  if (tokens == 0) return {};
  const std::size_t smem = sizeof(float) * static_cast<std::size_t>(prefill_smem(d).total);
  if (smem > 200 * 1024) return {false, "mla_prefill: shared-memory plan too large for these dims"};
  const auto kernel = d.latent == 512 ? mla_prefill_kernel<32> : mla_prefill_kernel<0>; // 512: both Kimi models
  K3_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((tokens + QT - 1) / QT), static_cast<unsigned>(d.heads));
  kernel<<<grid, kThreads, smem, stream>>>(q_nope, q_rot, kv_b, table, block_size, layer_offset, pos0, tokens, d, gate, out);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

} // namespace k3::cuda
