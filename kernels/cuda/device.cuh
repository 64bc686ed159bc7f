#pragma once
// CUDA device discovery and error reporting shared by all CUDA kernels.
//
// Nothing here exits or aborts: failures come back as a k3::cuda::status carrying the CUDA
// error string and the file/line of the failing call, for the GPU-stream actor to turn into an
// engine error (STYLE.md §1.1.8).

#include <string>

namespace k3::cuda {

struct status {
  bool ok = true;
  std::string message; ///< "file:line: cudaErrorName: description" when !ok
  explicit operator bool() const noexcept { return ok; }
};

/// Number of usable CUDA devices; 0 when there is no driver or no device (never throws).
[[nodiscard]] int device_count() noexcept;

/// Human-readable name and compute capability of device `index`, e.g. "NVIDIA H200 (sm_90)".
[[nodiscard]] std::string device_name(int index);

} // namespace k3::cuda
