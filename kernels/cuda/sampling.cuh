#pragma once
// Temperature / top-k / min-p / top-p sampling on the GPU with the CPU sampler's semantics
// (kernels/sampling/sampler.hpp), for rows without penalties or top-logprobs:
//
//   1. every row's logits sorted descending with their ids (CUB segmented radix sort, stable:
//      equal logits keep ascending ids = the CPU's (probability desc, id asc) order);
//   2. per row (one block): candidates = the first top_k (or all); p_i = exp((l_i − l_0) / T)
//      in fp32; min-p keeps the prefix with p_i ≥ min_p; with top_p < 1 the smallest prefix whose
//      sum (fp64) reaches top_p × total, drawn in that order; otherwise the candidates are
//      drawn in ascending id order, as the CPU does;
//   3. the draw uses the uniform u the request's sampler produced on the host
//      (sampler::next_uniform), so a request's random stream is the one sample() would use;
//   4. the chosen token's raw log-probability l_t − max − log Σ exp(l − max) (fp64 sum).
// Same token as the CPU sampler up to fp32 rounding of near-equal probabilities.
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/device.cuh"

namespace k3::cuda {

struct sample_params {
  float temperature = 1.0f; ///< > 0 (greedy rows use argmax_rows)
  int top_k = 0;            ///< ≤ 0: off
  float top_p = 1.0f;
  float min_p = 0.0f;
  double u = 0.0;           ///< uniform in [0, 1) from the request's sampler
};

/// Device scratch for up to max_rows rows of `vocab` logits; bind() to bytes() of device memory.
class sample_workspace {
public:
  sample_workspace(int max_rows, int vocab);
  [[nodiscard]] std::size_t bytes() const noexcept { return total_; }
  void bind(void* base) noexcept { base_ = static_cast<char*>(base); }
  int max_rows, vocab;

private:
  friend status sample_rows(const float*, int, const sample_params*, sample_workspace&, std::int32_t*, float*, cudaStream_t);
  std::size_t off_keys = 0, off_ids_in = 0, off_ids = 0, off_offsets = 0, off_cub = 0, cub_bytes = 0, total_ = 0;
  char* base_ = nullptr;
};

/// logits [rows, vocab]; params: device array [rows]; ids / logprobs: device [rows].
status sample_rows(const float* logits, int rows, const sample_params* params, sample_workspace& ws, std::int32_t* ids,
                   float* logprobs, cudaStream_t stream);

} // namespace k3::cuda
