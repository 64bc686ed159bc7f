#pragma once
// K3_CUDA_TRY(expr): evaluate a CUDA runtime call; on failure return a k3::cuda::status
// naming the call site. For use inside functions returning k3::cuda::status.
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/device.cuh"

#define K3_CUDA_TRY(expr)                                                                          \
  do {                                                                                             \
    const cudaError_t k3_err_ = (expr);                                                            \
    if (k3_err_ != cudaSuccess)                                                                    \
      return ::k3::cuda::status{false, std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " \
                                           + cudaGetErrorName(k3_err_) + ": "                      \
                                           + cudaGetErrorString(k3_err_)};                         \
  } while (0)
