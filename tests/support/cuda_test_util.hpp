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

} // namespace k3::test
