// libFuzzer: image bytes from a request (data URL or download) → decode (PNG, JPEG, WebP, GIF)
// → the whole preprocessing chain. Invariants: only image_error escapes; a decoded image has the
// pixel buffer its mode and size promise; the patches are finite and in [−1, 1].
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "runtime/vision/image.hpp"
#include "runtime/vision/preprocess.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace k3::vision;
  decode_limits lim;
  lim.max_pixels = 1 << 20; // keep each unit fast; the real limit is tested elsewhere
  image img;
  try {
    img = decode_image(data, size, lim);
  } catch (const image_error& e) {
    if (e.status != 400) std::abort();
    return 0;
  }
  if (img.width <= 0 || img.height <= 0 ||
      img.px.size() != static_cast<std::size_t>(img.width) * img.height * static_cast<std::size_t>(channels(img.mode)))
    std::abort();
  if (img.mode == pixel_mode::P && img.palette.size() != 256) std::abort();
  proc_config c;
  c.in_patch_limit = 64; // small: most inputs take the resampling path
  c.patch_limit_on_one_side = 16;
  const auto p = preprocess(img, c);
  if (p.values.size() != static_cast<std::size_t>(p.grid_h) * p.grid_w * 588) std::abort();
  for (float v : p.values)
    if (!(v >= -1.0f && v <= 1.0f)) std::abort();
  return 0;
}
