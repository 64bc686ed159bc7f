#include "kernels/cuda/kda_decode.cuh"

#include "kernels/cuda/check.cuh"

namespace k3::cuda {
namespace {

__global__ void kda_decode_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                                  const float* __restrict__ g, const float* __restrict__ beta, int heads, int dk, int dv,
                                  float* const* __restrict__ states, float* __restrict__ o) {
  extern __shared__ float sh[]; // q[dk] | k[dk] | alpha[dk]
  float* sq = sh;
  float* sk = sh + dk;
  float* sa = sh + 2 * dk;
  const int n = blockIdx.x / heads, h = blockIdx.x % heads;
  const long long qk = (static_cast<long long>(n) * heads + h) * dk;
  for (int i = threadIdx.x; i < dk; i += blockDim.x) {
    sq[i] = q[qk + i];
    sk[i] = k[qk + i];
    sa[i] = expf(g[qk + i]);
  }
  __syncthreads();
  const int j = threadIdx.x;
  if (j >= dv) return;
  float* S = states[n] + static_cast<long long>(h) * dk * dv;
  // Pass 1: (Sᵀ k)_j over the decayed state.
  float ks = 0.f;
  for (int i = 0; i < dk; ++i) ks += sk[i] * sa[i] * S[static_cast<long long>(i) * dv + j];
  const long long vo = (static_cast<long long>(n) * heads + h) * dv;
  const float u = beta[static_cast<long long>(n) * heads + h] * (v[vo + j] - ks);
  // Pass 2: decay + rank-1 update in place, output dot with q.
  float acc = 0.f;
  for (int i = 0; i < dk; ++i) {
    float* s = S + static_cast<long long>(i) * dv + j;
    const float nv = sa[i] * *s + sk[i] * u;
    *s = nv;
    acc += sq[i] * nv;
  }
  o[vo + j] = acc;
}

} // namespace

status kda_recurrent_decode(const float* q, const float* k, const float* v, const float* g, const float* beta, int sequences,
                            int heads, int dk, int dv, float* const* states, float* o, cudaStream_t stream) {
  if (sequences < 0 || heads < 1 || dk < 1 || dv < 1 || dk > 1024 || dv > 1024)
    return {false, "kda_recurrent_decode: need sequences >= 0, heads >= 1, 1 <= dk, dv <= 1024"};
  if (sequences == 0) return {};
  const int threads = (dv + 31) / 32 * 32;
  kda_decode_kernel<<<sequences * heads, threads, 3 * dk * sizeof(float), stream>>>(q, k, v, g, beta, heads, dk, dv, states, o);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

} // namespace k3::cuda
