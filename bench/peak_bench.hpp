#pragma once
// Measured arithmetic peaks of this machine on the kernel threads (bench/peak_bench.cpp).
namespace k3::bench {
struct peaks {
  double fp32 = 0; ///< GFLOP/s of fp32 FMAs (AVX-512, else AVX2)
  double bf16 = 0; ///< GFLOP/s of bf16 dot products (vdpbf16ps), 0 without AVX512-BF16
  double amx_bf16 = 0; ///< GFLOP/s of AMX bf16 tile products (TDPBF16PS), 0 without AMX
};
[[nodiscard]] peaks measure_peaks();
} // namespace k3::bench
