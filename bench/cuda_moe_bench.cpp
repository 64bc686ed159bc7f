#include "bench/cuda_moe_bench.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>
#include <vector>

#include "bench/cuda_bench_util.hpp"
#include "kernels/cuda/device.cuh"
#include "kernels/cuda/fill.cuh"
#include "kernels/cuda/kda_decode.cuh"
#include "kernels/cuda/moe.cuh"

namespace k3::bench {

int run_cuda_moe_benchmark(bool quick, const std::string& model_dir) {
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "k3 bench cuda: no CUDA device visible\n");
    return 2;
  }
  std::printf("k3 bench cuda: %s\n", cuda::device_name(0).c_str());
  const int E = quick ? 128 : 896, K = 16, inter = 3072, width = 3584;
  const std::size_t packed = std::size_t(inter) * width / 2, scales = std::size_t(inter) * width / 32;
  const double expert_bytes = 3.0 * double(packed + scales);
  cuda_ceilings ceil;
  if (const int rc = measure_cuda_ceilings(ceil); rc != 0) return rc;
  const double ceiling = ceil.copy_bytes_per_s;
  cudaEvent_t a, b;
  K3_BENCH_CUDA_TRY(cudaEventCreate(&a));
  K3_BENCH_CUDA_TRY(cudaEventCreate(&b));
  float ms = 0;
  std::printf("  measured: copy bandwidth (read + write) %.2f TB/s, fp32 FMA %.1f TFLOP/s\n", ceiling / 1e12,
              ceil.fp32_flops / 1e12);

  // Weights: one allocation per matrix kind, filled on the device.
  std::uint8_t *wp = nullptr, *ws_ = nullptr;
  K3_BENCH_CUDA_TRY(cudaMalloc(&wp, std::size_t(E) * 3 * packed));
  K3_BENCH_CUDA_TRY(cudaMalloc(&ws_, std::size_t(E) * 3 * scales));
  K3_BENCH_STATUS(cuda::fill_random_bytes(wp, std::size_t(E) * 3 * packed, 7, nullptr));
  K3_BENCH_STATUS(cuda::fill_bytes_in_range(ws_, std::size_t(E) * 3 * scales, 118, 8, 11, nullptr));
  std::vector<const std::uint8_t*> ptr[6];
  for (int e = 0; e < E; ++e)
    for (int m = 0; m < 3; ++m) {
      ptr[2 * m].push_back(wp + (std::size_t(e) * 3 + m) * packed);
      ptr[2 * m + 1].push_back(ws_ + (std::size_t(e) * 3 + m) * scales);
    }
  const std::uint8_t** dptr[6];
  for (int i = 0; i < 6; ++i) {
    K3_BENCH_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&dptr[i]), E * sizeof(void*)));
    K3_BENCH_CUDA_TRY(cudaMemcpy(dptr[i], ptr[i].data(), E * sizeof(void*), cudaMemcpyHostToDevice));
  }
  cuda::moe_weights w;
  w.w1_packed = dptr[0], w.w1_scales = dptr[1], w.w3_packed = dptr[2], w.w3_scales = dptr[3], w.w2_packed = dptr[4], w.w2_scales = dptr[5];
  w.experts = E, w.inter = inter, w.width = width;
  const int max_t = quick ? 512 : 2048; // decode batches 1…64, prefill chunks up to max_t
  cuda::moe_workspace work(max_t, K, E, inter, width);
  void* scratch = nullptr;
  K3_BENCH_CUDA_TRY(cudaMalloc(&scratch, work.bytes()));
  work.bind(scratch);
  float *x = nullptr, *y = nullptr, *wt = nullptr;
  std::int32_t* ids = nullptr;
  K3_BENCH_CUDA_TRY(cudaMalloc(&x, std::size_t(max_t) * width * 4));
  K3_BENCH_CUDA_TRY(cudaMalloc(&y, std::size_t(max_t) * width * 4));
  K3_BENCH_CUDA_TRY(cudaMalloc(&wt, std::size_t(max_t) * K * 4));
  K3_BENCH_CUDA_TRY(cudaMalloc(&ids, std::size_t(max_t) * K * 4));
  K3_BENCH_CUDA_TRY(cudaMemset(x, 0, std::size_t(max_t) * width * 4));
  std::mt19937_64 rng(5);
  std::printf("  %-6s %-5s %8s %12s %10s %10s %12s %9s\n", "batch", "path", "experts", "time us", "GB/s", "of floor",
              "of measured", "TFLOP/s");
  struct point {
    int tokens;
    cuda::moe_path path;
  };
  const std::vector<point> points = {{1, cuda::moe_path::gemv},     {4, cuda::moe_path::gemv},
                                     {16, cuda::moe_path::gemv},    {64, cuda::moe_path::gemv},
                                     {64, cuda::moe_path::mma},     {512, cuda::moe_path::gemv},
                                     {512, cuda::moe_path::mma},    {max_t, cuda::moe_path::mma}};
  for (const auto& [T, path] : points) {
    std::vector<std::int32_t> h_ids(std::size_t(T) * K);
    std::set<int> unique;
    for (int t = 0; t < T; ++t) {
      std::vector<int> pool(E);
      for (int e = 0; e < E; ++e) pool[e] = e;
      for (int j = 0; j < K; ++j) {
        std::swap(pool[j], pool[j + static_cast<int>(rng() % static_cast<unsigned>(E - j))]);
        h_ids[std::size_t(t) * K + j] = pool[j];
        unique.insert(pool[j]);
      }
    }
    std::vector<float> h_w(h_ids.size(), 1.0f / K);
    K3_BENCH_CUDA_TRY(cudaMemcpy(ids, h_ids.data(), h_ids.size() * 4, cudaMemcpyHostToDevice));
    K3_BENCH_CUDA_TRY(cudaMemcpy(wt, h_w.data(), h_w.size() * 4, cudaMemcpyHostToDevice));
    cuda::moe_activation act;
    K3_BENCH_STATUS(cuda::moe_routed_experts(x, ids, wt, T, w, act, work, y, nullptr, path)); // warm-up
    const int iters = quick ? 5 : (T > 64 ? 5 : 20);
    K3_BENCH_CUDA_TRY(cudaEventRecord(a));
    for (int i = 0; i < iters; ++i)
      K3_BENCH_STATUS(cuda::moe_routed_experts(x, ids, wt, T, w, act, work, y, nullptr, path));
    K3_BENCH_CUDA_TRY(cudaEventRecord(b));
    K3_BENCH_CUDA_TRY(cudaEventSynchronize(b));
    K3_BENCH_CUDA_TRY(cudaEventElapsedTime(&ms, a, b));
    const double t = ms * 1e-3 / iters, bytes = double(unique.size()) * expert_bytes;
    const double flops = 2.0 * 3.0 * inter * double(width) * T * K;
    std::printf("  %-6d %-5s %8zu %12.1f %10.0f %10.3f %12.3f %9.1f\n", T, path == cuda::moe_path::mma ? "mma" : "gemv",
                unique.size(), t * 1e6, bytes / t / 1e9, bytes / 4.8e12 / t, bytes / (ceiling / 2) / t, flops / t / 1e12);
  }
  std::printf("  (floor = bytes of the selected experts / 4.8 TB/s; measured = / half the copy bandwidth, i.e. read rate;\n"
              "   goal: batch 1-64 decode at >= 0.70 of the floor; TFLOP/s counts 2*3*inter*width per routed row)\n");

  // KDA recurrent decode, one K3 layer at TP1 (H = 96, dk = dv = 128): the state is read and
  // written once per token per sequence at least (2 × 6 MiB).
  std::printf("  KDA decode, one layer, H=96 dk=dv=128:\n  %-6s %12s %10s %12s\n", "seqs", "time us", "GB/s", "of measured");
  const int H = 96, D = 128;
  const std::size_t st_bytes = std::size_t(H) * D * D * 4;
  for (int N : {1, 16, 64}) {
    float* states = nullptr;
    K3_BENCH_CUDA_TRY(cudaMalloc(&states, st_bytes * N));
    K3_BENCH_CUDA_TRY(cudaMemset(states, 0, st_bytes * N));
    std::vector<float*> hp;
    for (int i = 0; i < N; ++i) hp.push_back(states + std::size_t(i) * H * D * D);
    float** dp = nullptr;
    float *q = nullptr, *kk = nullptr, *v = nullptr, *g = nullptr, *be = nullptr, *o = nullptr;
    K3_BENCH_CUDA_TRY(cudaMalloc(&dp, N * sizeof(float*)));
    K3_BENCH_CUDA_TRY(cudaMemcpy(dp, hp.data(), N * sizeof(float*), cudaMemcpyHostToDevice));
    for (float** p : {&q, &kk, &v, &g, &o}) {
      K3_BENCH_CUDA_TRY(cudaMalloc(p, std::size_t(N) * H * D * 4));
      K3_BENCH_CUDA_TRY(cudaMemset(*p, 0, std::size_t(N) * H * D * 4));
    }
    K3_BENCH_CUDA_TRY(cudaMalloc(&be, std::size_t(N) * H * 4));
    K3_BENCH_CUDA_TRY(cudaMemset(be, 0, std::size_t(N) * H * 4));
    K3_BENCH_STATUS(cuda::kda_recurrent_decode(q, kk, v, g, be, N, H, D, D, dp, o, nullptr));
    const int iters = quick ? 5 : 20;
    K3_BENCH_CUDA_TRY(cudaEventRecord(a));
    for (int i = 0; i < iters; ++i) K3_BENCH_STATUS(cuda::kda_recurrent_decode(q, kk, v, g, be, N, H, D, D, dp, o, nullptr));
    K3_BENCH_CUDA_TRY(cudaEventRecord(b));
    K3_BENCH_CUDA_TRY(cudaEventSynchronize(b));
    K3_BENCH_CUDA_TRY(cudaEventElapsedTime(&ms, a, b));
    const double t = ms * 1e-3 / iters, bytes = 2.0 * double(st_bytes) * N;
    std::printf("  %-6d %12.1f %10.0f %12.3f\n", N, t * 1e6, bytes / t / 1e9, bytes / ceiling / t);
    for (void* p : {static_cast<void*>(states), static_cast<void*>(dp), static_cast<void*>(q), static_cast<void*>(kk), static_cast<void*>(v),
                    static_cast<void*>(g), static_cast<void*>(be), static_cast<void*>(o)})
      cudaFree(p);
  }
  if (const int rc = run_cuda_kda_prefill_table(quick, ceil); rc != 0) return rc;
  return model_dir.empty() ? 0 : run_cuda_model_table(model_dir, quick, ceil);
}

} // namespace k3::bench
