#include "kernels/cuda/fill.cuh"

#include "kernels/cuda/check.cuh"

namespace k3::cuda {
namespace {

__device__ __forceinline__ std::uint64_t mix(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__global__ void fill_kernel(std::uint8_t* p, std::size_t n, std::uint64_t seed, unsigned lo, unsigned span) {
  for (std::size_t i = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 8; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x * 8) {
    const std::uint64_t r = mix(seed ^ (i * 0x2545F4914F6CDD1Dull));
    for (int j = 0; j < 8 && i + j < n; ++j) {
      const unsigned b = (r >> (8 * j)) & 0xFFu;
      p[i + j] = static_cast<std::uint8_t>(span ? lo + b % span : b);
    }
  }
}

status launch(std::uint8_t* p, std::size_t n, std::uint64_t seed, unsigned lo, unsigned span, cudaStream_t s) {
  if (n == 0) return {};
  const std::size_t groups = (n + 7) / 8;
  const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>(65535, (groups + 255) / 256));
  fill_kernel<<<blocks, 256, 0, s>>>(p, n, seed, lo, span);
  K3_CUDA_TRY(cudaGetLastError());
  return {};
}

} // namespace

status fill_random_bytes(std::uint8_t* p, std::size_t n, std::uint64_t seed, cudaStream_t s) { return launch(p, n, seed, 0, 0, s); }

status fill_bytes_in_range(std::uint8_t* p, std::size_t n, std::uint8_t lo, std::uint8_t span, std::uint64_t seed, cudaStream_t s) {
  if (span == 0) return {false, "fill_bytes_in_range: span must be positive"};
  return launch(p, n, seed, lo, span, s);
}

} // namespace k3::cuda
