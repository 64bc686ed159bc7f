#pragma once
// MoonViT image preprocessing exactly as the reference processor (spec vision.md §4):
// NaViT resize rule in IEEE double, Pillow-compatible resampling when it shrinks (bicubic in
// fixed point for L/RGB, premultiplied for LA/RGBA, nearest for palette and 1-bit images),
// the chessboard transparency fill after the resize, black padding to multiples of 28,
// normalization through a float32 table, and patchify in (channel, row, col) order. The
// result is rounded to bf16, as the tower sees it (its pixel input is cast to bf16).

#include <cstdint>
#include <vector>

#include "runtime/vision/image.hpp"

namespace k3::vision {

/// `preprocessor_config.json` → media_proc_cfg (published K3 values as defaults).
struct proc_config {
  int patch_size = 14;
  int merge = 2;                       ///< merge_kernel_size
  std::int64_t in_patch_limit = 65536;
  int patch_limit_on_one_side = 512;
  float mean[3] = {0.5f, 0.5f, 0.5f};
  float std[3] = {0.5f, 0.5f, 0.5f};
  int square = 8;                      ///< chessboard_square_size
  std::uint8_t white = 255, gray = 180;
  bool white_top_left = true;
};

/// The §4.2 rule for an original W×H image.
struct resize_plan {
  int new_w = 0, new_h = 0;   ///< after the resize (== W, H when scale is 1)
  int pad_w = 0, pad_h = 0;   ///< black columns/rows added right/bottom
  int grid_h = 0, grid_w = 0; ///< patches (rows, cols), both even
  [[nodiscard]] std::int64_t patches() const noexcept { return static_cast<std::int64_t>(grid_h) * grid_w; }
  /// Embedding tokens = <|media_pad|> count = patches / merge².
  std::int64_t tokens = 0;
};
[[nodiscard]] resize_plan plan_resize(int width, int height, const proc_config& c = {});

/// Pillow's Image.resize((w, h), BICUBIC) in the image's own mode (P and 1-bit: NEAREST). A
/// same-size request returns a copy.
[[nodiscard]] image pillow_resize(const image& in, int new_w, int new_h);

/// The resized image as packed RGB bytes: transparent images composited over the chessboard
/// (float32 blend, truncated), others converted like Pillow's convert("RGB").
[[nodiscard]] std::vector<std::uint8_t> to_rgb_filled(const image& in, const proc_config& c = {});

struct pixel_patches {
  int grid_h = 0, grid_w = 0;
  std::vector<float> values; ///< [grid_h·grid_w, 3·p·p], bf16-representable floats
};
/// The whole §4 chain for one decoded image.
[[nodiscard]] pixel_patches preprocess(const image& img, const proc_config& c = {});

} // namespace k3::vision
