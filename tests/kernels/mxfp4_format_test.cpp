// MXFP4 numerics: bit-exact decode, OCP quantization, layouts and the classic traps.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "kernels/mxfp4/mxfp4_format.hpp"
#include "kernels/mxfp4/mxfp4_gemm.hpp"
#include "tests/support/test_util.hpp"

using namespace k3::mxfp4;

namespace {

std::uint32_t bits_of(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Independent E2M1 decode from the bit fields (sign, 2-bit exponent with bias 1, mantissa).
double e2m1_from_fields(int code) {
  const int s = (code >> 3) & 1, e = (code >> 1) & 3, m = code & 1;
  const double mag = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, e - 1);
  return s ? -mag : mag;
}

} // namespace

TEST_CASE("mxfp4: every E2M1 code x E8M0 scale decodes bit-exactly", "[mxfp4]") {
  int checked = 0;
  for (int e = 0; e < 256; ++e) {
    for (int c = 0; c < 16; ++c) {
      const float got = decode(static_cast<std::uint8_t>(c), static_cast<std::uint8_t>(e));
      if (e == 0xFF) {
        REQUIRE(std::isnan(got));
      } else {
        const float want = static_cast<float>(e2m1_from_fields(c) * std::ldexp(1.0, e - 127));
        INFO("code=" << c << " scale=" << e);
        REQUIRE(bits_of(got) == bits_of(want));
      }
      ++checked;
    }
  }
  CHECK(checked == 16 * 256);
  CHECK(bits_of(e8m0_decode(0)) == 0x00400000u); // 2^-127, not zero
  CHECK(bits_of(e8m0_decode(127)) == bits_of(1.0f));
  CHECK(bits_of(e8m0_decode(254)) == bits_of(std::ldexp(1.0f, 127)));
}

TEST_CASE("mxfp4: RNE thresholds onto E2M1 with saturation", "[mxfp4]") {
  struct tc {
    float in;
    int code;
  };
  const tc cases[] = {{0.0f, 0},    {0.25f, 0},  {0.2501f, 1}, {0.5f, 1},   {0.7499f, 1}, {0.75f, 2},
                      {1.25f, 2},   {1.2501f, 3}, {1.75f, 4},  {2.5f, 4},   {2.5001f, 5}, {3.4999f, 5},
                      {3.5f, 6},    {5.0f, 6},    {5.0001f, 7}, {6.0f, 7},  {100.0f, 7},  {-0.25f, 8},
                      {-0.75f, 10}, {-5.0f, 14},  {-7.0f, 15}};
  for (const auto& c : cases) {
    INFO("input " << c.in);
    CHECK(int(e2m1_encode_rne(c.in)) == c.code);
  }
}

TEST_CASE("mxfp4: OCP scale rule and clipping of 7*2^k", "[mxfp4]") {
  float x[32] = {};
  x[5] = 6.0f; // floor(log2 6) = 2 -> shared exp 0 -> E = 127
  CHECK(int(ocp_scale(x, 32)) == 127);
  x[5] = 7.0f * 8.0f; // 7·2^3: shared exp 3, 56/8 = 7 saturates to 6 -> 48
  std::uint8_t codes[32], s;
  quantize_block(x, codes, s);
  CHECK(int(s) == 130);
  CHECK(decode(codes[5], s) == 48.0f);
  std::memset(x, 0, sizeof x);
  quantize_block(x, codes, s);
  CHECK(int(s) == 0);
  x[3] = NAN;
  CHECK(ocp_scale(x, 32) == nan_scale);
  x[3] = INFINITY;
  CHECK(ocp_scale(x, 32) == nan_scale);
}

TEST_CASE("mxfp4: quantize -> dequantize error is bounded per element", "[mxfp4]") {
  const std::uint64_t seed = 1234;
  INFO("seed=" << seed);
  k3::test::rng r(seed);
  const std::int64_t rows = 7, cols = 96;
  auto w = r.normals(rows * cols, 3.0f);
  w[0] = 1e-3f; // a block with tiny values next to large ones
  const auto q = quantize_matrix(w.data(), rows, cols);
  std::vector<float> back(w.size());
  dequantize(q.packed.data(), q.scales.data(), rows, cols, back.data());
  for (std::int64_t i = 0; i < rows * cols; ++i) {
    const float X = e8m0_decode(q.scales[i / 32]);
    const double a = std::fabs(w[i]) / X, err = std::fabs(w[i] - back[i]) / X;
    const double bound = a <= 2 ? 0.25 : a <= 4 ? 0.5 : a <= 6 ? 1.0 : a - 6.0;
    INFO("i=" << i << " w=" << w[i] << " back=" << back[i]);
    REQUIRE(err <= bound + 1e-6);
  }
  CHECK(k3::test::rel_rmse(std::span<const float>(back), std::span<const float>(w)) < 0.2);
}

TEST_CASE("mxfp4: pack/unpack round trip and low nibble = even column", "[mxfp4]") {
  k3::test::rng r(77);
  const std::int64_t rows = 5, cols = 64;
  std::vector<std::uint8_t> codes(rows * cols), back(rows * cols), packed(rows * cols / 2);
  for (auto& c : codes) c = static_cast<std::uint8_t>(r.below(16));
  pack_codes(codes.data(), rows, cols, packed.data());
  unpack_codes(packed.data(), rows, cols, back.data());
  CHECK(codes == back);
  CHECK(int(packed[0] & 0xF) == codes[0]);
  CHECK(int(packed[0] >> 4) == codes[1]);
  CHECK_THROWS_AS(pack_codes(codes.data(), 1, 3, packed.data()), std::invalid_argument);
}

TEST_CASE("mxfp4: swapped nibbles change the GEMV result (trap T4)", "[mxfp4]") {
  // Column 0 = +6 (code 7), column 1 = -0.5 (code 9): the byte is 0x97.
  std::vector<std::uint8_t> packed(16, 0), scales(1, 127);
  packed[0] = 0x97;
  std::vector<float> deq(32);
  dequantize(packed.data(), scales.data(), 1, 32, deq.data());
  CHECK(deq[0] == 6.0f);
  CHECK(deq[1] == -0.5f);
  std::vector<float> x(32, 0.0f);
  x[0] = 1.0f;
  float y = 0;
  gemm(x.data(), 32, 1, {packed.data(), scales.data(), 1, 32}, &y, 1);
  CHECK(y == 6.0f); // swapped order would give -0.5
}

TEST_CASE("mxfp4: every 32-group uses its own scale (trap T5)", "[mxfp4]") {
  const std::int64_t cols = 96;
  std::vector<std::uint8_t> packed(cols / 2, 0x22), scales = {126, 128, 131}; // all codes 1.0
  for (int b = 0; b < 3; ++b) {
    std::vector<float> x(cols, 0.0f);
    for (int j = 0; j < 32; ++j) x[b * 32 + j] = 1.0f;
    float y = 0;
    gemm(x.data(), cols, 1, {packed.data(), scales.data(), 1, cols}, &y, 1);
    INFO("block " << b);
    CHECK(y == 32.0f * std::ldexp(1.0f, scales[b] - 127));
  }
}

TEST_CASE("mxfp4: bf16 dequantization is the exact upper half of fp32", "[mxfp4]") {
  k3::test::rng r(9);
  const std::int64_t rows = 3, cols = 64;
  std::vector<std::uint8_t> packed(rows * cols / 2), scales(rows * cols / 32);
  for (auto& b : packed) b = static_cast<std::uint8_t>(r.bits());
  for (auto& s : scales) s = static_cast<std::uint8_t>(110 + r.below(30));
  std::vector<float> f(rows * cols);
  std::vector<std::uint16_t> h(rows * cols);
  dequantize(packed.data(), scales.data(), rows, cols, f.data());
  dequantize_bf16(packed.data(), scales.data(), rows, cols, h.data());
  for (std::size_t i = 0; i < f.size(); ++i) {
    REQUIRE((bits_of(f[i]) & 0xFFFFu) == 0u);
    REQUIRE(h[i] == bits_of(f[i]) >> 16);
  }
}

TEST_CASE("mxfp4: NaN scale detection for the loader", "[mxfp4]") {
  std::vector<std::uint8_t> s = {127, 3, 0xFF, 9};
  CHECK(find_nan_scale(s) == 2);
  s[2] = 0;
  CHECK(find_nan_scale(s) == -1);
}

TEST_CASE("mxfp4: gpt-oss gate_up interleave splits into w1/w3 and joins back", "[mxfp4]") {
  k3::test::rng r(5);
  const std::int64_t inter = 3, cols = 64, experts = 2;
  std::vector<std::uint8_t> blocks(experts * 2 * inter * cols / 2), scales(experts * 2 * inter * cols / 32);
  for (auto& b : blocks) b = static_cast<std::uint8_t>(r.bits());
  for (auto& s : scales) s = static_cast<std::uint8_t>(100 + r.below(50));
  const auto off = gptoss_expert_offsets(2 * inter, cols, 1);
  CHECK(off.blocks == 2 * inter * cols / 2);
  CHECK(off.scales == 2 * inter * cols / 32);
  packed_matrix gate, up;
  gptoss_split_gate_up(blocks.data() + off.blocks, scales.data() + off.scales, inter, cols, gate, up);
  // Row 1 of `up` is interleaved row 3 of expert 1.
  CHECK(std::memcmp(up.packed.data() + cols / 2, blocks.data() + off.blocks + 3 * cols / 2, cols / 2) == 0);
  CHECK(gate.scales[2 * 2 + 1] == scales[off.scales + 4 * 2 + 1]);
  std::vector<std::uint8_t> b2(2 * inter * cols / 2), s2(2 * inter * cols / 32);
  gptoss_join_gate_up(gate, up, b2.data(), s2.data());
  CHECK(std::memcmp(b2.data(), blocks.data() + off.blocks, b2.size()) == 0);
  CHECK(std::memcmp(s2.data(), scales.data() + off.scales, s2.size()) == 0);
}
