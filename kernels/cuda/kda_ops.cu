#include "kernels/cuda/kda_ops.cuh"

#include "kernels/cuda/check.cuh"

namespace k3::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per (sequence, channel): the window over [state | x] stays in registers.
__global__ void short_conv_kernel(const float* x, int sequences, int tokens, int C, const float* __restrict__ w, int K,
                                  float* const* __restrict__ states, float* y) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(sequences) * C) return;
  const int n = static_cast<int>(i / C), c = static_cast<int>(i % C);
  float hist[16];
  float* st = states[n] + static_cast<long long>(c) * (K - 1);
  const float* wc = w + static_cast<long long>(c) * K;
  for (int j = 0; j < K - 1; ++j) hist[j] = st[j];
  const long long base = static_cast<long long>(n) * tokens * C;
  for (int t = 0; t < tokens; ++t) {
    hist[K - 1] = x[base + static_cast<long long>(t) * C + c];
    float s = 0.f;
    for (int j = 0; j < K; ++j) s += wc[j] * hist[j];
    for (int j = 0; j < K - 1; ++j) hist[j] = hist[j + 1];
    y[base + static_cast<long long>(t) * C + c] = s / (1.f + expf(-s));
  }
  for (int j = 0; j < K - 1; ++j) st[j] = hist[j];
}

__global__ void decay_gate_kernel(const float* __restrict__ graw, long long n, int heads, int dk, const float* __restrict__ A_log,
                                  const float* __restrict__ dt_bias, int softplus, float lb, float* __restrict__ g) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int hc = static_cast<int>(i % (static_cast<long long>(heads) * dk)), h = hc / dk;
  const float a = expf(A_log[h]), x = graw[i] + dt_bias[hc];
  g[i] = softplus ? -a * (fmaxf(x, 0.f) + log1pf(expf(-fabsf(x)))) : lb / (1.f + expf(-a * x));
}

__global__ void sigmoid_kernel(float* b, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) b[i] = 1.f / (1.f + expf(-b[i]));
}

// One warp per (token, head) row of dk: L2 norm of q and k, q scaled.
__global__ void prepare_qk_kernel(float* q, float* k, long long rows, int dk) {
  const long long row = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float* qr = q + row * dk;
  float* kr = k + row * dk;
  float sq = 0.f, sk = 0.f;
  for (int i = lane; i < dk; i += 32) sq += qr[i] * qr[i], sk += kr[i] * kr[i];
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    sq += __shfl_xor_sync(0xffffffffu, sq, off);
    sk += __shfl_xor_sync(0xffffffffu, sk, off);
  }
  const float iq = rsqrtf(sq + 1e-6f) * rsqrtf(static_cast<float>(dk)), ik = rsqrtf(sk + 1e-6f);
  for (int i = lane; i < dk; i += 32) qr[i] *= iq, kr[i] *= ik;
}

unsigned blocks(long long n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

} // namespace

status short_conv(const float* x, int sequences, int tokens, int channels, const float* w, int kernel, float* const* states, float* y,
                  cudaStream_t s) {
  if (kernel < 1 || kernel > 16) return {false, "short_conv: kernel size must be in [1, 16]"};
  if (sequences < 0 || tokens < 0 || channels < 1) return {false, "short_conv: need sequences, tokens >= 0 and channels >= 1"};
  const long long n = static_cast<long long>(sequences) * channels;
  if (n == 0 || tokens == 0) return {};
  short_conv_kernel<<<blocks(n), kThreads, 0, s>>>(x, sequences, tokens, channels, w, kernel, states, y);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

status decay_gate(const float* graw, int tokens, int heads, int dk, const float* A_log, const float* dt_bias, gate_kind kind,
                  float lower_bound, float* g, cudaStream_t s) {
  if (kind == gate_kind::lower_bound && !(lower_bound < 0)) return {false, "decay_gate: gate_lower_bound must be negative"};
  const long long n = static_cast<long long>(tokens) * heads * dk;
  if (n <= 0) return {};
  decay_gate_kernel<<<blocks(n), kThreads, 0, s>>>(graw, n, heads, dk, A_log, dt_bias, kind == gate_kind::softplus, lower_bound, g);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

status beta_sigmoid(float* b, long long n, cudaStream_t s) {
  if (n <= 0) return {};
  sigmoid_kernel<<<blocks(n), kThreads, 0, s>>>(b, n);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

status prepare_qk(float* q, float* k, int tokens, int heads, int dk, cudaStream_t s) {
  const long long rows = static_cast<long long>(tokens) * heads;
  if (rows <= 0 || dk <= 0) return {};
  prepare_qk_kernel<<<blocks(rows * 32), kThreads, 0, s>>>(q, k, rows, dk);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

} // namespace k3::cuda
