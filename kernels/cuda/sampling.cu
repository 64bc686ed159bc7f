#include "kernels/cuda/sampling.cuh"

#include <cub/block/block_scan.cuh>
#include <cub/cub.cuh>

#include <cfloat>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/scratch_layout.cuh"

namespace k3::cuda {
namespace {

constexpr int kThreads = 1024;
using block_scan = cub::BlockScan<double, kThreads>;

__global__ void init_kernel(std::int32_t* ids, long long n, int vocab, int* offsets, int rows) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) ids[i] = static_cast<std::int32_t>(i % vocab);
  if (i <= rows) offsets[i] = static_cast<int>(i * vocab);
}

// Block-wide: the first index i in [0, n) whose inclusive prefix sum of w(i) exceeds x
// (ge: reaches x, i.e. ≥), or −1 when none does. Each thread owns a contiguous run of indices,
// so the order of the sum is the index order (as the CPU's loop). All threads get the result.
template <class W>
__device__ int first_crossing(int n, double x, bool ge, W w, typename block_scan::TempStorage& tmp, int* s_hit, double* s_cum) {
  const int per = (n + kThreads - 1) / kThreads, b = threadIdx.x * per, e = min(n, b + per);
  double local = 0;
  for (int i = b; i < e; ++i) local += w(i);
  double before = 0;
  block_scan(tmp).ExclusiveSum(local, before);
  if (threadIdx.x == 0) *s_hit = -1;
  __syncthreads();
  const bool mine = ge ? (before + local >= x && (b == 0 || before < x)) : (before + local > x && before <= x);
  if (mine && b < e) {
    double cum = before;
    for (int i = b; i < e; ++i) {
      cum += w(i);
      if (ge ? cum >= x : cum > x) {
        *s_hit = i;
        *s_cum = cum;
        break;
      }
    }
  }
  __syncthreads();
  const int hit = *s_hit;
  __syncthreads();
  return hit;
}

__device__ double block_sum_d(double v, typename block_scan::TempStorage& tmp, double* s) {
  double excl = 0, total = 0;
  block_scan(tmp).ExclusiveSum(v, excl, total);
  if (threadIdx.x == 0) *s = total;
  __syncthreads();
  const double t = *s;
  __syncthreads();
  return t;
}

__global__ void __launch_bounds__(kThreads) select_kernel(const float* __restrict__ logits, const float* __restrict__ sorted,
                                                         const std::int32_t* __restrict__ sorted_ids, int vocab,
                                                         const sample_params* __restrict__ params, std::int32_t* __restrict__ out_ids,
                                                         float* __restrict__ out_lp) {
  __shared__ typename block_scan::TempStorage tmp;
  __shared__ int s_hit, s_n;
  __shared__ double s_cum, s_sum;
  const long long r = blockIdx.x;
  const float* raw = logits + r * vocab;
  const float* z = sorted + r * vocab;
  const std::int32_t* zid = sorted_ids + r * vocab;
  const sample_params p = params[r];
  const float inv_t = 1.0f / p.temperature, z0 = z[0];
  auto prob = [&](int i) { return expf((z[i] - z0) * inv_t); };
  int n = p.top_k > 0 && p.top_k < vocab ? p.top_k : vocab;
  if (p.min_p > 0.0f) { // probabilities fall along the sorted order: the kept set is a prefix
    if (threadIdx.x == 0) {
      int lo = 1, hi = n; // prob(0) = 1 ≥ min_p always
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (prob(mid) >= p.min_p) lo = mid + 1;
        else hi = mid;
      }
      s_n = lo;
    }
    __syncthreads();
    n = s_n;
  }
  double part = 0;
  const int per = (n + kThreads - 1) / kThreads, b = threadIdx.x * per, e = min(n, b + per);
  for (int i = b; i < e; ++i) part += prob(i);
  const double total = block_sum_d(part, tmp, &s_sum);
  int tok;
  if (p.top_p < 1.0f) {
    // Smallest prefix reaching top_p × total, then the draw over it in the same order.
    const int last = first_crossing(n, static_cast<double>(p.top_p) * total, true, [&](int i) { return static_cast<double>(prob(i)); },
                                    tmp, &s_hit, &s_cum);
    const int keep = last < 0 ? n : last + 1;
    double kept = total;
    if (last >= 0) kept = s_cum;
    __syncthreads();
    const int hit = first_crossing(keep, p.u * kept, false, [&](int i) { return static_cast<double>(prob(i)); }, tmp, &s_hit, &s_cum);
    tok = zid[hit < 0 ? keep - 1 : hit];
  } else {
    // Ascending-id draw over the candidate set {t : (l_t, t) ≥ (l_thr, id_thr) in sort order}.
    const float thr = z[n - 1];
    const std::int32_t thr_id = zid[n - 1];
    auto w = [&](int t) {
      const float l = raw[t];
      const bool in = n == vocab || l > thr || (l == thr && t <= thr_id);
      return in ? static_cast<double>(expf((l - z0) * inv_t)) : 0.0;
    };
    const int hit = first_crossing(vocab, p.u * total, false, w, tmp, &s_hit, &s_cum);
    if (hit >= 0) {
      tok = hit;
    } else { // u rounded up to the total: the CPU takes the last candidate (largest id)
      __shared__ int s_last;
      if (threadIdx.x == 0) s_last = 0;
      __syncthreads();
      for (int t = threadIdx.x; t < vocab; t += kThreads)
        if (w(t) > 0) atomicMax(&s_last, t);
      __syncthreads();
      tok = s_last;
    }
  }
  // Raw log-probability of the token (before temperature), fp64 sum as the CPU's.
  double s = 0;
  for (int t = threadIdx.x; t < vocab; t += kThreads) s += exp(static_cast<double>(raw[t] - z0));
  const double lse = log(block_sum_d(s, tmp, &s_sum));
  if (threadIdx.x == 0) {
    out_ids[r] = tok;
    out_lp[r] = static_cast<float>(static_cast<double>(raw[tok] - z0) - lse);
  }
}

} // namespace

sample_workspace::sample_workspace(int rows, int v) : max_rows(rows), vocab(v) {
  const std::size_t n = static_cast<std::size_t>(rows) * v;
  cub::DeviceSegmentedRadixSort::SortPairsDescending(nullptr, cub_bytes, static_cast<const float*>(nullptr), static_cast<float*>(nullptr),
                                                     static_cast<const std::int32_t*>(nullptr), static_cast<std::int32_t*>(nullptr),
                                                     static_cast<int>(n), rows, static_cast<const int*>(nullptr),
                                                     static_cast<const int*>(nullptr));
  detail::scratch_layout lay;
  auto take = [&lay](std::size_t bytes) { return lay.take(bytes); };
  off_keys = take(n * 4);
  off_ids_in = take(n * 4);
  off_ids = take(n * 4);
  off_offsets = take((static_cast<std::size_t>(rows) + 1) * 4);
  off_cub = take(cub_bytes);
  total_ = lay.total;
}

status sample_rows(const float* logits, int rows, const sample_params* params, sample_workspace& ws, std::int32_t* ids, float* logprobs,
                   cudaStream_t stream) {
  if (rows < 0 || rows > ws.max_rows) return {false, "sample_rows: rows outside [0, workspace max_rows]"};
  if (!ws.base_) return {false, "sample_rows: workspace not bound to device memory"};
  if (rows == 0) return {};
  const long long n = static_cast<long long>(rows) * ws.vocab;
  auto* keys = reinterpret_cast<float*>(ws.base_ + ws.off_keys);
  auto* ids_in = reinterpret_cast<std::int32_t*>(ws.base_ + ws.off_ids_in);
  auto* ids_out = reinterpret_cast<std::int32_t*>(ws.base_ + ws.off_ids);
  auto* offsets = reinterpret_cast<int*>(ws.base_ + ws.off_offsets);
  const long long init_n = std::max<long long>(n, rows + 1);
  init_kernel<<<static_cast<unsigned>((init_n + 255) / 256), 256, 0, stream>>>(ids_in, n, ws.vocab, offsets, rows);
  K3_CUDA_TRY(cudaGetLastError());
  std::size_t tmp = ws.cub_bytes;
  K3_CUDA_TRY(cub::DeviceSegmentedRadixSort::SortPairsDescending(ws.base_ + ws.off_cub, tmp, logits, keys, ids_in, ids_out,
                                                                 static_cast<int>(n), rows, offsets, offsets + 1, 0, 32, stream));
  select_kernel<<<rows, kThreads, 0, stream>>>(logits, keys, ids_out, ws.vocab, params, ids, logprobs);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

} // namespace k3::cuda
