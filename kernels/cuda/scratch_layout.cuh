#pragma once
// Carving one device allocation into a workspace's buffers: take(bytes) returns the next
// 256-byte-aligned offset (cudaMalloc's own alignment, what CUB and vector loads expect).
#include <cstddef>

namespace k3::cuda::detail {

struct scratch_layout {
  std::size_t total = 0;
  std::size_t take(std::size_t bytes) noexcept {
    const std::size_t at = total;
    total += (bytes + 255) / 256 * 256;
    return at;
  }
};

} // namespace k3::cuda::detail
