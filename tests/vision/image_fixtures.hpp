#pragma once
// Test images written with the same libraries the decoder reads (libpng, libjpeg-turbo,
// libwebp, giflib), so every mode and format the preprocessing rules care about can be made
// from exact pixel values in the test itself.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace k3::test {

struct png_spec {
  int width = 0, height = 0;
  int color_type = 2; ///< PNG_COLOR_TYPE_*: 0 grey, 2 RGB, 3 palette, 4 grey+alpha, 6 RGBA
  int bit_depth = 8;
  std::vector<std::uint8_t> rows;  ///< packed as libpng expects (16-bit big-endian)
  std::vector<std::array<std::uint8_t, 3>> palette;
  std::vector<std::uint8_t> trns;  ///< palette alpha entries, or grey/RGB key as 2/6 bytes
};
[[nodiscard]] std::string png_bytes(const png_spec& s);
/// A PNG whose header claims w×h but holds no pixel data (decompression-bomb probe).
[[nodiscard]] std::string png_header_only(std::uint32_t w, std::uint32_t h);

/// components 1 (grey), 3 (RGB) or 4 (CMYK, Adobe-inverted as Photoshop writes it).
[[nodiscard]] std::string jpeg_bytes(int w, int h, int components, const std::vector<std::uint8_t>& px, int quality = 95);
/// Lossless WebP (alpha when channels == 4).
[[nodiscard]] std::string webp_lossless(int w, int h, int channels, const std::vector<std::uint8_t>& px);
/// GIF89a, one frame at (left, top) of a w×h screen; transparent < 0: none.
[[nodiscard]] std::string gif_bytes(int w, int h, int left, int top, int fw, int fh, const std::vector<std::uint8_t>& idx,
                                    const std::vector<std::array<std::uint8_t, 3>>& palette, int transparent);
[[nodiscard]] std::string base64(const std::string& bytes);

} // namespace k3::test
