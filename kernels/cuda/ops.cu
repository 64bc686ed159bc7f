#include "kernels/cuda/ops.cuh"

#include <cfloat>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/mxfp4_device.cuh"

namespace k3::cuda {
namespace {

constexpr int kThreads = 256;

using detail::block_sum;

// mode 0: rms, 1: rms gated, 2: l2
__global__ void norm_kernel(const float* __restrict__ x, long long ldx, const float* __restrict__ gate, const float* __restrict__ w,
                            float eps, int n, int mode, float* y, long long ldy) {
  __shared__ float scratch[32];
  const long long bx = static_cast<long long>(blockIdx.x) * ldx, by = static_cast<long long>(blockIdx.x) * ldy;
  const long long bg = static_cast<long long>(blockIdx.x) * n;
  float ss = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += x[bx + i] * x[bx + i];
  ss = block_sum(ss, scratch);
  const float inv = mode == 2 ? rsqrtf(ss + eps) : rsqrtf(ss / n + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float v = x[bx + i] * inv;
    if (mode != 2) v *= w[i];
    if (mode == 1) v *= 1.f / (1.f + expf(-gate[bg + i]));
    y[by + i] = v;
  }
}

// One block per token: choice scores in shared memory, k rounds of block arg-max.
__global__ void route_kernel(const float* __restrict__ logits, const float* __restrict__ bias, route_params p,
                             std::int32_t* __restrict__ ids, float* __restrict__ weights) {
  extern __shared__ float sh[]; // choice[E] | score[E]
  float* choice = sh;
  float* score = sh + p.num_experts;
  __shared__ float best_v[kThreads / 32];
  __shared__ int best_i[kThreads / 32];
  __shared__ int picked[64];
  const long long t = blockIdx.x;
  for (int e = threadIdx.x; e < p.num_experts; e += blockDim.x) {
    const float s = 1.f / (1.f + expf(-logits[t * p.num_experts + e]));
    score[e] = s;
    choice[e] = s + (bias ? bias[e] : 0.f);
  }
  __syncthreads();
  for (int j = 0; j < p.top_k; ++j) {
    float bv = -FLT_MAX;
    int bi = INT_MAX;
    for (int e = threadIdx.x; e < p.num_experts; e += blockDim.x)
      if (choice[e] > bv || (choice[e] == bv && e < bi)) bv = choice[e], bi = e;
    detail::block_argmax(bv, bi, best_v, best_i);
    if (threadIdx.x == 0) {
      picked[j] = bi;
      choice[bi] = -FLT_MAX; // taken
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    float sum = 0.f;
    for (int j = 0; j < p.top_k; ++j) sum += score[picked[j]];
    const float norm = p.renormalize ? 1.f / (sum + 1e-20f) : 1.f;
    for (int j = 0; j < p.top_k; ++j) {
      ids[t * p.top_k + j] = picked[j];
      weights[t * p.top_k + j] = score[picked[j]] * norm * p.scaling;
    }
  }
}

status norm_launch(const float* x, long long ldx, const float* gate, const float* w, float eps, int rows, int n, int mode, float* y,
                   long long ldy, cudaStream_t s) {
  if (rows < 0 || n < 1 || ldx < n || ldy < n) return {false, "norm: need rows >= 0, n >= 1 and row strides >= n"};
  if (rows == 0) return {};
  norm_kernel<<<rows, kThreads, 0, s>>>(x, ldx, gate, w, eps, n, mode, y, ldy);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

} // namespace

status rms_norm(const float* x, const float* w, float eps, int rows, int n, float* y, cudaStream_t s) {
  return norm_launch(x, n, nullptr, w, eps, rows, n, 0, y, n, s);
}
status rms_norm_strided(const float* x, long long ldx, const float* w, float eps, int rows, int n, float* y, long long ldy,
                        cudaStream_t s) {
  return norm_launch(x, ldx, nullptr, w, eps, rows, n, 0, y, ldy, s);
}
status rms_norm_gated(const float* x, const float* gate, const float* w, float eps, int rows, int n, float* y, cudaStream_t s) {
  return norm_launch(x, n, gate, w, eps, rows, n, 1, y, n, s);
}
status l2_norm(const float* x, float eps, int rows, int n, float* y, cudaStream_t s) {
  return norm_launch(x, n, nullptr, nullptr, eps, rows, n, 2, y, n, s);
}

status route(const float* logits, int tokens, const float* bias, const route_params& p, std::int32_t* ids, float* weights, cudaStream_t s) {
  if (p.num_experts < 1 || p.top_k < 1 || p.top_k > 64 || p.top_k > p.num_experts || tokens < 0)
    return {false, "route: need 1 <= top_k <= min(64, num_experts)"};
  if (tokens == 0) return {};
  const std::size_t smem = 2 * sizeof(float) * static_cast<std::size_t>(p.num_experts);
  if (smem > 48 * 1024) return {false, "route: more than 6144 experts"};
  route_kernel<<<tokens, kThreads, smem, s>>>(logits, bias, p, ids, weights);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

} // namespace k3::cuda
