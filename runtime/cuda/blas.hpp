#pragma once
// Dense GEMMs of the CUDA backend through cuBLAS: y[m, rows] = x[m, cols] · Wᵀ, W a row-major
// bf16 matrix on the device (checkpoint layout), x and y fp32. x is rounded to bf16 into a
// scratch buffer first (W16A16 with fp32 accumulation, CUBLAS_COMPUTE_32F); the router, whose
// top-k choice is sensitive to rounding, uses the fp32 form (W fp32, x fp32).
//
// Column-major view used for cuBLAS: Y_cm (rows × m) = W_cmᵀ (rows × cols) · X_cm (cols × m),
// i.e. gemm(OP_T, OP_N) with lda = cols, ldb = ldx, ldc = ldy.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/cuda/cuda_check.hpp"

namespace k3::gpu {

struct dmat {
  const std::uint16_t* w = nullptr; ///< bf16 [rows, cols]
  std::int64_t rows = 0, cols = 0;
  [[nodiscard]] bool empty() const noexcept { return rows == 0; }
};

struct dmat32 {
  const float* w = nullptr; ///< fp32 [rows, cols]
  std::int64_t rows = 0, cols = 0;
};

class blas {
public:
  explicit blas(cudaStream_t stream);
  ~blas();
  blas(const blas&) = delete;
  blas& operator=(const blas&) = delete;

  /// Growth of the bf16 scratch bumps *generation (CUDA graphs recorded over it are stale).
  void track(std::uint64_t* generation) noexcept { xb_.track(generation); }
  void matmul(const dmat& W, const float* x, std::int64_t ldx, std::int64_t m, float* y, std::int64_t ldy);
  void matmul(const dmat32& W, const float* x, std::int64_t ldx, std::int64_t m, float* y, std::int64_t ldy);

private:
  cublasHandle_t h_ = nullptr;
  cudaStream_t stream_;
  device_scratch xb_; // bf16 copy of x
  std::shared_ptr<void> workspace_;
};

} // namespace k3::gpu
