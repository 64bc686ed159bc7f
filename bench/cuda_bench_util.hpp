#pragma once
// Plumbing shared by the `k3 bench cuda` tables: error macros that print and return 2, an
// event timer, and the card's measured ceilings the tables compare against.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#define K3_BENCH_CUDA_TRY(expr)                                                        \
  do {                                                                                 \
    const cudaError_t e_ = (expr);                                                     \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "k3 bench cuda: %s: %s\n", #expr, cudaGetErrorString(e_));  \
      return 2;                                                                        \
    }                                                                                  \
  } while (0)

#define K3_BENCH_STATUS(expr)                                                          \
  do {                                                                                 \
    const auto s_ = (expr);                                                            \
    if (!s_.ok) {                                                                      \
      std::fprintf(stderr, "k3 bench cuda: %s\n", s_.message.c_str());                 \
      return 2;                                                                        \
    }                                                                                  \
  } while (0)

namespace k3::bench {

/// What this card was measured to do, by the bench itself (not the datasheet).
struct cuda_ceilings {
  double copy_bytes_per_s = 0; ///< device-to-device copy, read + write bytes per second
  double fp32_flops = 0;       ///< FMA throughput of a register-only kernel (SIMT fp32)
};

/// Measures both ceilings (≈ 0.1 s). Returns 0, or 2 with a message on stderr.
int measure_cuda_ceilings(cuda_ceilings& out);

/// The KDA prefill table: H = 96, dk = dv = 128, T = 8192 (T = 1024 with `quick`), chunked vs
/// recurrent, time, TFLOP/s and GB/s against `c`, and the FlashKDA reference point.
int run_cuda_kda_prefill_table(bool quick, const cuda_ceilings& c);

/// Whole-model steps on the GPU (cuda_model_bench.cpp): prefill of 512 tokens and decode at
/// batch 1 / 8 / 32 of the checkpoint in `dir`, against the decode floor.
int run_cuda_model_table(const std::string& dir, bool quick, const cuda_ceilings& c);

} // namespace k3::bench
