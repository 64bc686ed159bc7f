// Spec vision.md §4. Pillow's resampling is reproduced operation by operation (coefficients
// in double, normalized, converted to 22-bit fixed point with round-half-away, each pass
// rounded and clipped to 8 bits, horizontal pass first) because K3 sees those exact bytes.
#include "runtime/vision/preprocess.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/common/bf16.hpp"

namespace k3::vision {

resize_plan plan_resize(int W, int H, const proc_config& c) {
  if (W <= 0 || H <= 0) throw image_error(400, "the image has no pixels");
  const double ps = c.patch_size;
  const double L = static_cast<double>(c.in_patch_limit), S = c.patch_limit_on_one_side;
  // Python: sqrt(L / (max(1.0, W // ps) * max(1.0, H // ps))), min(S*ps / W, ...)
  const double s1 = std::sqrt(L / (std::max(1.0, std::floor(W / ps)) * std::max(1.0, std::floor(H / ps))));
  const double s2 = (S * ps) / W, s3 = (S * ps) / H;
  const double scale = std::min({1.0, s1, s2, s3});
  const int side = c.patch_limit_on_one_side * c.patch_size;
  resize_plan p;
  p.new_w = std::min(std::max(1, static_cast<int>(W * scale)), side);
  p.new_h = std::min(std::max(1, static_cast<int>(H * scale)), side);
  const int f = c.merge * c.patch_size;
  p.pad_w = (f - p.new_w % f) % f;
  p.pad_h = (f - p.new_h % f) % f;
  p.grid_w = (p.new_w + p.pad_w) / c.patch_size;
  p.grid_h = (p.new_h + p.pad_h) / c.patch_size;
  p.tokens = p.patches() / (static_cast<std::int64_t>(c.merge) * c.merge);
  return p;
}

namespace {

constexpr int precision_bits = 32 - 8 - 2;

double bicubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

struct coeffs {
  int ksize = 0;
  std::vector<int> xmin, count;
  std::vector<std::int32_t> k; // out × ksize, fixed point
};

// Pillow precompute_coeffs + normalize_coeffs_8bpc for box (0, in) → out.
coeffs precompute(int in, int out) {
  const double scale = static_cast<double>(in) / out;
  const double filterscale = std::max(scale, 1.0);
  const double support = 2.0 * filterscale;
  coeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.xmin.resize(static_cast<std::size_t>(out));
  c.count.resize(static_cast<std::size_t>(out));
  c.k.assign(static_cast<std::size_t>(out) * static_cast<std::size_t>(c.ksize), 0);
  std::vector<double> pre(static_cast<std::size_t>(c.ksize));
  const double ss = 1.0 / filterscale;
  for (int xx = 0; xx < out; ++xx) {
    const double center = (xx + 0.5) * scale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in) xmax = in;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double w = bicubic((x + xmin - center + 0.5) * ss);
      pre[static_cast<std::size_t>(x)] = w;
      ww += w;
    }
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? pre[static_cast<std::size_t>(x)] / ww : pre[static_cast<std::size_t>(x)];
      c.k[static_cast<std::size_t>(xx) * c.ksize + x] =
          static_cast<std::int32_t>(v < 0 ? -0.5 + v * (1 << precision_bits) : 0.5 + v * (1 << precision_bits));
    }
    c.xmin[static_cast<std::size_t>(xx)] = xmin;
    c.count[static_cast<std::size_t>(xx)] = xmax;
  }
  return c;
}

inline std::uint8_t clip8(std::int64_t acc) {
  const std::int64_t v = acc >> precision_bits;
  return static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// One pass over interleaved `ch`-channel rows. Horizontal: along x; vertical: along y.
std::vector<std::uint8_t> pass_h(const std::vector<std::uint8_t>& src, int w, int h, int ch, int ow) {
  const coeffs c = precompute(w, ow);
  std::vector<std::uint8_t> dst(static_cast<std::size_t>(ow) * h * ch);
  for (int y = 0; y < h; ++y) {
    const std::uint8_t* row = src.data() + static_cast<std::size_t>(y) * w * ch;
    for (int xx = 0; xx < ow; ++xx) {
      const std::int32_t* k = &c.k[static_cast<std::size_t>(xx) * c.ksize];
      const int x0 = c.xmin[static_cast<std::size_t>(xx)], n = c.count[static_cast<std::size_t>(xx)];
      for (int b = 0; b < ch; ++b) {
        std::int64_t ss = 1 << (precision_bits - 1);
        for (int x = 0; x < n; ++x) ss += static_cast<std::int64_t>(row[(x0 + x) * ch + b]) * k[x];
        dst[(static_cast<std::size_t>(y) * ow + xx) * ch + b] = clip8(ss);
      }
    }
  }
  return dst;
}

std::vector<std::uint8_t> pass_v(const std::vector<std::uint8_t>& src, int w, int h, int ch, int oh) {
  const coeffs c = precompute(h, oh);
  std::vector<std::uint8_t> dst(static_cast<std::size_t>(w) * oh * ch);
  const std::size_t stride = static_cast<std::size_t>(w) * ch;
  for (int yy = 0; yy < oh; ++yy) {
    const std::int32_t* k = &c.k[static_cast<std::size_t>(yy) * c.ksize];
    const int ymin = c.xmin[static_cast<std::size_t>(yy)], n = c.count[static_cast<std::size_t>(yy)];
    for (std::size_t i = 0; i < stride; ++i) {
      std::int64_t ss = 1 << (precision_bits - 1);
      for (int y = 0; y < n; ++y) ss += static_cast<std::int64_t>(src[static_cast<std::size_t>(ymin + y) * stride + i]) * k[y];
      dst[static_cast<std::size_t>(yy) * stride + i] = clip8(ss);
    }
  }
  return dst;
}

inline int muldiv255(int a, int b) {
  const int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

} // namespace

image pillow_resize(const image& in, int nw, int nh) {
  if (nw == in.width && nh == in.height) return in;
  image out = in;
  out.width = nw;
  out.height = nh;
  const int ch = channels(in.mode);
  if (in.mode == pixel_mode::P || in.bilevel) {
    // ImagingScaleAffine: source coordinate accumulated in double from scale·0.5.
    const double ax = static_cast<double>(in.width) / nw, ay = static_cast<double>(in.height) / nh;
    std::vector<int> xin(static_cast<std::size_t>(nw));
    double xo = ax * 0.5;
    for (int x = 0; x < nw; ++x, xo += ax) xin[static_cast<std::size_t>(x)] = std::min(static_cast<int>(xo), in.width - 1);
    out.px.assign(static_cast<std::size_t>(nw) * nh * ch, 0);
    double yo = ay * 0.5;
    for (int y = 0; y < nh; ++y, yo += ay) {
      const int yi = std::min(static_cast<int>(yo), in.height - 1);
      for (int x = 0; x < nw; ++x)
        std::memcpy(&out.px[(static_cast<std::size_t>(y) * nw + x) * ch],
                    &in.px[(static_cast<std::size_t>(yi) * in.width + xin[static_cast<std::size_t>(x)]) * ch], static_cast<std::size_t>(ch));
    }
    return out;
  }
  const bool alpha = in.mode == pixel_mode::LA || in.mode == pixel_mode::RGBA;
  std::vector<std::uint8_t> src = in.px;
  if (alpha) { // RGBA → RGBa (premultiply)
    const std::size_t n = static_cast<std::size_t>(in.width) * in.height;
    for (std::size_t i = 0; i < n; ++i) {
      std::uint8_t* p = &src[i * ch];
      const int a = p[ch - 1];
      for (int b = 0; b < ch - 1; ++b) p[b] = static_cast<std::uint8_t>(muldiv255(p[b], a));
    }
  }
  int w = in.width, h = in.height;
  if (nw != w) {
    src = pass_h(src, w, h, ch, nw);
    w = nw;
  }
  if (nh != h) src = pass_v(src, w, h, ch, nh);
  if (alpha) { // RGBa → RGBA
    const std::size_t n = static_cast<std::size_t>(nw) * nh;
    for (std::size_t i = 0; i < n; ++i) {
      std::uint8_t* p = &src[i * ch];
      const int a = p[ch - 1];
      if (a == 255 || a == 0) continue;
      for (int b = 0; b < ch - 1; ++b) {
        const int v = (255 * p[b]) / a;
        p[b] = static_cast<std::uint8_t>(v > 255 ? 255 : v);
      }
    }
  }
  out.px = std::move(src);
  return out;
}

std::vector<std::uint8_t> to_rgb_filled(const image& in, const proc_config& c) {
  const std::size_t n = static_cast<std::size_t>(in.width) * in.height;
  std::vector<std::uint8_t> rgb(n * 3);
  const int ch = channels(in.mode);
  auto px_rgba = [&](std::size_t i, std::uint8_t out[4]) {
    const std::uint8_t* p = &in.px[i * ch];
    switch (in.mode) {
      case pixel_mode::L: out[0] = out[1] = out[2] = p[0]; out[3] = 255; break;
      case pixel_mode::LA: out[0] = out[1] = out[2] = p[0]; out[3] = p[1]; break;
      case pixel_mode::RGB: out[0] = p[0]; out[1] = p[1]; out[2] = p[2]; out[3] = 255; break;
      case pixel_mode::RGBA: std::memcpy(out, p, 4); break;
      case pixel_mode::P: std::memcpy(out, in.palette[p[0]].data(), 4); break;
    }
    if (in.color_key && out[0] == (*in.color_key)[0] && out[1] == (*in.color_key)[1] && out[2] == (*in.color_key)[2])
      out[3] = 0;
  };
  const bool transparent = in.has_transparency();
  for (int y = 0; y < in.height; ++y)
    for (int x = 0; x < in.width; ++x) {
      const std::size_t i = static_cast<std::size_t>(y) * in.width + x;
      std::uint8_t p[4];
      px_rgba(i, p);
      if (!transparent) {
        std::memcpy(&rgb[3 * i], p, 3);
        continue;
      }
      const bool odd = ((y / c.square) + (x / c.square)) % 2 == 1;
      const std::uint8_t bg = (odd == c.white_top_left) ? c.gray : c.white;
      const float a = static_cast<float>(p[3]) / 255.0f;
      for (int b = 0; b < 3; ++b) {
        const float v = a * static_cast<float>(p[b]) + (1.0f - a) * static_cast<float>(bg);
        rgb[3 * i + static_cast<std::size_t>(b)] = static_cast<std::uint8_t>(v); // numpy astype: truncation
      }
    }
  return rgb;
}

pixel_patches preprocess(const image& img, const proc_config& c) {
  const resize_plan plan = plan_resize(img.width, img.height, c);
  const image resized = pillow_resize(img, plan.new_w, plan.new_h);
  const std::vector<std::uint8_t> rgb = to_rgb_filled(resized, c);
  // float32(u8 / 255.0), then (x − mean) · (1 / std) with float64 operands, stored float32,
  // then the tower's bf16 cast.
  float lut[3][256];
  for (int b = 0; b < 3; ++b)
    for (int v = 0; v < 256; ++v) {
      const float x = static_cast<float>(v / 255.0);
      const float y = static_cast<float>((static_cast<double>(x) - static_cast<double>(c.mean[b])) * (1.0 / static_cast<double>(c.std[b])));
      lut[b][v] = round_bf16(y);
    }
  const float pad_value[3] = {lut[0][0], lut[1][0], lut[2][0]};
  const int p = c.patch_size, gh = plan.grid_h, gw = plan.grid_w;
  pixel_patches out;
  out.grid_h = gh;
  out.grid_w = gw;
  const std::size_t D = static_cast<std::size_t>(3 * p * p);
  out.values.resize(static_cast<std::size_t>(gh) * gw * D);
  for (int r = 0; r < gh; ++r)
    for (int col = 0; col < gw; ++col) {
      float* dst = &out.values[(static_cast<std::size_t>(r) * gw + col) * D];
      for (int b = 0; b < 3; ++b)
        for (int py = 0; py < p; ++py) {
          const int y = r * p + py;
          for (int px = 0; px < p; ++px) {
            const int x = col * p + px;
            float v = pad_value[b];
            if (y < resized.height && x < resized.width)
              v = lut[b][rgb[(static_cast<std::size_t>(y) * resized.width + x) * 3 + static_cast<std::size_t>(b)]];
            dst[(b * p + py) * p + px] = v;
          }
        }
    }
  return out;
}

} // namespace k3::vision
