// `k3 bench cuda`: measured ceilings and the KDA prefill table (see cuda_bench_util.hpp).
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "bench/cuda_bench_util.hpp"
#include "kernels/cuda/kda_prefill.cuh"

namespace k3::bench {
namespace {

// Four independent FMA chains per thread, all in registers: the SIMT fp32 ceiling.
__global__ void fma_kernel(float* out, int iters) {
  float a = threadIdx.x * 1e-3f, b = a + 1.f, c = a + 2.f, d = a + 3.f;
  const float m = 0.9999f, s = 1e-4f;
  for (int i = 0; i < iters; ++i) {
    a = fmaf(a, m, s);
    b = fmaf(b, m, s);
    c = fmaf(c, m, s);
    d = fmaf(d, m, s);
  }
  if (a + b + c + d == 12345.f) out[0] = a; // keeps the chains live
}

} // namespace

int measure_cuda_ceilings(cuda_ceilings& out) {
  cudaEvent_t a, b;
  K3_BENCH_CUDA_TRY(cudaEventCreate(&a));
  K3_BENCH_CUDA_TRY(cudaEventCreate(&b));
  const std::size_t copy_bytes = std::size_t(2) << 30;
  void *src = nullptr, *dst = nullptr;
  K3_BENCH_CUDA_TRY(cudaMalloc(&src, copy_bytes));
  K3_BENCH_CUDA_TRY(cudaMalloc(&dst, copy_bytes));
  K3_BENCH_CUDA_TRY(cudaMemcpy(dst, src, copy_bytes, cudaMemcpyDeviceToDevice));
  K3_BENCH_CUDA_TRY(cudaEventRecord(a));
  for (int i = 0; i < 5; ++i) K3_BENCH_CUDA_TRY(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice));
  K3_BENCH_CUDA_TRY(cudaEventRecord(b));
  K3_BENCH_CUDA_TRY(cudaEventSynchronize(b));
  float ms = 0;
  K3_BENCH_CUDA_TRY(cudaEventElapsedTime(&ms, a, b));
  out.copy_bytes_per_s = 5.0 * 2.0 * double(copy_bytes) / (ms * 1e-3);
  cudaFree(src);
  cudaFree(dst);

  int sms = 0;
  K3_BENCH_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  float* sink = nullptr;
  K3_BENCH_CUDA_TRY(cudaMalloc(&sink, sizeof(float)));
  const int blocks = sms * 8, threads = 256, iters = 1 << 14;
  fma_kernel<<<blocks, threads>>>(sink, 16);
  K3_BENCH_CUDA_TRY(cudaGetLastError());
  K3_BENCH_CUDA_TRY(cudaEventRecord(a));
  fma_kernel<<<blocks, threads>>>(sink, iters);
  K3_BENCH_CUDA_TRY(cudaEventRecord(b));
  K3_BENCH_CUDA_TRY(cudaEventSynchronize(b));
  K3_BENCH_CUDA_TRY(cudaEventElapsedTime(&ms, a, b));
  out.fp32_flops = double(blocks) * threads * iters * 4 * 2 / (ms * 1e-3);
  cudaFree(sink);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return 0;
}

int run_cuda_kda_prefill_table(bool quick, const cuda_ceilings& c) {
  const int H = 96, D = 128;
  const long long T = quick ? 1024 : 8192;
  const std::size_t rows = std::size_t(T) * H * D;
  std::vector<void*> bufs;
  auto alloc = [&bufs](std::size_t bytes) -> float* {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) return nullptr;
    cudaMemset(p, 0, bytes); // values do not change the work (no data-dependent branches)
    bufs.push_back(p);
    return static_cast<float*>(p);
  };
  float *q = alloc(rows * 4), *k = alloc(rows * 4), *v = alloc(rows * 4), *g = alloc(rows * 4), *o = alloc(rows * 4),
        *beta = alloc(std::size_t(T) * H * 4), *state = alloc(std::size_t(H) * D * D * 4);
  long long* cu = reinterpret_cast<long long*>(alloc(2 * sizeof(long long)));
  void** states = reinterpret_cast<void**>(alloc(sizeof(void*)));
  if (!q || !k || !v || !g || !o || !beta || !state || !cu || !states) {
    std::fprintf(stderr, "k3 bench cuda: out of device memory for the KDA prefill table\n");
    for (void* p : bufs) cudaFree(p);
    return 2;
  }
  const long long hcu[2] = {0, T};
  K3_BENCH_CUDA_TRY(cudaMemcpy(cu, hcu, sizeof hcu, cudaMemcpyHostToDevice));
  void* hs = state;
  K3_BENCH_CUDA_TRY(cudaMemcpy(states, &hs, sizeof hs, cudaMemcpyHostToDevice));
  cuda::kda_prefill_args args;
  args.q = q, args.k = k, args.v = v, args.g = g, args.beta = beta, args.o = o;
  args.cu_seqlens = cu, args.states = states, args.sequences = 1, args.heads = H, args.dk = D, args.dv = D;

  cudaEvent_t a, b;
  K3_BENCH_CUDA_TRY(cudaEventCreate(&a));
  K3_BENCH_CUDA_TRY(cudaEventCreate(&b));
  const double flops = cuda::kda_chunked_flops(T, H, D, D);
  const double bytes = double(T) * H * (3.0 * D + 2.0 * D + 1.0) * 4; // q, k, g, v, β in; o out
  std::printf("  KDA prefill, one layer, H=%d dk=dv=%d T=%lld (fp32 in/out, fp32 state):\n", H, D, T);
  std::printf("  %-10s %10s %10s %10s %10s %12s\n", "form", "time ms", "TFLOP/s", "of fp32", "GB/s", "of measured");
  double chunked_ms = 0, recurrent_ms = 0;
  for (const bool chunked : {true, false}) {
    auto run = [&] { return chunked ? cuda::kda_chunked_prefill(args, nullptr) : cuda::kda_recurrent_prefill(args, nullptr); };
    K3_BENCH_STATUS(run()); // warm-up
    const int iters = chunked ? (quick ? 3 : 10) : (quick ? 1 : 3);
    K3_BENCH_CUDA_TRY(cudaEventRecord(a));
    for (int i = 0; i < iters; ++i) K3_BENCH_STATUS(run());
    K3_BENCH_CUDA_TRY(cudaEventRecord(b));
    K3_BENCH_CUDA_TRY(cudaEventSynchronize(b));
    float ms = 0;
    K3_BENCH_CUDA_TRY(cudaEventElapsedTime(&ms, a, b));
    const double t = ms * 1e-3 / iters;
    (chunked ? chunked_ms : recurrent_ms) = t * 1e3;
    std::printf("  %-10s %10.3f %10.2f %10.3f %10.0f %12.3f\n", chunked ? "chunked" : "recurrent", t * 1e3, flops / t / 1e12,
                flops / t / c.fp32_flops, bytes / t / 1e9, bytes / t / (c.copy_bytes_per_s / 2));
  }
  std::printf("  chunked / recurrent speed-up: %.1fx;  FlashKDA published 2.62 ms (H20, T=8192): %s\n",
              recurrent_ms / chunked_ms, quick ? "n/a (quick)" : (chunked_ms < 2.62 ? "faster" : "slower"));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  for (void* p : bufs) cudaFree(p);
  return 0;
}

} // namespace k3::bench
