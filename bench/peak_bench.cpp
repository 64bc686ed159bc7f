// The machine's arithmetic peaks, measured: independent register-only FMA chains per thread on
// every kernel thread (fp32 vfmadd231ps on 512-bit or 256-bit vectors; bf16 vdpbf16ps where the
// CPU has AVX512-BF16; AMX TDPBF16PS tile products where the CPU has AMX). The denominators for
// "GEMM at X% of peak".
#include "bench/peak_bench.hpp"

#include <immintrin.h>

#include <atomic>
#include <chrono>
#include <vector>

#include "kernels/common/amx_tiles.hpp"
#include "kernels/common/cpu_features.hpp"
#include "kernels/common/parallel.hpp"

namespace k3::bench {
namespace {

constexpr long iters = 1 << 22;

__attribute__((target("avx512f"))) double fma512(long n) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(1.0f + 1e-7f * static_cast<float>(i));
  const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (long k = 0; k < n; ++k)
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], b, c);
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  return static_cast<double>(_mm512_reduce_add_ps(s));
}

__attribute__((target("avx2,fma"))) double fma256(long n) {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(1.0f + 1e-7f * static_cast<float>(i));
  const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (long k = 0; k < n; ++k)
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], b, c);
  float out[8];
  __m256 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, a[i]);
  _mm256_storeu_ps(out, s);
  return out[0];
}

__attribute__((target("avx512f,avx512bf16"))) double dot_bf16(long n) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_setzero_ps();
  const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f));
  const __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(3e-3f), _mm512_set1_ps(1e-3f));
  for (long k = 0; k < n; ++k)
    for (int i = 0; i < 12; ++i) a[i] = _mm512_dpbf16_ps(a[i], x, y);
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  return static_cast<double>(_mm512_reduce_add_ps(s));
}

// AMX: four independent 16 × 16 fp32 accumulator tiles, each += 16 × 32 · 32 × 16 bf16 per
// TDPBF16PS (16 384 flops). The tile state is configured and released inside the call.
__attribute__((target("avx512f,amx-tile,amx-bf16"))) double tdp_bf16(long n) {
  alignas(64) static const unsigned short operand[16 * 32] = {}; // values do not change the rate
  amx::configure_16x64();
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (long k = 0; k < n / 4; ++k) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float out[256];
  _tile_stored(0, out, 64);
  _tile_release();
  return static_cast<double>(out[0]);
}

// GFLOP/s of fn(iters) on every kernel thread at once; flops_per_iter over all 12 chains.
template <class Fn>
double on_all_threads(Fn fn, double flops_per_iter) {
  std::atomic<int> threads{1};
  std::vector<double> sink(1024);
  (void)fn(iters / 16); // warm up (clocks)
  const auto t0 = std::chrono::steady_clock::now();
  parallel_threads([&](int t, int n) {
    sink[static_cast<std::size_t>(t) % sink.size()] = fn(iters); // results kept: the chains are not dead code
    threads = n;
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  volatile double keep = sink[0];
  (void)keep;
  return flops_per_iter * static_cast<double>(iters) * threads.load() / s / 1e9;
}

} // namespace

peaks measure_peaks() {
  peaks p;
  if (detected_isa() >= isa::avx512) p.fp32 = on_all_threads(fma512, 12.0 * 32);
  else if (detected_isa() >= isa::avx2) p.fp32 = on_all_threads(fma256, 12.0 * 16);
  if (bf16_dot_available()) p.bf16 = on_all_threads(dot_bf16, 12.0 * 64);
  if (amx_bf16_available()) p.amx_bf16 = on_all_threads(tdp_bf16, 16384.0); // one TDPBF16PS per iteration
  return p;
}

} // namespace k3::bench
