// Spec vision.md §4 and §7: the resize rule against the spec's worked table, Pillow's bicubic
// on hand-computed values, the mode rules (palette, alpha premultiplication, transparency
// fill with truncation, 16-bit, CMYK), every decoder, and the refusals.
#include <catch2/catch.hpp>

#include "kernels/common/bf16.hpp"
#include "runtime/vision/image.hpp"
#include "runtime/vision/preprocess.hpp"
#include "tests/vision/image_fixtures.hpp"

using namespace k3;
using namespace k3::vision;

namespace {
image decode(const std::string& b) { return decode_image(reinterpret_cast<const std::uint8_t*>(b.data()), b.size()); }
image gray(int w, int h, std::vector<std::uint8_t> px) {
  image im;
  im.width = w, im.height = h, im.mode = pixel_mode::L, im.px = std::move(px);
  return im;
}
} // namespace

TEST_CASE("vision: NaViT resize rule reproduces the spec's worked examples (§7.2)", "[vision]") {
  struct row {
    int W, H, nw, nh, pw, ph, gh, gw;
    std::int64_t N;
  };
  const row rows[] = {
      {1536, 1024, 1536, 1024, 4, 12, 74, 110, 2035}, {1024, 1024, 1024, 1024, 12, 12, 74, 74, 1369},
      {512, 768, 512, 768, 20, 16, 56, 38, 532},       {768, 512, 768, 512, 16, 20, 38, 56, 532},
      {1024, 768, 1024, 768, 12, 16, 56, 74, 1036},    {224, 224, 224, 224, 0, 0, 16, 16, 64},
      {1920, 1080, 1920, 1080, 12, 12, 78, 138, 2691}, {2800, 2800, 2800, 2800, 0, 0, 200, 200, 10000},
      {3840, 2160, 3840, 2160, 24, 24, 156, 276, 10764}, {4000, 3000, 4000, 3000, 4, 24, 216, 286, 15444},
      {4096, 4096, 3591, 3591, 21, 21, 258, 258, 16641}, {8192, 256, 7168, 224, 0, 0, 16, 512, 2048},
      {400, 80, 400, 80, 20, 4, 6, 30, 45},             {1, 1, 1, 1, 27, 27, 2, 2, 1},
      {1861, 7041, 1850, 7002, 26, 26, 502, 134, 16817},
  };
  for (const auto& r : rows) {
    INFO(r.W << "x" << r.H);
    const auto p = plan_resize(r.W, r.H);
    CHECK(p.new_w == r.nw);
    CHECK(p.new_h == r.nh);
    CHECK(p.pad_w == r.pw);
    CHECK(p.pad_h == r.ph);
    CHECK(p.grid_h == r.gh);
    CHECK(p.grid_w == r.gw);
    CHECK(p.tokens == r.N);
  }
  // Extreme aspect ratios stay within 512 patches a side and at least one merged token.
  for (auto [w, h] : {std::pair{1, 20000}, {20000, 1}, {7169, 3}, {3, 7169}, {100000, 100000}}) {
    const auto p = plan_resize(w, h);
    INFO(w << "x" << h);
    CHECK(p.grid_h <= 512);
    CHECK(p.grid_w <= 512);
    CHECK(p.grid_h % 2 == 0);
    CHECK(p.grid_w % 2 == 0);
    CHECK(p.tokens >= 1);
    CHECK(p.patches() <= 67268);
  }
  CHECK_THROWS_AS(plan_resize(0, 5), image_error);
}

TEST_CASE("vision: Pillow bicubic — hand-computed fixed-point values, same size is a copy, passes separable", "[vision]") {
  // 4×1 [0 0 255 255] → 2×1: support 4, taps W(±0.25) = 0.8671875, W(0.75) = 0.2265625,
  // W(1.25) = −0.0703125, sum 1.890625 → 255·0.15625/1.890625 = 21.07 → 21 and 233.93 → 234.
  const auto out = pillow_resize(gray(4, 1, {0, 0, 255, 255}), 2, 1);
  REQUIRE(out.px.size() == 2);
  CHECK(out.px[0] == 21);
  CHECK(out.px[1] == 234);
  // The same along y (vertical pass).
  const auto v = pillow_resize(gray(1, 4, {0, 0, 255, 255}), 1, 2);
  CHECK(v.px == std::vector<std::uint8_t>{21, 234});
  // Constant images stay constant (normalised taps), and a same-size request changes nothing.
  const auto c = pillow_resize(gray(7, 5, std::vector<std::uint8_t>(35, 77)), 3, 2);
  for (auto x : c.px) CHECK(x == 77);
  auto id = gray(3, 3, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(pillow_resize(id, 3, 3).px == id.px);
  // Overshoot clamps to [0, 255]: a sharp edge under the negative lobe.
  const auto e = pillow_resize(gray(6, 1, {0, 0, 0, 255, 255, 255}), 4, 1);
  for (auto x : e.px) CHECK((x <= 255));
}

TEST_CASE("vision: palette and 1-bit images resize with NEAREST, RGBA resizes premultiplied (no colour bleed under alpha 0)", "[vision]") {
  image p;
  p.width = 4, p.height = 1, p.mode = pixel_mode::P, p.px = {0, 1, 2, 3};
  p.palette = {{10, 0, 0, 255}, {20, 0, 0, 255}, {30, 0, 0, 255}, {40, 0, 0, 255}};
  const auto r = pillow_resize(p, 2, 1); // source x = floor((x + 0.5)·2) = 1, 3
  CHECK(r.px == std::vector<std::uint8_t>{1, 3});
  // Left half transparent red, right half opaque blue: after the downscale no output pixel
  // carries red (premultiplied: alpha 0 contributes nothing).
  image a;
  a.width = 8, a.height = 1, a.mode = pixel_mode::RGBA;
  for (int x = 0; x < 8; ++x) {
    const bool left = x < 4;
    a.px.insert(a.px.end(), {static_cast<std::uint8_t>(left ? 255 : 0), 0, static_cast<std::uint8_t>(left ? 0 : 255),
                             static_cast<std::uint8_t>(left ? 0 : 255)});
  }
  const auto ra = pillow_resize(a, 3, 1);
  for (int x = 0; x < 3; ++x) {
    INFO(x);
    CHECK(ra.px[static_cast<std::size_t>(4 * x)] == 0); // red
  }
}

TEST_CASE("vision: transparency is filled after the resize with the chessboard, blended in float32 and truncated", "[vision]") {
  image t;
  t.width = 16, t.height = 16, t.mode = pixel_mode::RGBA;
  t.px.assign(16 * 16 * 4, 0);
  auto rgb = to_rgb_filled(t);
  auto at = [&](int x, int y) { return rgb[static_cast<std::size_t>(y * 16 + x) * 3]; };
  CHECK(at(0, 0) == 255);
  CHECK(at(8, 0) == 180);
  CHECK(at(0, 8) == 180);
  CHECK(at(8, 8) == 255);
  CHECK(at(15, 7) == 180);
  // Black at alpha 128 over white: (1 − 128/255)·255 = 126.99999 in float32 → 126 (truncation).
  t.px[3] = 128;
  // Red 100 at alpha 51 over grey 180 (x = 8): 0.2·100 + 0.8·180 = 164.
  t.px[8 * 4 + 0] = 100, t.px[8 * 4 + 3] = 51;
  rgb = to_rgb_filled(t);
  CHECK(at(0, 0) == 126);
  CHECK(at(8, 0) == 164);
  // Opaque images are not composited (L replicated to RGB).
  const auto g = to_rgb_filled(gray(2, 1, {7, 200}));
  CHECK(g == std::vector<std::uint8_t>{7, 7, 7, 200, 200, 200});
}

TEST_CASE("vision: pad with black, normalise to [-1, 1] through bf16, patchify in (channel, row, col) order", "[vision]") {
  // 1×1 white pixel → padded to 28×28: grid 2×2 (one merged token); pixel (0,0) is +1, padding −1.
  image w;
  w.width = 1, w.height = 1, w.mode = pixel_mode::RGB, w.px = {255, 0, 128};
  const auto p = preprocess(w);
  REQUIRE(p.grid_h == 2);
  REQUIRE(p.grid_w == 2);
  REQUIRE(p.values.size() == 4u * 588);
  CHECK(p.values[0] == 1.0f);            // R, patch 0, (0,0)
  CHECK(p.values[196] == -1.0f);         // G channel of that pixel: 0 → −1
  CHECK(p.values[392] == round_bf16(static_cast<float>((static_cast<double>(static_cast<float>(128 / 255.0)) - 0.5) * 2.0)));
  CHECK(p.values[1] == -1.0f);           // padding
  for (std::size_t i = 588; i < p.values.size(); ++i) CHECK(p.values[i] == -1.0f);
  // Patch order: row-major over the grid; inside a patch [c][py][px].
  image g = gray(28, 28, std::vector<std::uint8_t>(28 * 28, 0));
  g.px[14 * 28 + 15] = 255; // row 14, col 15 → patch (1, 1), py 0, px 1
  const auto q = preprocess(g);
  CHECK(q.values[3 * 588 + 0 * 196 + 0 * 14 + 1] == 1.0f);
  CHECK(q.values[3 * 588 + 2 * 196 + 0 * 14 + 1] == 1.0f);
}

TEST_CASE("vision: decoders — PNG modes, 16-bit, palette + tRNS, JPEG grey/RGB/CMYK, WebP, GIF first frame", "[vision]") {
  SECTION("PNG RGB/RGBA/grey/grey+alpha keep their modes") {
    test::png_spec s{3, 2, 2, 8, {}, {}, {}};
    for (int i = 0; i < 18; ++i) s.rows.push_back(static_cast<std::uint8_t>(i * 10));
    auto im = decode(test::png_bytes(s));
    CHECK(im.mode == pixel_mode::RGB);
    CHECK(im.px == s.rows);
    test::png_spec a{2, 1, 6, 8, {1, 2, 3, 4, 5, 6, 7, 8}, {}, {}};
    CHECK(decode(test::png_bytes(a)).mode == pixel_mode::RGBA);
    test::png_spec la{2, 1, 4, 8, {9, 10, 11, 12}, {}, {}};
    auto lai = decode(test::png_bytes(la));
    CHECK(lai.mode == pixel_mode::LA);
    CHECK(lai.px == la.rows);
  }
  SECTION("16-bit: RGB keeps the high byte, grey clips at 255 (Pillow I;16 → L)") {
    test::png_spec s{2, 1, 2, 16, {0x12, 0x34, 0xab, 0xcd, 0xff, 0x00, 0x00, 0x01, 0x80, 0x80, 0x7f, 0xff}, {}, {}};
    auto im = decode(test::png_bytes(s));
    CHECK(im.px == std::vector<std::uint8_t>{0x12, 0xab, 0xff, 0x00, 0x80, 0x7f});
    test::png_spec g{3, 1, 0, 16, {0x00, 0xc8, 0x01, 0x2c, 0xff, 0xff}, {}, {}}; // 200, 300, 65535
    CHECK(decode(test::png_bytes(g)).px == std::vector<std::uint8_t>{200, 255, 255});
  }
  SECTION("palette with tRNS → P with palette alpha; fill composites it") {
    test::png_spec s{2, 1, 3, 8, {0, 1}, {{255, 0, 0}, {0, 0, 255}}, {0}};
    auto im = decode(test::png_bytes(s));
    REQUIRE(im.mode == pixel_mode::P);
    CHECK(im.palette[0][3] == 0);
    CHECK(im.palette[1][3] == 255);
    CHECK(im.has_transparency());
    CHECK(to_rgb_filled(im) == std::vector<std::uint8_t>{255, 255, 255, 0, 0, 255});
  }
  SECTION("1-bit grey expands to 0/255 and is bilevel; grey tRNS key becomes transparency") {
    test::png_spec s{8, 1, 0, 1, {0b10100000}, {}, {}};
    auto im = decode(test::png_bytes(s));
    CHECK(im.bilevel);
    CHECK(im.px == std::vector<std::uint8_t>{255, 0, 255, 0, 0, 0, 0, 0});
    test::png_spec k{2, 1, 0, 8, {5, 6}, {}, {0, 5}};
    auto ki = decode(test::png_bytes(k));
    REQUIRE(ki.color_key.has_value());
    CHECK(to_rgb_filled(ki)[0] == 255); // the keyed pixel shows the board
    CHECK(to_rgb_filled(ki)[3] == 6);
  }
  SECTION("JPEG grey, RGB and Adobe CMYK (Pillow's inverted CMYK → RGB)") {
    std::vector<std::uint8_t> rgb(16 * 16 * 3);
    for (std::size_t i = 0; i < rgb.size(); i += 3) rgb[i] = 200, rgb[i + 1] = 40, rgb[i + 2] = 90;
    auto im = decode(test::jpeg_bytes(16, 16, 3, rgb));
    REQUIRE(im.mode == pixel_mode::RGB);
    CHECK(std::abs(im.px[0] - 200) <= 3);
    CHECK(std::abs(im.px[1] - 40) <= 3);
    auto gi = decode(test::jpeg_bytes(8, 8, 1, std::vector<std::uint8_t>(64, 77)));
    CHECK(gi.mode == pixel_mode::L);
    CHECK(std::abs(gi.px[10] - 77) <= 2);
    // Stored (Adobe-inverted) C M Y K = 255 255 0 255 means ink C = M = 0, Y = 255, K = 0 →
    // pure yellow (255, 255, 0) after Pillow's cmyk2rgb.
    std::vector<std::uint8_t> cmyk;
    for (int i = 0; i < 64; ++i) cmyk.insert(cmyk.end(), {255, 255, 0, 255});
    auto ci = decode(test::jpeg_bytes(8, 8, 4, cmyk));
    REQUIRE(ci.mode == pixel_mode::RGB);
    CHECK(ci.px[0] >= 250);
    CHECK(ci.px[1] >= 250);
    CHECK(ci.px[2] <= 5);
  }
  SECTION("WebP lossless RGBA and RGB") {
    std::vector<std::uint8_t> px;
    for (int i = 0; i < 6; ++i) px.insert(px.end(), {static_cast<std::uint8_t>(i * 40), 7, 9, static_cast<std::uint8_t>(i * 50 + 5)});
    auto im = decode(test::webp_lossless(3, 2, 4, px));
    REQUIRE(im.mode == pixel_mode::RGBA);
    CHECK(im.px == px);
    std::vector<std::uint8_t> p3{1, 2, 3, 4, 5, 6};
    auto i3 = decode(test::webp_lossless(2, 1, 3, p3));
    CHECK(i3.mode == pixel_mode::RGB);
    CHECK(i3.px == p3);
  }
  SECTION("GIF: first frame placed on its screen, transparent index from the graphics control extension") {
    auto g = decode(test::gif_bytes(4, 2, 1, 0, 2, 1, {1, 2}, {{0, 0, 0}, {255, 0, 0}, {0, 255, 0}, {0, 0, 255}}, 3));
    REQUIRE(g.mode == pixel_mode::P);
    CHECK(g.width == 4);
    CHECK(g.px == std::vector<std::uint8_t>{3, 1, 2, 3, 3, 3, 3, 3});
    CHECK(g.palette[3][3] == 0);
    CHECK(g.palette[1] == std::array<std::uint8_t, 4>{255, 0, 0, 255});
  }
}

TEST_CASE("vision: refusals — unknown bytes, truncated data, decompression bombs before allocation", "[vision]") {
  auto status_of = [](const std::string& b, const decode_limits& lim = {}) {
    try {
      (void)decode_image(reinterpret_cast<const std::uint8_t*>(b.data()), b.size(), lim);
    } catch (const image_error& e) {
      return std::pair<int, std::string>{e.status, e.what()};
    }
    return std::pair<int, std::string>{200, ""};
  };
  auto [s1, m1] = status_of("hello, not an image");
  CHECK(s1 == 400);
  CHECK_THAT(m1, Catch::Contains("cannot identify"));
  auto [s2, m2] = status_of(test::png_header_only(100000, 100000));
  CHECK(s2 == 400);
  CHECK_THAT(m2, Catch::Contains("decompression-bomb"));
  test::png_spec s{4, 4, 2, 8, std::vector<std::uint8_t>(48, 1), {}, {}};
  const auto full = test::png_bytes(s);
  auto [s3, m3] = status_of(full.substr(0, full.size() / 2));
  CHECK(s3 == 400);
  CHECK_THAT(m3, Catch::Contains("png"));
  decode_limits small;
  small.max_pixels = 15;
  CHECK(status_of(full, small).first == 400);
  auto [s4, m4] = status_of(test::jpeg_bytes(8, 8, 3, std::vector<std::uint8_t>(192, 5)).substr(0, 20));
  CHECK(s4 == 400);
  CHECK(status_of("GIF89a").first == 400);
  // A GIF whose frame ends early: giflib reports an error code it has no message for (found by
  // the image fuzzer; the message lookup must not dereference NULL).
  const unsigned char gif[] = {0x47, 0x49, 0x46, 0x38, 0x39, 0x61, 0x04, 0x00, 0x0b, 0x00, 0xf0, 0x00, 0x00,
                               0x00, 0x00, 0x00, 0xc8, 0x00, 0x00, 0x21, 0xf9, 0x04, 0x01, 0x00, 0x00, 0x00,
                               0x00, 0x2c, 0x01, 0x82, 0x00, 0x01, 0x00, 0x02, 0x0a, 0x00, 0x00};
  CHECK(status_of(std::string(reinterpret_cast<const char*>(gif), sizeof gif)).first == 400);
  CHECK(status_of(std::string("RIFF\0\0\0\0WEBPVP8 ", 16)).first == 400);
}
