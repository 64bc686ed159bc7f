#include "kernels/cuda/kda_prefill.cuh"

#include <cuda_bf16.h>

#include "kernels/cuda/check.cuh"

namespace k3::cuda {
namespace {

constexpr int C = kda_prefill_chunk; // tokens per chunk
constexpr int TV = 32;               // state columns per block
constexpr int kThreads = 256;        // = C·(C+1)/2 + C·(C−1)/2 score pairs, one each
static_assert(C * (C + 1) / 2 + C * (C - 1) / 2 == kThreads, "one thread per score pair");
static_assert(2 * C * TV == 4 * kThreads && C * TV == 2 * kThreads, "product tiles cover the block");

__device__ __forceinline__ float load_state(const float* p) { return *p; }
__device__ __forceinline__ float load_state(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store_state(float* p, float x) { *p = x; }
__device__ __forceinline__ void store_state(__nv_bfloat16* p, float x) { *p = __float2bfloat16(x); }

// Shared-memory plan of the chunked kernel, in floats. Rows of dk get one pad float (LD) so
// the score threads, which read 16 different rows at the same channel, hit distinct banks.
struct chunk_smem {
  int LD;
  int q, k, G, KQ, S, V, P, Vn, A, Aqk, T, decay, beta, total;
  __host__ __device__ explicit chunk_smem(int dk) : LD(dk + 1) {
    int at = 0;
    auto take = [&at](int n) { const int p = at; at += n; return p; };
    q = take(C * LD);
    k = take(C * LD);
    G = take(C * LD);
    KQ = take(2 * C * LD); // rows 0..C−1 hold e^(G_last − G)⊙K once P is formed (Kend)
    S = take(dk * TV);
    V = take(C * TV);
    P = take(2 * C * TV);
    Vn = take(C * TV);
    A = take(C * (C + 1));
    Aqk = take(C * (C + 1));
    T = take(C * (C + 1));
    decay = take(dk);
    beta = take(C);
    total = at;
  }
};

// Three blocks per SM (≤ 80 registers, ~70 KB of shared memory at dk = 128): K3's 96 heads ×
// 4 value tiles = 384 blocks then run in one wave on an H200's 132 SMs instead of two.
template <class St>
__global__ void __launch_bounds__(kThreads, 3) kda_chunk_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                                            const float* __restrict__ v, const float* __restrict__ g,
                                                            const float* __restrict__ beta,
                                                            const long long* __restrict__ cu, void* const* states,
                                                            float* __restrict__ o, int H, int dk, int dv) {
  extern __shared__ float sh[];
  const chunk_smem L(dk);
  const int LD = L.LD;
  float *sq = sh + L.q, *sk = sh + L.k, *sG = sh + L.G, *sKQ = sh + L.KQ, *sKend = sh + L.KQ, *sS = sh + L.S,
        *sV = sh + L.V, *sP = sh + L.P, *sVn = sh + L.Vn, *sA = sh + L.A, *sAqk = sh + L.Aqk, *sT = sh + L.T,
        *sdecay = sh + L.decay, *sbeta = sh + L.beta;
  const int tid = threadIdx.x;
  const int j0 = blockIdx.x * TV, h = blockIdx.y, n = blockIdx.z;
  const int tv = min(TV, dv - j0); // valid columns of this tile
  const long long t_begin = cu[n], t_end = cu[n + 1];
  St* state = static_cast<St*>(states[n]) + static_cast<long long>(h) * dk * dv;

  // The state tile lives in shared memory for the whole sequence (padding columns stay 0).
  for (int e = tid; e < dk * TV; e += kThreads) {
    const int d = e / TV, c = e % TV;
    sS[e] = c < tv ? load_state(state + static_cast<long long>(d) * dv + j0 + c) : 0.f;
  }
  // Score pair of this thread: Aqk (i ≥ j) for the first 136, A (i > j) for the other 120.
  int pi, pj;
  bool is_qk;
  {
    int t = tid;
    is_qk = t < C * (C + 1) / 2;
    if (!is_qk) t -= C * (C + 1) / 2;
    int i = is_qk ? 0 : 1;
    while (t >= (is_qk ? i + 1 : i)) t -= is_qk ? i + 1 : i, ++i;
    pi = i;
    pj = t;
  }
  const long long ldk = static_cast<long long>(H) * dk, ldv = static_cast<long long>(H) * dv;

  for (long long t0 = t_begin; t0 < t_end; t0 += C) {
    const int c = static_cast<int>(min(static_cast<long long>(C), t_end - t0));
    // 1. This chunk's rows (zero beyond c), the value tile and β.
    for (int e = tid; e < C * dk; e += kThreads) {
      const int i = e / dk, d = e % dk;
      const bool in = i < c;
      const long long r = (t0 + i) * ldk + static_cast<long long>(h) * dk + d;
      sq[i * LD + d] = in ? q[r] : 0.f;
      sk[i * LD + d] = in ? k[r] : 0.f;
      sG[i * LD + d] = in ? g[r] : 0.f;
    }
    for (int e = tid; e < C * TV; e += kThreads) {
      const int i = e / TV, cc = e % TV;
      sV[e] = i < c && cc < tv ? v[(t0 + i) * ldv + static_cast<long long>(h) * dv + j0 + cc] : 0.f;
    }
    if (tid < C) sbeta[tid] = tid < c ? beta[(t0 + tid) * H + h] : 0.f;
    __syncthreads();
    // 2. Inclusive cumulative log-decay per channel; the chunk's state decay e^G_last.
    for (int d = tid; d < dk; d += kThreads) {
      float acc = 0.f;
      for (int i = 0; i < c; ++i) {
        acc += sG[i * LD + d];
        sG[i * LD + d] = acc;
      }
      sdecay[d] = expf(acc);
    }
    __syncthreads();
    // 3. Decayed operands (argument ≤ 0) and the score pairs (pairwise decay, argument ≤ 0).
    for (int e = tid; e < C * dk; e += kThreads) {
      const int i = e / dk, d = e % dk;
      const float eg = i < c ? expf(sG[i * LD + d]) : 0.f;
      sKQ[i * LD + d] = sk[i * LD + d] * eg;
      sKQ[(C + i) * LD + d] = sq[i * LD + d] * eg;
    }
    {
      float s = 0.f;
      if (pi < c) {
        const float* a = (is_qk ? sq : sk) + pi * LD;
        const float* b = sk + pj * LD;
        const float* gi = sG + pi * LD;
        const float* gj = sG + pj * LD;
        for (int d = 0; d < dk; ++d) s += a[d] * b[d] * expf(gi[d] - gj[d]);
      }
      if (is_qk)
        sAqk[pi * (C + 1) + pj] = s;
      else
        sA[pi * (C + 1) + pj] = s * sbeta[pi];
    }
    __syncthreads();
    // 4. P = [e^G⊙K; e^G⊙Q]·S (every thread: 4 outputs of the 32×32 tile), and on warp 0 the
    //    forward substitution X = (I + A)⁻¹, one column per lane; T = X·diag(β).
    {
      const int r = tid / (TV / 4), c0 = (tid % (TV / 4)) * 4;
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      const float* kq = sKQ + r * LD;
      for (int d = 0; d < dk; ++d) {
        const float a = kq[d];
        const float4 s4 = *reinterpret_cast<const float4*>(sS + d * TV + c0);
        acc[0] += a * s4.x;
        acc[1] += a * s4.y;
        acc[2] += a * s4.z;
        acc[3] += a * s4.w;
      }
      for (int x = 0; x < 4; ++x) sP[r * TV + c0 + x] = acc[x];
    }
    if (tid < C) {
      const int j = tid;
      float col[C];
#pragma unroll
      for (int i = 0; i < C; ++i) {
        float x = i == j ? 1.f : 0.f;
        // From l = 0, not j: col[l] = 0 for l < j, so the extra terms subtract exact zeros, and
        // with static indices the column stays in registers (from j it went to local memory).
#pragma unroll
        for (int l = 0; l < i; ++l) x -= sA[i * (C + 1) + l] * col[l];
        col[i] = i < j ? 0.f : x;
      }
      const float bj = sbeta[j];
#pragma unroll
      for (int i = 0; i < C; ++i) sT[i * (C + 1) + j] = col[i] * bj;
    }
    __syncthreads();
    // 5. Vn = T (V − P_top): 2 outputs per thread; and Kend = e^(G_last − G)⊙K (argument ≤ 0)
    //    into the K half of KQ, dead now that P is formed.
    for (int e = tid; e < C * dk; e += kThreads) {
      const int i = e / dk, d = e % dk;
      sKend[i * LD + d] = i < c ? sk[i * LD + d] * expf(sG[(c - 1) * LD + d] - sG[i * LD + d]) : 0.f;
    }
    {
      const int i = tid / (TV / 2), c0 = (tid % (TV / 2)) * 2;
      float a0 = 0.f, a1 = 0.f;
      for (int j = 0; j <= i; ++j) {
        const float t = sT[i * (C + 1) + j];
        a0 += t * (sV[j * TV + c0] - sP[j * TV + c0]);
        a1 += t * (sV[j * TV + c0 + 1] - sP[j * TV + c0 + 1]);
      }
      sVn[i * TV + c0] = a0;
      sVn[i * TV + c0 + 1] = a1;
    }
    __syncthreads();
    // 6. O = P_bot + Aqk Vn (written out), and the state update S ← diag(e^G_last) S + Kendᵀ Vn.
    {
      const int i = tid / (TV / 2), c0 = (tid % (TV / 2)) * 2;
      float a0 = sP[(C + i) * TV + c0], a1 = sP[(C + i) * TV + c0 + 1];
      for (int j = 0; j <= i; ++j) {
        const float w = sAqk[i * (C + 1) + j];
        a0 += w * sVn[j * TV + c0];
        a1 += w * sVn[j * TV + c0 + 1];
      }
      if (i < c) {
        float* orow = o + (t0 + i) * ldv + static_cast<long long>(h) * dv + j0;
        if (c0 < tv) orow[c0] = a0;
        if (c0 + 1 < tv) orow[c0 + 1] = a1;
      }
    }
    for (int e = tid; e < dk * TV; e += kThreads) {
      const int d = e / TV, cc = e % TV;
      float s = sdecay[d] * sS[e];
      for (int i = 0; i < c; ++i) s += sKend[i * LD + d] * sVn[i * TV + cc];
      sS[e] = s;
    }
    // No barrier needed here: the next chunk's step 1 writes only q/k/G/V/β, which step 6
    // does not read, and step 2 starts after a barrier.
  }
  __syncthreads();
  for (int e = tid; e < dk * TV; e += kThreads) {
    const int d = e / TV, cc = e % TV;
    if (cc < tv) store_state(state + static_cast<long long>(d) * dv + j0 + cc, sS[e]);
  }
}

// Recurrent form: one block per (head, sequence); thread (part p, column j) owns rows
// p, p + P, p + 2P, … of column j of the state (in shared memory). Three barriers per token.
constexpr int kParts = 4;

template <class St>
__global__ void kda_recurrent_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                     const float* __restrict__ v, const float* __restrict__ g,
                                     const float* __restrict__ beta, const long long* __restrict__ cu,
                                     void* const* states, float* __restrict__ o, int H, int dk, int dv, int dvp) {
  extern __shared__ float sh[]; // S[dk·dv] | q[dk] | k[dk] | alpha[dk] | red[P·dvp] | red2[P·dvp]
  float* sS = sh;
  float* sq = sS + dk * dv;
  float* sk = sq + dk;
  float* sa = sk + dk;
  float* red = sa + dk;
  float* red2 = red + kParts * dvp;
  const int tid = threadIdx.x, j = tid % dvp, p = tid / dvp;
  const int h = blockIdx.x, n = blockIdx.y;
  const long long t_begin = cu[n], t_end = cu[n + 1];
  St* state = static_cast<St*>(states[n]) + static_cast<long long>(h) * dk * dv;
  for (int e = tid; e < dk * dv; e += blockDim.x) sS[e] = load_state(state + e);
  const long long ldk = static_cast<long long>(H) * dk, ldv = static_cast<long long>(H) * dv;
  for (long long t = t_begin; t < t_end; ++t) {
    const long long r = t * ldk + static_cast<long long>(h) * dk;
    for (int d = tid; d < dk; d += blockDim.x) {
      sq[d] = q[r + d];
      sk[d] = k[r + d];
      sa[d] = expf(g[r + d]);
    }
    __syncthreads();
    float part = 0.f;
    if (j < dv)
      for (int i = p; i < dk; i += kParts) part += sk[i] * sa[i] * sS[i * dv + j];
    red[p * dvp + j] = part;
    __syncthreads();
    float po = 0.f;
    if (j < dv) {
      float ks = 0.f;
      for (int x = 0; x < kParts; ++x) ks += red[x * dvp + j];
      const float u = beta[t * H + h] * (v[t * ldv + static_cast<long long>(h) * dv + j] - ks);
      for (int i = p; i < dk; i += kParts) {
        const float s = sa[i] * sS[i * dv + j] + sk[i] * u;
        sS[i * dv + j] = s;
        po += sq[i] * s;
      }
    }
    red2[p * dvp + j] = po;
    __syncthreads();
    if (p == 0 && j < dv) {
      float acc = 0.f;
      for (int x = 0; x < kParts; ++x) acc += red2[x * dvp + j];
      o[t * ldv + static_cast<long long>(h) * dv + j] = acc;
    }
  }
  __syncthreads();
  for (int e = tid; e < dk * dv; e += blockDim.x) store_state(state + e, sS[e]);
}

status check_args(const kda_prefill_args& a, const char* who) {
  const std::string w(who);
  if (a.sequences < 0 || a.heads < 1) return {false, w + ": need sequences >= 0 and heads >= 1"};
  if (a.dk < 1 || a.dk > 256 || a.dv < 1 || a.dv > 256) return {false, w + ": need 1 <= dk, dv <= 256"};
  if (a.sequences > 65535) return {false, w + ": at most 65535 sequences per call"};
  if (a.sequences > 0 && (!a.q || !a.k || !a.v || !a.g || !a.beta || !a.cu_seqlens || !a.states || !a.o))
    return {false, w + ": null buffer"};
  return {};
}

template <class St>
status launch_chunked(const kda_prefill_args& a, cudaStream_t s) {
  const int bytes = chunk_smem(a.dk).total * static_cast<int>(sizeof(float));
  K3_CUDA_TRY(cudaFuncSetAttribute(kda_chunk_kernel<St>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  const dim3 grid((a.dv + TV - 1) / TV, a.heads, a.sequences);
  kda_chunk_kernel<St><<<grid, kThreads, bytes, s>>>(a.q, a.k, a.v, a.g, a.beta, a.cu_seqlens, a.states, a.o, a.heads,
                                                     a.dk, a.dv);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

template <class St>
status launch_recurrent(const kda_prefill_args& a, cudaStream_t s) {
  const int dvp = (a.dv + 31) / 32 * 32;
  const long long bytes = (static_cast<long long>(a.dk) * a.dv + 3LL * a.dk + 2LL * kParts * dvp) * sizeof(float);
  if (bytes > 200 * 1024) return {false, "kda_recurrent_prefill: dk·dv too large for one block's shared memory"};
  K3_CUDA_TRY(cudaFuncSetAttribute(kda_recurrent_kernel<St>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(bytes)));
  const dim3 grid(a.heads, a.sequences);
  kda_recurrent_kernel<St><<<grid, kParts * dvp, static_cast<size_t>(bytes), s>>>(
      a.q, a.k, a.v, a.g, a.beta, a.cu_seqlens, a.states, a.o, a.heads, a.dk, a.dv, dvp);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

} // namespace

status kda_chunked_prefill(const kda_prefill_args& a, cudaStream_t s) {
  if (auto st = check_args(a, "kda_chunked_prefill"); !st) return st;
  if (a.sequences == 0) return {};
  return a.state == state_dtype::fp32 ? launch_chunked<float>(a, s) : launch_chunked<__nv_bfloat16>(a, s);
}

status kda_recurrent_prefill(const kda_prefill_args& a, cudaStream_t s) {
  if (auto st = check_args(a, "kda_recurrent_prefill"); !st) return st;
  if (a.sequences == 0) return {};
  return a.state == state_dtype::fp32 ? launch_recurrent<float>(a, s) : launch_recurrent<__nv_bfloat16>(a, s);
}

double kda_chunked_flops(long long tokens, int heads, int dk, int dv) {
  // Per token and head: P (2 rows × dk × dv), state update (dk × dv), both ×2 flops per FMA;
  // scores 2 × C/2 × dk; T·Y and Aqk·Vn ~C × dv each. The state products dominate.
  const double per = 2.0 * (3.0 * dk * dv + C * dk + C * dv);
  return per * static_cast<double>(tokens) * heads;
}

} // namespace k3::cuda
