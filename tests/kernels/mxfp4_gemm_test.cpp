// MXFP4 GEMM / grouped GEMM vs the fp64 dequantize-then-multiply reference, on every SIMD
// path the CPU offers, over odd shapes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include <omp.h>

#include "kernels/common/bf16.hpp"
#include "kernels/common/cpu_features.hpp"
#include "kernels/mxfp4/mxfp4_gemm.hpp"
#include "kernels/mxfp4/mxfp4_q8.hpp"
#include "kernels/mxfp4/mxfp4_ref.hpp"
#include "tests/support/mxfp4_test_util.hpp"
#include "tests/support/test_util.hpp"

using namespace k3;
using namespace k3::mxfp4;

namespace {

// |got - ref| ≤ 1e-5 · Σ|x·w| per output: an order-independent bound for fp32 summation.
void check_against_ref(const std::vector<float>& x, std::int64_t ldx, std::int64_t m, const packed_matrix& w,
                       const std::vector<float>& y, std::int64_t ldy) {
  const auto ref = gemm_ref(x.data(), ldx, m, matrix_view::of(w));
  std::vector<float> deq(w.rows * w.cols);
  dequantize(w.packed.data(), w.scales.data(), w.rows, w.cols, deq.data());
  for (std::int64_t t = 0; t < m; ++t)
    for (std::int64_t r = 0; r < w.rows; ++r) {
      double mag = 0;
      for (std::int64_t k = 0; k < w.cols; ++k) mag += std::fabs(x[t * ldx + k] * deq[r * w.cols + k]);
      const double err = std::fabs(y[t * ldy + r] - ref[t * w.rows + r]);
      INFO("token " << t << " row " << r << " got " << y[t * ldy + r] << " ref " << ref[t * w.rows + r]);
      REQUIRE(err <= 1e-5 * mag + 1e-30);
    }
}


} // namespace

TEST_CASE("mxfp4 gemm: all paths match the fp64 reference over odd shapes", "[mxfp4][gemm]") {
  const std::uint64_t seed = 20261202;
  INFO("seed=" << seed);
  test::rng r(seed);
  const std::int64_t rows_set[] = {1, 7, 33, 127};
  const std::int64_t cols_set[] = {32, 96, 160, 544};
  const std::int64_t m_set[] = {1, 2, 3, 5, 8, 9, 16, 17, 33, 64};
  for (isa path : test::isa_paths()) {
    scoped_isa pin(path);
    INFO("isa=" << to_string(path));
    for (auto rows : rows_set)
      for (auto cols : cols_set) {
        const auto w = test::random_mxfp4(r, rows, cols);
        for (auto m : m_set) {
          if (rows * cols * m > 127 * 544 * 17 && m > 17) continue; // keep the suite fast
          INFO("rows=" << rows << " cols=" << cols << " m=" << m);
          const std::int64_t ldx = cols + 3, ldy = rows + 5; // strides wider than the data
          auto x = r.normals(m * ldx);
          std::vector<float> y(m * ldy, NAN);
          gemm(x.data(), ldx, m, matrix_view::of(w), y.data(), ldy);
          check_against_ref(x, ldx, m, w, y, ldy);
        }
      }
  }
}

TEST_CASE("mxfp4 gemm: SIMD paths agree with the scalar path", "[mxfp4][gemm]") {
  test::rng r(42);
  const auto w = test::random_mxfp4(r, 61, 3584 / 4);
  for (std::int64_t m : {1, 4, 16}) {
    auto x = r.normals(m * w.cols);
    std::vector<float> ys(m * w.rows), yv(m * w.rows);
    {
      scoped_isa pin(isa::scalar);
      gemm(x.data(), w.cols, m, matrix_view::of(w), ys.data(), w.rows);
    }
    for (isa path : test::isa_paths()) {
      scoped_isa pin(path);
      gemm(x.data(), w.cols, m, matrix_view::of(w), yv.data(), w.rows);
      INFO("isa=" << to_string(path) << " m=" << m);
      CHECK(test::rel_rmse(std::span<const float>(yv), std::span<const float>(ys)) < 1e-6);
    }
  }
}

TEST_CASE("mxfp4 gemm: NaN scale poisons exactly its row", "[mxfp4][gemm]") {
  test::rng r(3);
  auto w = test::random_mxfp4(r, 9, 64);
  w.scales[2 * 2 + 1] = nan_scale; // row 2, second block
  auto x = r.normals(16 * 64);
  for (isa path : test::isa_paths())
    for (std::int64_t m : {1, 16}) { // one token, and a batch (tokens in lanes on AVX-512)
      scoped_isa pin(path);
      INFO("isa=" << to_string(path) << " m=" << m);
      std::vector<float> y(m * 9);
      gemm(x.data(), 64, m, matrix_view::of(w), y.data(), 9);
      for (std::int64_t t = 0; t < m; ++t)
        for (int i = 0; i < 9; ++i) CHECK(std::isnan(y[t * 9 + i]) == (i == 2));
    }
}

TEST_CASE("mxfp4 gemm: every finite scale byte scales exactly as the format defines", "[mxfp4][gemm]") {
  // Row e has scale byte e (0 … 254, 2^-127 subnormal included) and one nonzero weight, 0.5 in the first column of one block, so each path's result is the exact product
  // 3 · 0.5 · 2^(e−127) (the SIMD paths decode scales through their own tables). Three blocks
  // per row, the weight in block e mod 3: a two-block step's lower and upper half and a last
  // block alone on the AVX2 one-token path.
  packed_matrix w;
  w.rows = 255;
  w.cols = 96;
  w.packed.assign(static_cast<std::size_t>(w.rows * w.cols / 2), 0);
  w.scales.resize(static_cast<std::size_t>(w.rows * 3));
  for (std::int64_t e = 0; e < w.rows; ++e) {
    w.packed[static_cast<std::size_t>(e * w.cols / 2 + (e % 3) * 16)] = 0x01; // E2M1 code 1 = 0.5
    for (int b = 0; b < 3; ++b) // the other blocks get another (finite) scale: a mixed-up scale shows
      w.scales[static_cast<std::size_t>(e * 3 + b)] = static_cast<std::uint8_t>(b == e % 3 ? e : (e + 100) % 255);
  }
  for (isa path : test::isa_paths())
    for (std::int64_t m : {1, 16}) {
      scoped_isa pin(path);
      std::vector<float> x(static_cast<std::size_t>(m * w.cols), 0.0f), y(static_cast<std::size_t>(m * w.rows), NAN);
      for (std::int64_t t = 0; t < m; ++t)
        for (int b = 0; b < 3; ++b) x[static_cast<std::size_t>(t * w.cols + 32 * b)] = 3.0f;
      gemm(x.data(), w.cols, m, matrix_view::of(w), y.data(), w.rows);
      for (std::int64_t t = 0; t < m; ++t)
        for (std::int64_t e = 0; e < w.rows; ++e) {
          INFO("isa=" << to_string(path) << " m=" << m << " scale byte " << e);
          REQUIRE(y[static_cast<std::size_t>(t * w.rows + e)] == 3.0f * decode(1, static_cast<std::uint8_t>(e)));
        }
    }
}

TEST_CASE("mxfp4 gemm: in a batch, a token's result does not depend on the other tokens", "[mxfp4][gemm]") {
  // Batches of 7+ tokens run with the tokens in the lanes of one tile (AVX-512); every lane
  // sums its own products in one order, so a token gives the same bits in a tile of 9 as in a
  // tile of 16 or of 32 (two vectors) with different neighbours, over row tails (16 + 8 + 4 +
  // 2 + 1; 12 + 12 + 4 + 2 + 1) and column chunks (8 + 8 + 3 blocks). The scalar path has the
  // same property; AVX2 is checked to 1e-6.
  const std::uint64_t seed = 7;
  INFO("seed=" << seed);
  test::rng r(seed);
  const auto w = test::random_mxfp4(r, 16 + 8 + 4 + 2 + 1, 19 * 32);
  auto x16 = r.normals(16 * w.cols);
  auto x9 = r.normals(9 * w.cols);
  auto x30 = r.normals(30 * w.cols);
  std::copy(x16.begin(), x16.begin() + 5 * w.cols, x9.begin()); // tokens 0..4 shared, the rest differ
  std::copy(x16.begin(), x16.begin() + 5 * w.cols, x30.begin());
  for (isa path : test::isa_paths()) {
    scoped_isa pin(path);
    INFO("isa=" << to_string(path));
    std::vector<float> y16(16 * w.rows), y9(9 * w.rows), y30(30 * w.rows);
    gemm(x16.data(), w.cols, 16, matrix_view::of(w), y16.data(), w.rows);
    gemm(x9.data(), w.cols, 9, matrix_view::of(w), y9.data(), w.rows);
    gemm(x30.data(), w.cols, 30, matrix_view::of(w), y30.data(), w.rows);
    for (std::int64_t t = 0; t < 5; ++t)
      for (std::int64_t q = 0; q < w.rows; ++q) {
        INFO("token " << t << " row " << q);
        const float want = y16[t * w.rows + q];
        if (path == isa::avx2) {
          CHECK(std::fabs(y9[t * w.rows + q] - want) <= 1e-6 * (1 + std::fabs(want)));
          CHECK(std::fabs(y30[t * w.rows + q] - want) <= 1e-6 * (1 + std::fabs(want)));
        } else {
          REQUIRE(y9[t * w.rows + q] == want);
          REQUIRE(y30[t * w.rows + q] == want);
        }
      }
    check_against_ref(x16, w.cols, 16, w, y16, w.rows);
    check_against_ref(x30, w.cols, 30, w, y30, w.rows);
  }
}

TEST_CASE("mxfp4 gemm: shape errors are reported, not crashed on", "[mxfp4][gemm]") {
  std::vector<std::uint8_t> p(64), s(4);
  std::vector<float> x(100), y(4);
  CHECK_THROWS_AS(gemm(x.data(), 33, 1, {p.data(), s.data(), 2, 33}, y.data(), 2), std::invalid_argument);
  CHECK_THROWS_AS(gemm(x.data(), 16, 1, {p.data(), s.data(), 2, 32}, y.data(), 2), std::invalid_argument);
}

TEST_CASE("mxfp4 grouped gemm equals per-expert gemm", "[mxfp4][gemm]") {
  const std::uint64_t seed = 99;
  INFO("seed=" << seed);
  test::rng r(seed);
  const std::int64_t rows = 40, cols = 128;
  std::vector<packed_matrix> experts;
  for (int e = 0; e < 5; ++e) experts.push_back(test::random_mxfp4(r, rows, cols));
  // Segment sizes with an empty expert and a hot one.
  const std::int64_t sizes[] = {3, 0, 17, 1, 9};
  std::vector<expert_segment> segs;
  std::int64_t total = 0;
  for (int e = 0; e < 5; ++e) {
    segs.push_back({matrix_view::of(experts[e]), total, total + sizes[e]});
    total += sizes[e];
  }
  auto x = r.normals(total * cols);
  // Bit for bit on the per-token kernels (AMX off; its tiles sum in another order and have
  // their own tests below).
  const bool prev_amx = set_amx_override(false);
  for (isa path : test::isa_paths()) {
    scoped_isa pin(path);
    std::vector<float> y(total * rows, NAN), want(total * rows, NAN);
    grouped_gemm(x.data(), cols, segs, y.data(), rows);
    for (const auto& s : segs)
      gemm_rows(x.data() + s.begin * cols, cols, s.end - s.begin, s.w, 0, rows, want.data() + s.begin * rows, rows);
    INFO("isa=" << to_string(path));
    CHECK(y == want);
  }
  set_amx_override(prev_amx);
}

TEST_CASE("mxfp4 grouped gemm, decode-sized: thread runs across many experts give each segment its own call's bits", "[mxfp4][gemm]") {
  // Every segment ≤ 6 tokens takes the chained route (one contiguous run of rows per thread,
  // prefetch handed on to the next expert): row counts that are not multiples of 4, empty
  // experts, 1-6 tokens, 1-4 threads; fp32 and bf16 activations on every ISA path. With int8
  // activations segments of 1-4 tokens (below q8_min_tokens: the few-token VNNI kernel, chained
  // the same way; on AVX2 its integer kernel, chained too; elsewhere the fp32 kernel on rounded
  // values).
  const std::uint64_t seed = 7;
  INFO("seed=" << seed);
  test::rng r(seed);
  const std::int64_t cols = 128;
  std::vector<packed_matrix> experts;
  std::int64_t max_rows = 0;
  for (int e = 0; e < 37; ++e) {
    const std::int64_t rows = e % 3 == 0 ? 22 : e % 3 == 1 ? 40 : 13;
    experts.push_back(test::random_mxfp4(r, rows, cols));
    max_rows = std::max(max_rows, rows);
  }
  auto x = r.normals(37 * 6 * cols);
  const bool prev_amx = set_amx_override(false);
  const int threads = omp_get_max_threads();
  for (isa path : test::isa_paths())
    for (const activations a : {activations::fp32, activations::bf16, activations::int8}) {
      const std::int64_t most = a == activations::int8 ? q8_min_tokens - 1 : 6;
      std::vector<expert_segment> segs;
      std::int64_t total = 0;
      for (int e = 0; e < 37; ++e) {
        const std::int64_t n = e % 7 == 3 ? 0 : 1 + (e * 5) % most;
        segs.push_back({matrix_view::of(experts[static_cast<std::size_t>(e)]), total, total + n});
        total += n;
      }
      scoped_isa pin(path);
      std::vector<float> want(total * max_rows, NAN);
      for (const auto& s : segs)
        if (s.end > s.begin) gemm(x.data() + s.begin * cols, cols, s.end - s.begin, s.w, want.data() + s.begin * max_rows, max_rows, a);
      for (const int nt : {1, 2, 3, 4}) {
        omp_set_num_threads(nt);
        std::vector<float> y(total * max_rows, NAN);
        grouped_gemm(x.data(), cols, segs, y.data(), max_rows, a);
        INFO("isa=" << to_string(path) << " activations=" << static_cast<int>(a) << " threads=" << nt);
        for (const auto& s : segs)
          for (std::int64_t t = s.begin; t < s.end; ++t)
            for (std::int64_t row = 0; row < s.w.rows; ++row) {
              INFO("token " << t << " row " << row);
              REQUIRE(std::memcmp(&y[t * max_rows + row], &want[t * max_rows + row], sizeof(float)) == 0);
            }
      }
      omp_set_num_threads(threads);
    }
  set_amx_override(prev_amx);
}

TEST_CASE("mxfp4 grouped gemm on AMX tiles matches fp64 (fp32 and bf16 activations, token and row tails)", "[mxfp4][gemm]") {
  if (!amx_bf16_available()) {
    WARN("no AMX on this CPU: the tile path is not exercised");
    return;
  }
  test::rng r(20261205);
  for (std::int64_t cols : {32, 96, 544})
    for (std::int64_t rows : {8, 40, 100}) {
      std::vector<packed_matrix> experts;
      for (int e = 0; e < 6; ++e) experts.push_back(test::random_mxfp4(r, rows, cols));
      // Decode-sized segments (other kernels), tails of the 16-token bands, two and more bands.
      const std::int64_t sizes[] = {8, 3, 17, 33, 70, 16};
      std::vector<expert_segment> segs;
      std::int64_t total = 0;
      for (int e = 0; e < 6; ++e) {
        segs.push_back({matrix_view::of(experts[e]), total, total + sizes[e]});
        total += sizes[e];
      }
      const std::int64_t ldx = cols + 4, ldy = rows + 3;
      auto x = r.normals(total * ldx);
      for (auto act : {activations::fp32, activations::bf16}) {
        INFO("cols=" << cols << " rows=" << rows << " act=" << (act == activations::bf16 ? "bf16" : "fp32"));
        std::vector<float> y(total * ldy, NAN);
        grouped_gemm(x.data(), ldx, segs, y.data(), ldy, act);
        auto xr = x;
        if (act == activations::bf16)
          for (auto& v : xr) v = round_bf16(v);
        for (int e = 0; e < 6; ++e) {
          INFO("expert " << e << " tokens " << sizes[e]);
          const std::vector<float> xe(xr.begin() + segs[e].begin * ldx, xr.begin() + segs[e].end * ldx);
          const std::vector<float> ye(y.begin() + segs[e].begin * ldy, y.begin() + segs[e].end * ldy);
          check_against_ref(xe, ldx, sizes[e], experts[e], ye, ldy);
          // Columns past the expert's rows stay untouched.
          for (std::int64_t t = 0; t < sizes[e]; ++t) REQUIRE(std::isnan(ye[t * ldy + rows]));
        }
      }
    }
}

TEST_CASE("mxfp4 AMX decode is exact for every code and scale it accepts, and refuses the others", "[mxfp4][gemm]") {
  if (!amx_bf16_available()) {
    WARN("no AMX on this CPU: the tile path is not exercised");
    return;
  }
  // One-hot tokens read single weights back: y[t, r] = W[r, t] exactly. 32 rows × 64 columns
  // hold every code in every position class, with scales 2..252 spread over the blocks.
  const std::int64_t rows = 48, cols = 64;
  packed_matrix w;
  w.rows = rows;
  w.cols = cols;
  w.packed.resize(rows * cols / 2);
  w.scales.resize(rows * cols / 32);
  for (std::size_t i = 0; i < w.packed.size(); ++i) w.packed[i] = static_cast<std::uint8_t>((i * 37 + i / 7) & 0xff);
  for (std::size_t i = 0; i < w.scales.size(); ++i) w.scales[i] = static_cast<std::uint8_t>(2 + (i * 53) % 251);
  w.scales[0] = 2;
  w.scales[1] = 252;
  const std::int64_t tokens = cols;
  std::vector<float> x(tokens * cols, 0.0f);
  for (std::int64_t t = 0; t < tokens; ++t) x[t * cols + t] = 1.0f;
  std::vector<float> deq(rows * cols);
  dequantize(w.packed.data(), w.scales.data(), rows, cols, deq.data());
  REQUIRE(detail::amx_scales_ok(matrix_view::of(w), 0, rows));
  for (auto act : {activations::fp32, activations::bf16}) {
    const expert_segment seg{matrix_view::of(w), 0, tokens};
    std::vector<float> y(tokens * rows, NAN);
    grouped_gemm(x.data(), cols, std::span<const expert_segment>(&seg, 1), y.data(), rows, act);
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t r = 0; r < rows; ++r) {
        INFO("row " << r << " column " << t << " scale byte " << int(w.scales[r * 2 + t / 32]));
        REQUIRE(y[t * rows + r] == deq[r * cols + t]);
      }
  }
  // Scales outside 2..252 (subnormal results, fp32 overflow to inf, the NaN code) send their
  // rows to the fp32 kernel: the same bits as with AMX off (a weight of inf or NaN makes its
  // whole row NaN for one-hot tokens, 0 · inf), the other rows still exact.
  for (std::uint8_t bad : {std::uint8_t{0}, std::uint8_t{1}, std::uint8_t{253}, std::uint8_t{255}}) {
    packed_matrix wb = w;
    wb.scales[5] = bad; // row 2, block 1
    REQUIRE(!detail::amx_scales_ok(matrix_view::of(wb), 0, rows));
    REQUIRE(detail::amx_scales_ok(matrix_view::of(wb), 16, rows));
    dequantize(wb.packed.data(), wb.scales.data(), rows, cols, deq.data());
    const expert_segment seg{matrix_view::of(wb), 0, tokens};
    std::vector<float> y(tokens * rows, NAN), y_off(tokens * rows, NAN);
    grouped_gemm(x.data(), cols, std::span<const expert_segment>(&seg, 1), y.data(), rows);
    const bool prev = set_amx_override(false);
    grouped_gemm(x.data(), cols, std::span<const expert_segment>(&seg, 1), y_off.data(), rows);
    set_amx_override(prev);
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t r = 0; r < rows; ++r) {
        INFO("scale " << int(bad) << " row " << r << " column " << t);
        const float got = y[t * rows + r], off = y_off[t * rows + r];
        REQUIRE((got == off || (std::isnan(got) && std::isnan(off))));
        if (r >= 16) REQUIRE(got == deq[r * cols + t]);
      }
    if (bad == 255) REQUIRE(std::isnan(y[0 * rows + 2]));
  }
}

TEST_CASE("mxfp4 gemm, bf16 activations: every scale byte scales as the format defines", "[mxfp4][gemm]") {
  // Row e has scale byte e (0 … 255) on block e mod nb, holding one nonzero weight (0.5, in the
  // block's first column) against an activation of 3 (exact in bf16), so the result is exactly
  // 1.5 · 2^(e−127); the other blocks carry other (finite) scales, so a mixed-up scale shows.
  // The vdpbf16ps kernel decodes each block through the table of its scale byte (two blocks per
  // 64-column span); vdpbf16ps reads bf16 denormals as zero, so there e = 0 and 1 (weights
  // 2^-128, 2^-127) may give 0. The other ISA paths multiply the rounded activations in fp32
  // and must be exact for every byte. Two widths: 2 spans and 17 spans; 1, 3 and 16 tokens.
  if (!bf16_dot_available()) WARN("no AVX512-BF16 on this CPU: only the rounded-fp32 fallbacks are exercised");
  for (isa path : test::isa_paths()) {
    scoped_isa pin(path);
    const bool dot = bf16_dot_available();
    for (const std::int64_t cols : {128, 1088}) {
      const std::int64_t nb = cols / 32;
      packed_matrix w;
      w.rows = 256;
      w.cols = cols;
      w.packed.assign(static_cast<std::size_t>(w.rows * cols / 2), 0);
      w.scales.resize(static_cast<std::size_t>(w.rows * nb));
      for (std::int64_t e = 0; e < w.rows; ++e) {
        w.packed[static_cast<std::size_t>(e * cols / 2 + (e % nb) * 16)] = 0x01; // E2M1 code 1 = 0.5
        for (std::int64_t b = 0; b < nb; ++b)
          w.scales[static_cast<std::size_t>(e * nb + b)] = static_cast<std::uint8_t>(b == e % nb ? e : 30 + (e + 7 * b) % 200);
      }
      for (const std::int64_t m : {1, 3, 16}) {
        std::vector<float> x(static_cast<std::size_t>(m * cols), 0.0f), y(static_cast<std::size_t>(m * w.rows), -1.0f);
        for (std::int64_t t = 0; t < m; ++t)
          for (std::int64_t b = 0; b < nb; ++b) x[static_cast<std::size_t>(t * cols + 32 * b)] = 3.0f;
        gemm(x.data(), cols, m, matrix_view::of(w), y.data(), w.rows, activations::bf16);
        for (std::int64_t t = 0; t < m; ++t)
          for (std::int64_t e = 0; e < w.rows; ++e) {
            INFO("isa=" << to_string(path) << " cols=" << cols << " m=" << m << " token " << t << " scale byte " << e);
            const float got = y[static_cast<std::size_t>(t * w.rows + e)];
            const float want = 3.0f * decode(1, static_cast<std::uint8_t>(e));
            if (e == 255) REQUIRE(std::isnan(got));
            else if (dot && e < 2) REQUIRE((got == want || got == 0.0f));
            else REQUIRE(got == want);
          }
      }
    }
  }
}

TEST_CASE("mxfp4 gemm, bf16 activations: each activation is rounded to bf16 exactly as f32_to_bf16", "[mxfp4][gemm]") {
  // Row r holds one weight, 1.0 (E2M1 code 2, scale byte 127), in column r, so y[t][r] is the
  // token's activation r as the kernel rounded it, bit for bit. The activations are the
  // rounding's hard cases: ties to even both ways and both signs, all-ones low halves, values
  // that carry into the exponent, ±0, the smallest normals, and denormals (which vdpbf16ps
  // reads as zero, so there 0 is also accepted on the dot path). A NaN activation must come
  // out NaN, not as the infinity its bits would round to.
  const std::vector<std::uint32_t> hard = {
      0x3f808000u, 0x3f818000u, 0xbf808000u, 0xbf818000u, 0x3f80ffffu, 0x3f7fffffu, 0x407fffffu, 0xc07f8001u,
      0x00000000u, 0x80000000u, 0x00800000u, 0x80808000u, 0x00018000u, 0x807fffffu, 0x4b7f8000u, 0x7f7f7fffu,
      0x3eaaaaabu, 0x42f6e979u, 0xc2f6e979u, 0x3dcccccdu, 0x01010101u, 0x7e800000u, 0x3f800001u, 0x3f807fffu};
  for (isa path : test::isa_paths()) {
    scoped_isa pin(path);
    const bool dot = bf16_dot_available();
    const std::int64_t cols = 128, rows = 128, nb = cols / 32;
    packed_matrix w;
    w.rows = rows;
    w.cols = cols;
    w.packed.assign(static_cast<std::size_t>(rows * cols / 2), 0);
    w.scales.assign(static_cast<std::size_t>(rows * nb), 127);
    for (std::int64_t r = 0; r < rows; ++r)
      w.packed[static_cast<std::size_t>(r * cols / 2 + r / 2)] = static_cast<std::uint8_t>(r % 2 ? 0x20 : 0x02);
    test::rng g(1207);
    for (const std::int64_t m : {1, 3, 16, 19}) {
      std::vector<float> x(static_cast<std::size_t>(m * cols)), y(static_cast<std::size_t>(m * rows), -1.0f);
      for (std::size_t i = 0; i < x.size(); ++i) {
        const std::uint32_t bits = (i + static_cast<std::size_t>(m)) % 3 ? hard[(i * 7 + static_cast<std::size_t>(m)) % hard.size()]
                                                                     : std::bit_cast<std::uint32_t>(static_cast<float>(g.normal()));
        x[i] = std::bit_cast<float>(bits);
      }
      gemm(x.data(), cols, m, matrix_view::of(w), y.data(), rows, activations::bf16);
      for (std::int64_t t = 0; t < m; ++t)
        for (std::int64_t r = 0; r < rows; ++r) {
          const float in = x[static_cast<std::size_t>(t * cols + r)];
          const float want = round_bf16(in), got = y[static_cast<std::size_t>(t * rows + r)];
          INFO("isa=" << to_string(path) << " m=" << m << " token " << t << " row " << r << " input bits " << std::hex
                      << std::bit_cast<std::uint32_t>(in));
          if (dot && std::fpclassify(want) == FP_SUBNORMAL) REQUIRE((got == want || got == 0.0f));
          else REQUIRE(std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want));
        }
    }
    // A NaN activation, one per call: its own row must be NaN. Rounded by the bits alone,
    // 0x7fffffff would carry into -0 (row 0) and 0x7f800001 would become +inf (row inf).
    for (const std::uint32_t nan_bits : {0x7fffffffu, 0x7f800001u, 0xffc00001u}) {
      std::vector<float> xn(static_cast<std::size_t>(cols), 1.0f), yn(static_cast<std::size_t>(rows), 0.0f);
      xn[69] = std::bit_cast<float>(nan_bits);
      gemm(xn.data(), cols, 1, matrix_view::of(w), yn.data(), rows, activations::bf16);
      INFO("isa=" << to_string(path) << " NaN bits " << std::hex << nan_bits);
      REQUIRE(std::isnan(yn[69]));
    }
  }
}

TEST_CASE("mxfp4 gemm: bf16 activations equal the fp64 reference of the rounded activations, alone = batched", "[mxfp4][gemm]") {
  // bf16 activations: rounded to bf16 once, products summed in fp32. With
  // AVX512-BF16 (and cols % 64 == 0) the vdpbf16ps kernel runs for every m; otherwise the fp32
  // kernel multiplies the rounded values — bit for bit what activations::fp32 gives on
  // pre-rounded input.
  if (!bf16_dot_available()) WARN("no AVX512-BF16 on this CPU: only the rounded-fp32 fallback is exercised");
  test::rng r(20261203);
  for (const std::int64_t rows : {1, 5, 33, 130})
    for (const std::int64_t cols : {64, 96, 192, 576})
      for (const std::int64_t m : {1, 2, 3, 4, 7, 8, 13, 16, 17, 35}) {
        INFO("rows=" << rows << " cols=" << cols << " m=" << m);
        const auto w = test::random_mxfp4(r, rows, cols);
        const std::int64_t ldx = cols + 5, ldy = rows + 3;
        auto x = r.normals(m * ldx);
        std::vector<float> y(m * ldy, NAN);
        gemm(x.data(), ldx, m, matrix_view::of(w), y.data(), ldy, activations::bf16);
        auto xr = x; // what the kernel multiplies: activations rounded to bf16
        for (auto& v : xr) v = round_bf16(v);
        check_against_ref(xr, ldx, m, w, y, ldy);
        if (cols % 64 != 0 || !bf16_dot_available()) {
          std::vector<float> f(m * ldy, NAN);
          gemm(xr.data(), ldx, m, matrix_view::of(w), f.data(), ldy, activations::fp32);
          for (std::int64_t t = 0; t < m; ++t)
            for (std::int64_t q = 0; q < rows; ++q) REQUIRE(f[t * ldy + q] == y[t * ldy + q]);
        }
        // A token alone gets the same result: bit for bit from the vdpbf16ps kernel (same kernel,
        // same per-token order for every m); the fallbacks within fp32 summation order.
        std::vector<float> deq(rows * cols);
        dequantize(w.packed.data(), w.scales.data(), rows, cols, deq.data());
        for (std::int64_t t = 0; t < m; t += 5) {
          std::vector<float> one(rows, NAN);
          gemm(x.data() + t * ldx, ldx, 1, matrix_view::of(w), one.data(), rows, activations::bf16);
          for (std::int64_t q = 0; q < rows; ++q) {
            if (cols % 64 == 0 && bf16_dot_available()) {
              REQUIRE(one[q] == y[t * ldy + q]);
              continue;
            }
            double mag = 0;
            for (std::int64_t i = 0; i < cols; ++i) mag += std::fabs(static_cast<double>(xr[t * ldx + i]) * deq[q * cols + i]);
            REQUIRE(std::fabs(one[q] - y[t * ldy + q]) <= 1e-5 * mag + 1e-30);
          }
        }
      }
}
