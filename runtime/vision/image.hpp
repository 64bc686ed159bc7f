#pragma once
// A decoded still image in the mode Pillow would give it (spec vision.md §3.1, §4.1): the
// preprocessor keeps that mode through the resize and converts to RGB only afterwards, so the
// decoder must not flatten palettes or alpha early.
//
//   L      8-bit grey                         RGB   8-bit RGB
//   LA     grey + alpha                       RGBA  RGB + alpha
//   P      8-bit palette indices + `palette` (RGBA entries; alpha < 255 only where the file
//          carries transparency, which then counts as Pillow's info["transparency"])
//
// CMYK JPEGs and 16-bit PNGs are converted at decode time the way Pillow converts them to RGB
// (cmyk2rgb; 16-bit channels keep their high byte, 16-bit grey clips at 255 as Pillow's I;16→L).

#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace k3::vision {

enum class pixel_mode : std::uint8_t { L, LA, RGB, RGBA, P };

[[nodiscard]] constexpr int channels(pixel_mode m) noexcept {
  switch (m) {
    case pixel_mode::L:
    case pixel_mode::P: return 1;
    case pixel_mode::LA: return 2;
    case pixel_mode::RGB: return 3;
    case pixel_mode::RGBA: return 4;
  }
  return 1;
}

struct image {
  int width = 0, height = 0;
  pixel_mode mode = pixel_mode::RGB;
  std::vector<std::uint8_t> px;                     ///< row-major, channels(mode) bytes per pixel
  std::vector<std::array<std::uint8_t, 4>> palette; ///< P only
  /// L/RGB images with a tRNS colour key (Pillow info["transparency"]): pixels equal to it are
  /// transparent when the image is converted to RGBA.
  std::optional<std::array<std::uint8_t, 3>> color_key;
  std::string format; ///< "png", "jpeg", "webp", "gif"
  /// Pillow mode "1" (1-bit PNG, kept here as L 0/255): resized with NEAREST like P.
  bool bilevel = false;

  [[nodiscard]] bool has_transparency() const noexcept {
    if (mode == pixel_mode::LA || mode == pixel_mode::RGBA) return true;
    if (mode == pixel_mode::P)
      for (const auto& e : palette)
        if (e[3] != 255) return true;
    return color_key.has_value();
  }
};

/// Why an image could not be used; `status` is the HTTP status the server answers with
/// (400 undecodable or unsupported, 413-as-422 too large: see spec §3).
struct image_error : std::runtime_error {
  image_error(int status_, const std::string& what) : std::runtime_error(what), status(status_) {}
  int status;
};

struct decode_limits {
  /// Pillow's decompression-bomb error threshold (2 × 89,478,485 pixels): refused from the
  /// header, before any pixel buffer is allocated.
  std::int64_t max_pixels = 178956970;
};

/// Decodes PNG, JPEG, WebP or GIF (first frame) from memory, detected by signature. Throws
/// image_error(400) naming the format and the library's complaint.
[[nodiscard]] image decode_image(const std::uint8_t* data, std::size_t size, const decode_limits& lim = {});

} // namespace k3::vision
