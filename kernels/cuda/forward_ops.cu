#include "kernels/cuda/forward_ops.cuh"

#include <cfloat>
#include <climits>

#include <math_constants.h>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/mxfp4_device.cuh"

namespace k3::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks(long long n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

__device__ __forceinline__ float widen(std::uint16_t b) { return __uint_as_float(static_cast<unsigned>(b) << 16); }
__device__ __forceinline__ std::uint16_t narrow(float v) {
  unsigned u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u); // NaN stays quiet NaN
  if ((u & 0x7fffffffu) == 0x7f800000u) return static_cast<std::uint16_t>(u >> 16);          // ±inf
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

__global__ void embed_kernel(const std::uint16_t* __restrict__ table, int cols, const std::int32_t* __restrict__ ids, long long n,
                             float* __restrict__ out) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const long long r = i / cols, c = i % cols;
  out[i] = widen(table[static_cast<long long>(ids[r]) * cols + c]);
}

__global__ void to_bf16_kernel(const float* __restrict__ x, long long n, std::uint16_t* __restrict__ y) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = narrow(x[i]);
}

__global__ void add_kernel(float* __restrict__ x, const float* __restrict__ y, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}

__global__ void glu_kernel(const float* __restrict__ g, const float* __restrict__ u, long long n, glu_params p, float* out) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float a = g[i], b = u[i];
  if (p.situ) {
    const float gate = p.beta * tanhf(a / p.beta) * (1.f / (1.f + expf(-a)));
    const float up = p.linear_beta > 0.f ? p.linear_beta * tanhf(b / p.linear_beta) : b;
    out[i] = gate * up;
  } else {
    out[i] = a / (1.f + expf(-a)) * b;
  }
}

__global__ void split_kernel(const float* __restrict__ q, long long rows, int nope, int rope, float* __restrict__ qn,
                             float* __restrict__ qr) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int w = nope + rope;
  if (i >= rows * w) return;
  const long long r = i / w;
  const int c = static_cast<int>(i % w);
  if (c < nope) qn[r * nope + c] = q[i];
  else qr[r * rope + (c - nope)] = q[i];
}

__global__ void cache_write_kernel(const float* __restrict__ x, long long ld, int width,
                                   const std::uint16_t* const* const* __restrict__ tables, const std::int64_t* __restrict__ pos,
                                   int block_size, long long layer_offset, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const long long t = i / width;
  const int c = static_cast<int>(i % width);
  const std::int64_t p = pos[t];
  std::uint16_t* row = const_cast<std::uint16_t*>(tables[t][p / block_size]) + layer_offset + (p % block_size) * width;
  row[c] = narrow(x[t * ld + c]);
}

// One block per output row; sources: bank rows then the current sum. S ≤ 256.
__global__ void attnres_kernel(const float* __restrict__ bank, long long stride, int nb, const float* __restrict__ cur,
                               const float* __restrict__ w, float eps, const std::int32_t* __restrict__ rows, int n,
                               float* __restrict__ out) {
  __shared__ float scratch[32];
  __shared__ float p[257];
  const long long r = rows ? rows[blockIdx.x] : blockIdx.x;
  const int S = nb + 1;
  for (int s = 0; s < S; ++s) {
    const float* v = (s < nb ? bank + s * stride : cur) + r * n;
    float ss = 0.f, dot = 0.f;
    for (int d = threadIdx.x; d < n; d += blockDim.x) ss += v[d] * v[d], dot += v[d] * w[d];
    ss = detail::block_sum(ss, scratch);
    dot = detail::block_sum(dot, scratch);
    if (threadIdx.x == 0) p[s] = dot * rsqrtf(ss / n + eps);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = -FLT_MAX;
    for (int s = 0; s < S; ++s) m = fmaxf(m, p[s]);
    float sum = 0.f;
    for (int s = 0; s < S; ++s) sum += (p[s] = expf(p[s] - m));
    for (int s = 0; s < S; ++s) p[s] /= sum;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < n; d += blockDim.x) {
    float acc = 0.f;
    for (int s = 0; s < S; ++s) acc += p[s] * (s < nb ? bank + s * stride : cur)[r * n + d];
    out[static_cast<long long>(blockIdx.x) * n + d] = acc;
  }
}

__global__ void argmax_kernel(const float* __restrict__ logits, int vocab, std::int32_t* __restrict__ ids,
                              float* __restrict__ logprob) {
  __shared__ float bv[kThreads / 32];
  __shared__ int bi[kThreads / 32];
  __shared__ float scratch[32];
  const float* row = logits + static_cast<long long>(blockIdx.x) * vocab;
  float v = -FLT_MAX;
  int idx = INT_MAX;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x)
    if (row[i] > v) v = row[i], idx = i; // strided ascending: first max per thread
  detail::block_argmax(v, idx, bv, bi);
  if (threadIdx.x == 0) ids[blockIdx.x] = idx == INT_MAX ? 0 : idx;
  if (!logprob) return;
  // Raw log-probability of the arg-max: −log Σ exp(x − max) (fp32, as the CPU sampler's).
  const float m = v;
  float sum = 0.f;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) sum += expf(row[i] - m);
  sum = detail::block_sum(sum, scratch);
  if (threadIdx.x == 0) logprob[blockIdx.x] = -logf(sum);
}

__global__ void gather_kernel(const float* __restrict__ x, int n, const std::int32_t* __restrict__ rows, long long total,
                              float* __restrict__ out) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const long long r = i / n, c = i % n;
  out[i] = x[static_cast<long long>(rows[r]) * n + c];
}

__global__ void bitmask_kernel(float* __restrict__ logits, int vocab, const std::uint64_t* __restrict__ masks, int words,
                               const std::int32_t* __restrict__ rows, long long total) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const long long r = i / vocab;
  const int v = static_cast<int>(i % vocab);
  const int w = v >> 6;
  const bool allowed = w < words && ((masks[r * words + w] >> (v & 63)) & 1);
  if (!allowed) logits[static_cast<long long>(rows[r]) * vocab + v] = -CUDART_INF_F;
}

__global__ void local_ids_kernel(std::int32_t* ids, long long n, int first, int last) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int e = ids[i];
  ids[i] = e >= first && e < last ? e - first : last - first;
}

} // namespace

status apply_token_bitmask(float* logits, int vocab, const std::uint64_t* masks, int words, const std::int32_t* rows, int out_rows,
                           cudaStream_t s) {
  const long long total = static_cast<long long>(out_rows) * vocab;
  if (total <= 0) return {};
  bitmask_kernel<<<blocks(total), kThreads, 0, s>>>(logits, vocab, masks, words, rows, total);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

status local_expert_ids(std::int32_t* ids, long long n, int first, int last, cudaStream_t s) {
  if (first < 0 || last < first) return {false, "local_expert_ids: need 0 <= first <= last"};
  if (n <= 0) return {};
  local_ids_kernel<<<blocks(n), kThreads, 0, s>>>(ids, n, first, last);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

status embed_rows(const std::uint16_t* table, int cols, const std::int32_t* ids, int rows, float* out, cudaStream_t s) {
  if (rows < 0 || cols < 1) return {false, "embed_rows: need rows >= 0 and cols >= 1"};
  const long long n = static_cast<long long>(rows) * cols;
  if (n == 0) return {};
  embed_kernel<<<blocks(n), kThreads, 0, s>>>(table, cols, ids, n, out);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

status to_bf16(const float* x, long long n, std::uint16_t* y, cudaStream_t s) {
  if (n <= 0) return {};
  to_bf16_kernel<<<blocks(n), kThreads, 0, s>>>(x, n, y);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

status add_into(float* x, const float* y, long long n, cudaStream_t s) {
  if (n <= 0) return {};
  add_kernel<<<blocks(n), kThreads, 0, s>>>(x, y, n);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

status glu(const float* gate, const float* up, long long n, const glu_params& p, float* out, cudaStream_t s) {
  if (n <= 0) return {};
  glu_kernel<<<blocks(n), kThreads, 0, s>>>(gate, up, n, p, out);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

status split_heads(const float* q, long long rows, int nope, int rope, float* q_nope, float* q_rot, cudaStream_t s) {
  if (nope < 0 || rope < 0 || nope + rope == 0) return {false, "split_heads: empty head"};
  const long long n = rows * (nope + rope);
  if (n <= 0) return {};
  split_kernel<<<blocks(n), kThreads, 0, s>>>(q, rows, nope, rope, q_nope, q_rot);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

status mla_cache_write(const float* x, long long ld, int width, const std::uint16_t* const* const* tables, const std::int64_t* pos,
                       int block_size, std::int64_t layer_offset, int tokens, cudaStream_t s) {
  if (width < 1 || ld < width || block_size < 1 || tokens < 0)
    return {false, "mla_cache_write: need width >= 1, ld >= width, block_size >= 1"};
  const long long n = static_cast<long long>(tokens) * width;
  if (n == 0) return {};
  cache_write_kernel<<<blocks(n), kThreads, 0, s>>>(x, ld, width, tables, pos, block_size, layer_offset, n);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

status attnres_mix(const float* bank, long long stride, int nb, const float* current, const float* w, float eps,
                   const std::int32_t* rows, int out_rows, int n, float* out, cudaStream_t s) {
  if (nb < 0 || nb > 256 || n < 1 || out_rows < 0) return {false, "attnres_mix: need 0 <= banked blocks <= 256, n >= 1"};
  if (out_rows == 0) return {};
  attnres_kernel<<<out_rows, kThreads, 0, s>>>(bank, stride, nb, current, w, eps, rows, n, out);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

status argmax_rows(const float* logits, int rows, int vocab, std::int32_t* ids, float* logprob, cudaStream_t s) {
  if (rows < 0 || vocab < 1) return {false, "argmax_rows: need rows >= 0, vocab >= 1"};
  if (rows == 0) return {};
  argmax_kernel<<<rows, kThreads, 0, s>>>(logits, vocab, ids, logprob);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

status gather_rows(const float* x, int n, const std::int32_t* rows, int out_rows, float* out, cudaStream_t s) {
  const long long total = static_cast<long long>(out_rows) * n;
  if (total <= 0) return {};
  gather_kernel<<<blocks(total), kThreads, 0, s>>>(x, n, rows, total, out);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

} // namespace k3::cuda
