#pragma once
// Device-side fills for benchmarks and tests: random bytes (splitmix64 of the index and a
// seed) and bytes in [lo, lo + span) — e.g. sane E8M0 scales — without staging gigabytes of
// host data.
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/device.cuh"

namespace k3::cuda {

status fill_random_bytes(std::uint8_t* p, std::size_t n, std::uint64_t seed, cudaStream_t stream);
status fill_bytes_in_range(std::uint8_t* p, std::size_t n, std::uint8_t lo, std::uint8_t span, std::uint64_t seed, cudaStream_t stream);

} // namespace k3::cuda
