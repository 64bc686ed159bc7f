#pragma once
// The glue kernels of the GPU forward pass (runtime/cuda), each the device twin of a CPU step
// of runtime/model (same formulas, fp32 unless stated):
//
//   embed_rows     out[r] = widen(table[ids[r]])           (bf16 table [vocab, cols])
//   to_bf16        y = bf16(x) (round to nearest even): the GEMM inputs of cuBLAS
//   add_into       x += y
//   glu            out = SiTU-GLU(gate, up) or SiLU-GLU (ops/activations.hpp)
//   split_heads    q [rows, nope + rope] → q_nope [rows, nope], q_rot [rows, rope]
//   mla_cache_write  token t's row [c_kv | k_rot] (fp32, width W, stride ld) rounded to bf16
//                  into its sequence's paged cache at position pos[t]: tables[t] is that
//                  sequence's device block table (one entry per token, so prefill chunks and
//                  decode tokens of many sequences go in one launch); rows sit layer_offset
//                  elements past each block pointer
//   attnres_mix    Block AttnRes (ops/attnres.hpp) over nb banked blocks bank + i·stride and
//                  the current sum; `rows` (or nullptr) picks each output row's source row
//   argmax_rows    per row the lowest index of the maximum (greedy sampling on the device) and,
//                  if logprob is not null, its raw log-probability −log Σ exp(x − max)
//   gather_rows    out[r] = x[rows[r]]
//   apply_token_bitmask  constrained decoding: logits[rows[r]][v] = −inf where bit v of mask row
//                  r is 0 (masks: [out_rows, words] 64-bit words, bit v = word v/64, bit v%64;
//                  ids past words·64 are masked), the device twin of engine::apply_token_mask
//   local_expert_ids  expert parallelism: ids in [first, last) → id − first, others → last − first
//                  (the moe kernels' "another rank's expert" id)
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/device.cuh"

namespace k3::cuda {

status embed_rows(const std::uint16_t* table, int cols, const std::int32_t* ids, int rows, float* out, cudaStream_t stream);
status to_bf16(const float* x, long long n, std::uint16_t* y, cudaStream_t stream);
status add_into(float* x, const float* y, long long n, cudaStream_t stream);

struct glu_params {
  bool situ = true;
  float beta = 4.0f, linear_beta = 25.0f;
};
status glu(const float* gate, const float* up, long long n, const glu_params& p, float* out, cudaStream_t stream);

status split_heads(const float* q, long long rows, int nope, int rope, float* q_nope, float* q_rot, cudaStream_t stream);

status mla_cache_write(const float* rows_fp32, long long ld, int width, const std::uint16_t* const* const* tables,
                       const std::int64_t* pos, int block_size, std::int64_t layer_offset, int tokens, cudaStream_t stream);

status attnres_mix(const float* bank, long long bank_stride, int nb, const float* current, const float* w, float eps,
                   const std::int32_t* rows, int out_rows, int n, float* out, cudaStream_t stream);

status argmax_rows(const float* logits, int rows, int vocab, std::int32_t* ids, float* logprob, cudaStream_t stream);
status gather_rows(const float* x, int n, const std::int32_t* rows, int out_rows, float* out, cudaStream_t stream);
status apply_token_bitmask(float* logits, int vocab, const std::uint64_t* masks, int words, const std::int32_t* rows, int out_rows,
                           cudaStream_t stream);
status local_expert_ids(std::int32_t* ids, long long n, int first, int last, cudaStream_t stream);

} // namespace k3::cuda
