#include "kernels/cuda/device.cuh"

#include <cuda_runtime.h>

namespace k3::cuda {

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError(); // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string device_name(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return "unknown device";
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major * 10 + prop.minor) + ")";
}

} // namespace k3::cuda
