#pragma once
// Host-side error plumbing of the CUDA backend: kernel statuses, CUDA runtime and cuBLAS
// return codes become k3::gpu::cuda_error (a std::runtime_error naming the call), which the
// executor turns into a step error — never exit() or abort (STYLE.md §1.1.8).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/cuda/device.cuh"

namespace k3::gpu {

struct cuda_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void check(const cuda::status& s) {
  if (!s.ok) throw cuda_error(s.message);
}

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw cuda_error(std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

inline void check(cublasStatus_t e, const char* what) {
  if (e != CUBLAS_STATUS_SUCCESS) throw cuda_error(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(e)));
}

/// Device memory owned by a shared_ptr (cudaFree on release; errors at free are ignored:
/// nothing useful can be done in a destructor).
inline std::shared_ptr<void> device_alloc(std::size_t bytes, const char* what) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes == 0 ? 256 : bytes), what);
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

/// Page-locked host memory (async copies), same ownership.
inline std::shared_ptr<void> pinned_alloc(std::size_t bytes, const char* what) {
  void* p = nullptr;
  check(cudaMallocHost(&p, bytes == 0 ? 256 : bytes), what);
  return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
}

/// A grow-only device buffer (scratch that keeps its largest size). Growth moves it, so an
/// owner that records CUDA graphs passes a generation counter that every growth bumps.
class device_scratch {
public:
  void track(std::uint64_t* generation) noexcept { generation_ = generation; }
  void* get(std::size_t bytes) {
    if (bytes > size_) {
      mem_ = device_alloc(bytes, "cudaMalloc(scratch)"); // cudaFree syncs with prior work using it
      size_ = bytes;
      if (generation_) ++*generation_;
    }
    return mem_.get();
  }
  template <class T>
  T* as(std::size_t count) {
    return static_cast<T*>(get(count * sizeof(T)));
  }

private:
  std::shared_ptr<void> mem_;
  std::size_t size_ = 0;
  std::uint64_t* generation_ = nullptr;
};

} // namespace k3::gpu
