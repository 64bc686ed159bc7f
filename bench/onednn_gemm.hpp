#pragma once
// oneDNN's bf16 matmul as a comparison point for the dense bench (Debian libdnnl-dev, built with
// OpenMP, dispatching AVX512-BF16 or AMX at run time). y[m, n] = bf16(x)[m, k] · W[n, k]ᵀ in fp32.
// The weights are reordered once into oneDNN's preferred blocked layout (as a loader would);
// each run() converts the activations to bf16 and executes the primitive, both timed.
// Only built when CMake finds oneDNN (K3_HAVE_ONEDNN); k3serve's kernels do not depend on it.

#include <cstdint>
#include <memory>

#include "kernels/common/bf16.hpp"

namespace k3::bench {

class onednn_gemm {
public:
  /// Prepares the primitive for m tokens and reorders w [n, k] (bf16, row-major).
  onednn_gemm(const bf16_t* w, std::int64_t n, std::int64_t k, std::int64_t m);
  ~onednn_gemm();
  onednn_gemm(const onednn_gemm&) = delete;
  onednn_gemm& operator=(const onednn_gemm&) = delete;

  /// y = bf16(x) · Wᵀ; x [m, k] fp32 (stride k), y [m, n] fp32 (stride n).
  void run(const float* x, float* y);
  /// The CPU ISA oneDNN dispatched to (e.g. "avx512_core_bf16", "avx512_core_amx").
  [[nodiscard]] static const char* isa();

private:
  struct impl;
  std::unique_ptr<impl> p_;
};

} // namespace k3::bench
