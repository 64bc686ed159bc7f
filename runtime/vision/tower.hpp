#pragma once
// The MoonViT3d tower, sd2_tpool merge and patchmergerv2 projector on the CPU kernels
// (spec vision.md §5): patch embedding as one bf16 GEMM, the learned position table
// interpolated to each image's grid (bilinear, or bicubic when configured; cached per grid),
// 2-D RoPE on interleaved pairs (x axis first), pre-norm blocks with per-image non-causal
// attention (kernels/vit), tanh-GELU MLP, final RMSNorm, 2×2 merge in (row, col) order, then
// Linear → erf-GELU → Linear → RMSNorm(eps 1e-5).
//
// Numerics: bf16 weights, fp32 arithmetic. In production mode every op's output is rounded to
// bf16 where the reference keeps bf16 tensors (so the residual stream is bf16 like REF);
// `exact` keeps everything in fp32 (the fp64-reference tests use it).
//
// Thread safety: encode() is const and allocates its own buffers; the kernels use the shared
// kernel pool, so callers serialise encodes (one tower thread in the server).

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "runtime/model/safetensors.hpp"
#include "runtime/model/weights.hpp"
#include "runtime/vision/preprocess.hpp"
#include "runtime/vision/vision_config.hpp"

namespace k3::vision {

struct tower_block {
  std::vector<float> norm0, norm1;
  model::dense_weight wqkv, wo, fc0, fc1;
};

struct tower_weights {
  model::dense_weight patch;      ///< [hidden, 3·p·p]
  std::vector<float> pos;         ///< [pos_h, pos_w, hidden]
  std::vector<tower_block> blocks;
  std::vector<float> final_norm;
  model::dense_weight proj0, proj2;
  std::vector<float> post_norm;
};

class tower {
public:
  /// Binds the 168 (for 27 layers) `vision_tower.*` / `mm_projector.*` tensors; throws
  /// model::checkpoint_error naming a missing tensor or a wrong shape/dtype.
  [[nodiscard]] static std::unique_ptr<tower> load(const model::checkpoint& ck, const vision_config& c, bool exact = false);

  /// Embeddings of the images, in order: [Σ tokens_i, text_hidden] fp32, image i's rows are its
  /// grid_h/2 · grid_w/2 merged tokens in row-major order.
  [[nodiscard]] std::vector<float> encode(std::span<const pixel_patches> images) const;

  [[nodiscard]] const vision_config& config() const noexcept { return c_; }
  [[nodiscard]] const tower_weights& weights() const noexcept { return w_; }
  /// Bytes of all tower + projector weights.
  [[nodiscard]] std::int64_t bytes() const noexcept;
  /// Approximate FLOPs of encoding an image of `patches` patches (linear layers + attention).
  [[nodiscard]] double flops(std::int64_t patches) const noexcept;

  /// The position table interpolated to (h, w): [h·w, hidden] (cached; thread-safe).
  [[nodiscard]] std::shared_ptr<const std::vector<float>> position_table(int h, int w) const;

private:
  tower(vision_config c, tower_weights w, bool exact) : c_(std::move(c)), w_(std::move(w)), exact_(exact) {}
  void run_blocks(std::vector<float>& x, std::span<const pixel_patches> images) const;

  vision_config c_;
  tower_weights w_;
  bool exact_;
  mutable std::mutex pos_mu_;
  mutable std::map<std::pair<int, int>, std::shared_ptr<const std::vector<float>>> pos_cache_;
};

/// Interpolates a [in_h, in_w, D] table to [out_h, out_w, D] like torch's
/// F.interpolate(align_corners=False) in fp32 (bilinear, or bicubic with A = −0.75).
[[nodiscard]] std::vector<float> interpolate_table(const float* table, int in_h, int in_w, int D, int out_h, int out_w,
                                                   bool bicubic);

} // namespace k3::vision
