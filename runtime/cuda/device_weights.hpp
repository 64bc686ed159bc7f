#pragma once
// The model's weights in device memory, uploaded once from a loaded model::model (so the
// checkpoint loader, its name and shape checks and the MXFP4 handling are the CPU's own).
//
//   dense matrices   bf16 [rows, cols] (fp32 checkpoints are narrowed once at upload)
//   router           fp32 (the top-k choice is sensitive to rounding)
//   vectors          fp32 (norms, conv weights, A_log, dt_bias, AttnRes queries, kv_b)
//   routed experts   MXFP4 packed + scales as stored, one device pointer array per matrix kind
//                    (cuda::moe_weights); bf16 experts are refused with a message naming
//                    --quantization mxfp4 (the kernels are MXFP4 only)
//
// Tensor parallelism (tp.size > 1, Megatron-style inside one node): KDA and MLA heads, the
// dense MLP's and the shared experts' intermediate units are split evenly over the ranks —
// q/k/v/f_b/b/g/g_b/kv_b/q_b/gate/up rows, conv/A_log/dt_bias by head, o_proj and down_proj
// columns (their outputs are partial sums, all-reduced by cuda_model); the routed experts are
// partitioned by id (expert parallelism: rank r owns [first_expert, last_expert)); embedding,
// head, router, norms, AttnRes queries, q_a/kv_a and the latent projections are replicated.
//
// One cudaMalloc arena holds everything (256-byte aligned tensors); a progress bar shows the
// upload. Throws cuda_error (device, allocation) or std::invalid_argument (unsupported model).
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cuda/moe.cuh"
#include "runtime/cuda/blas.hpp"
#include "runtime/model/model.hpp"

namespace k3::gpu {

struct d_kda {
  dmat q, k, v, f_a, f_b, b, g_a, g_b, g, o;
  const float* conv = nullptr; ///< [3, P, K]
  const float* a_log = nullptr;
  const float* dt_bias = nullptr;
  const float* o_norm = nullptr;
};

struct d_mla {
  dmat q, q_a, q_b, kv_a, g, o;
  const float* q_a_norm = nullptr;
  const float* kv_a_norm = nullptr;
  const float* kv_b = nullptr; ///< fp32 [H·(nope + v), latent]
};

struct d_mlp {
  dmat gate, up, down;
  [[nodiscard]] bool empty() const noexcept { return gate.empty(); }
};

struct d_moe {
  dmat32 gate;
  const float* bias = nullptr;
  cuda::moe_weights experts;
  d_mlp shared;
  dmat latent_down, latent_up;
  const float* latent_norm = nullptr;
};

struct d_layer {
  bool kda = false, moe = false;
  const float* in_norm = nullptr;
  const float* post_norm = nullptr;
  const float* attn_res_w = nullptr;
  const float* mlp_res_w = nullptr;
  d_kda kda_w;
  d_mla mla_w;
  d_mlp mlp;
  d_moe moe_w;
};

struct tp_slice {
  int rank = 0, size = 1;
  [[nodiscard]] std::int64_t begin(std::int64_t n) const noexcept { return n * rank / size; }
  [[nodiscard]] std::int64_t end(std::int64_t n) const noexcept { return n * (rank + 1) / size; }
};

struct device_weights {
  dmat embed, head;
  const float* final_norm = nullptr;
  const float* out_res_w = nullptr;
  std::vector<d_layer> layers;
  std::int64_t bytes = 0; ///< arena size
  int first_expert = 0, last_expert = 0; ///< routed experts held here: [first, last)

  /// Uploads `m`'s weights (this rank's slice) to the current device. `progress`: 1 always, 0
  /// never, -1 on a tty. Throws std::invalid_argument when heads or intermediate sizes do not
  /// divide by tp.size.
  [[nodiscard]] static std::unique_ptr<device_weights> upload(const model::model& m, int progress, const tp_slice& tp = {});
  /// Device bytes this rank's slice takes (the upload's sizing pass; no device needed). Throws
  /// like upload() for sizes that do not divide.
  [[nodiscard]] static std::int64_t bytes_for(const model::model& m, const tp_slice& tp = {});

private:
  std::shared_ptr<void> arena_;
};

} // namespace k3::gpu
