#include "runtime/cuda/blas.hpp"

#include "kernels/cuda/forward_ops.cuh"

namespace k3::gpu {

blas::blas(cudaStream_t stream) : stream_(stream) {
  check(cublasCreate(&h_), "cublasCreate");
  check(cublasSetStream(h_, stream), "cublasSetStream");
  // Deterministic results: no split-K reductions with atomics.
  check(cublasSetAtomicsMode(h_, CUBLAS_ATOMICS_NOT_ALLOWED), "cublasSetAtomicsMode");
  // A workspace of our own: cuBLAS then never allocates inside a step (CUDA-graph capture).
  workspace_ = device_alloc(32u << 20, "cudaMalloc(cuBLAS workspace)");
  check(cublasSetWorkspace(h_, workspace_.get(), 32u << 20), "cublasSetWorkspace");
}

blas::~blas() {
  if (h_) cublasDestroy(h_);
}

void blas::matmul(const dmat& W, const float* x, std::int64_t ldx, std::int64_t m, float* y, std::int64_t ldy) {
  if (m <= 0) return;
  // Contiguous bf16 rows of x (ld = cols) whatever ldx was.
  auto* xb = xb_.as<std::uint16_t>(static_cast<std::size_t>(m * W.cols));
  if (ldx == W.cols) {
    check(cuda::to_bf16(x, m * W.cols, xb, stream_));
  } else {
    for (std::int64_t r = 0; r < m; ++r) check(cuda::to_bf16(x + r * ldx, W.cols, xb + r * W.cols, stream_));
  }
  const float one = 1.f, zero = 0.f;
  check(cublasGemmEx(h_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(W.rows), static_cast<int>(m), static_cast<int>(W.cols), &one,
                     W.w, CUDA_R_16BF, static_cast<int>(W.cols), xb, CUDA_R_16BF, static_cast<int>(W.cols), &zero, y, CUDA_R_32F,
                     static_cast<int>(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx(bf16)");
}

void blas::matmul(const dmat32& W, const float* x, std::int64_t ldx, std::int64_t m, float* y, std::int64_t ldy) {
  if (m <= 0) return;
  const float one = 1.f, zero = 0.f;
  check(cublasSgemm(h_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(W.rows), static_cast<int>(m), static_cast<int>(W.cols), &one, W.w,
                    static_cast<int>(W.cols), x, static_cast<int>(ldx), &zero, y, static_cast<int>(ldy)),
        "cublasSgemm");
}

} // namespace k3::gpu
