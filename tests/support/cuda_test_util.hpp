#pragma once
// Shared plumbing of the [gpu] tests: skip without a device, copy vectors to and from it.
// Every allocation is freed by the test that made it; failures are REQUIREs naming the call.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <iostream>
#include <vector>

#include "kernels/cuda/device.cuh"

namespace k3::test {

/// True (and a note for ctest's skip pattern) when no CUDA device is visible.
inline bool no_gpu() {
  if (cuda::device_count() > 0) return false;
  std::cout << "no CUDA device visible: skipping\n"; // ctest marks the test skipped
  return true;
}

/// A device copy of `v` (at least 16 bytes allocated, so empty vectors still give a pointer).
template <class T>
T* to_device(const std::vector<T>& v) {
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, std::max<std::size_t>(16, v.size() * sizeof(T))) == cudaSuccess);
  REQUIRE(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  return static_cast<T*>(p);
}

template <class T>
std::vector<T> to_host(const T* p, std::size_t n) {
  std::vector<T> v(n);
  REQUIRE(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return v;
}

/// Device buffers a test makes, freed together when it ends (also on a failed REQUIRE).
class device_arena {
public:
  device_arena() = default;
  device_arena(const device_arena&) = delete;
  device_arena& operator=(const device_arena&) = delete;
  ~device_arena() {
    for (void* p : owned_) cudaFree(p);
  }
  /// A device copy of v.
  template <class T>
  T* put(const std::vector<T>& v) {
    T* d = to_device(v);
    owned_.push_back(d);
    return d;
  }
  /// n elements of device memory filled with 0xFF bytes (NaN for floats): outputs start poisoned.
  template <class T>
  T* poisoned(std::size_t n) {
    void* d = nullptr;
    REQUIRE(cudaMalloc(&d, std::max<std::size_t>(16, n * sizeof(T))) == cudaSuccess);
    owned_.push_back(d);
    REQUIRE(cudaMemset(d, 0xFF, n * sizeof(T)) == cudaSuccess);
    return static_cast<T*>(d);
  }

private:
  std::vector<void*> owned_;
};

} // namespace k3::test
