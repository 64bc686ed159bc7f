// int8 activations for MXFP4 matmuls (activations::int8): the rounding rule, the scalar
// reference against fp64, the AVX512-VNNI and AVX2 few-token kernels bit for bit against the
// reference over odd shapes, the fallbacks, batch independence and NaN confinement.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/common/cpu_features.hpp"
#include "kernels/mxfp4/mxfp4_gemm.hpp"
#include "kernels/mxfp4/mxfp4_q8.hpp"
#include "kernels/mxfp4/mxfp4_ref.hpp"
#include "tests/support/mxfp4_test_util.hpp"
#include "tests/support/test_util.hpp"

using namespace k3;
using namespace k3::mxfp4;

namespace {

bool same_bits(float a, float b) {
  std::uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y || (std::isnan(a) && std::isnan(b));
}

} // namespace

TEST_CASE("q8 rounding: the definition's rule, zeros, tiny and non-finite blocks", "[mxfp4][q8]") {
  test::rng r(7);
  std::int8_t q[32];
  for (int trial = 0; trial < 200; ++trial) {
    auto x = r.normals(32, trial % 2 ? 1e-3f : 30.0f);
    const float d = q8_quantize_block(x.data(), q);
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    REQUIRE(d == amax / 127.0f);
    bool hit = false;
    for (int i = 0; i < 32; ++i) {
      REQUIRE(std::abs(int{q[i]}) <= 127);
      // Round to nearest: within half a step (plus fp32 slack on the scaled value).
      REQUIRE(std::fabs(x[i] - d * q[i]) <= 0.5f * d * (1 + 1e-5f));
      hit = hit || std::abs(int{q[i]}) == 127;
    }
    REQUIRE(hit); // the largest magnitude lands on ±127
  }
  std::vector<float> z(32, 0.0f);
  REQUIRE(q8_quantize_block(z.data(), q) == 0.0f);
  z[3] = 1e-38f; // 127 / amax overflows: the block rounds to zero
  REQUIRE(q8_quantize_block(z.data(), q) == 0.0f);
  REQUIRE(q[3] == 0);
  z[5] = std::numeric_limits<float>::quiet_NaN();
  REQUIRE(std::isnan(q8_quantize_block(z.data(), q)));
  z[5] = -std::numeric_limits<float>::infinity();
  REQUIRE(std::isnan(q8_quantize_block(z.data(), q)));
  for (int i = 0; i < 32; ++i) REQUIRE(q[i] == 0);
}

TEST_CASE("q8 rounding rows: every ISA path gives the scalar rule's d · q bit for bit", "[mxfp4][q8]") {
  // Blocks: normal and tiny scales, ties (amax 127 makes 127 / amax = 1: 2.5 → 2, −3.5 → −4),
  // small negatives that round to zero (the rule's int8 makes them +0), a zero block, a block
  // whose 127 / amax overflows, NaN and ±inf blocks; rows with a stride.
  test::rng r(29);
  const std::int64_t rows = 3, cols = 10 * block_size, ld = cols + 7;
  auto x = r.normals(rows * ld, 3.0f);
  for (std::int64_t q = 0; q < rows; ++q) {
    float* row = x.data() + q * ld;
    for (int i = 0; i < 32; ++i) row[32 + i] *= 1e-20f;
    for (int i = 0; i < 32; ++i) row[64 + i] = (i % 4 == 0) ? 2.5f + i : (i % 4 == 1 ? -3.5f : -1e-6f);
    row[64 + 31] = 127.0f;
    std::fill(row + 96, row + 128, 0.0f);
    std::fill(row + 128, row + 160, 0.0f);
    row[128 + 7] = -1e-38f;
    row[160 + 9] = std::numeric_limits<float>::quiet_NaN();
    row[192 + 2] = std::numeric_limits<float>::infinity();
    row[224 + 30] = -std::numeric_limits<float>::infinity();
  }
  std::vector<float> want(rows * cols);
  std::int8_t qb[block_size];
  for (std::int64_t q = 0; q < rows; ++q)
    for (std::int64_t c = 0; c < cols; c += block_size) {
      const float d = q8_quantize_block(x.data() + q * ld + c, qb);
      for (int i = 0; i < block_size; ++i) want[q * cols + c + i] = d * static_cast<float>(qb[i]);
    }
  for (isa path : test::isa_paths()) {
    scoped_isa pin(path);
    std::vector<float> got(rows * cols, 1.0f);
    q8_round_rows(x.data(), ld, rows, cols, got.data());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("isa=" << to_string(path) << " index " << i << " got " << got[i] << " want " << want[i]);
      REQUIRE(same_bits(got[i], want[i]));
    }
  }
}

TEST_CASE("q8 reference: equals fp64 on the rounded activations and stays within the int8 bound of the exact product", "[mxfp4][q8]") {
  test::rng r(11);
  for (const std::int64_t cols : {32, 96, 288}) {
    const std::int64_t rows = 9, m = 3;
    const auto w = test::random_mxfp4(r, rows, cols);
    auto x = r.normals(m * cols);
    std::vector<float> y(m * rows), xr(m * cols), deq(rows * cols);
    q8_reference(x.data(), cols, m, matrix_view::of(w), 0, rows, y.data(), rows);
    q8_round_rows(x.data(), cols, m, cols, xr.data());
    dequantize(w.packed.data(), w.scales.data(), rows, cols, deq.data());
    const auto ref_rounded = gemm_ref(xr.data(), cols, m, matrix_view::of(w));
    const auto ref_exact = gemm_ref(x.data(), cols, m, matrix_view::of(w));
    for (std::int64_t t = 0; t < m; ++t)
      for (std::int64_t q = 0; q < rows; ++q) {
        double mag = 0, bound = 0;
        for (std::int64_t b = 0; b < cols / 32; ++b) {
          double amax = 0, wsum = 0;
          for (int i = 0; i < 32; ++i) {
            const std::int64_t k = b * 32 + i;
            mag += std::fabs(static_cast<double>(xr[t * cols + k]) * deq[q * cols + k]);
            amax = std::max(amax, std::fabs(static_cast<double>(x[t * cols + k])));
            wsum += std::fabs(static_cast<double>(deq[q * cols + k]));
          }
          bound += amax / 254.0 * (1 + 1e-5) * wsum;
        }
        INFO("cols=" << cols << " token " << t << " row " << q);
        REQUIRE(std::fabs(y[t * rows + q] - ref_rounded[t * rows + q]) <= 1e-5 * mag + 1e-30);
        REQUIRE(std::fabs(y[t * rows + q] - ref_exact[t * rows + q]) <= bound + 1e-5 * mag);
      }
  }
}

TEST_CASE("q8 tiles: the VNNI quantizer writes the reference's values in the tile layout", "[mxfp4][q8]") {
  if (!int8_dot_available()) {
    WARN("no AVX512-VNNI on this CPU: the int8 tile kernel is not exercised");
    return;
  }
  test::rng r(13);
  const std::int64_t cols = 160, nb = cols / 32, ldx = cols + 3;
  for (const int tg : {1, 7, 16}) {
    auto x = r.normals(tg * ldx, 4.0f);
    x[2 * 32 + 7] = std::numeric_limits<float>::quiet_NaN(); // token 0, block 2
    if (tg > 1) std::fill(x.begin() + ldx + 32, x.begin() + ldx + 64, 0.0f); // token 1, block 1
    if (tg > 2) x[2 * ldx + 4 * 32 + 1] = std::numeric_limits<float>::infinity();
    std::vector<std::uint8_t> storage(q8_tile_bytes(cols) + 64);
    void* base = storage.data() + (64 - reinterpret_cast<std::uintptr_t>(storage.data()) % 64) % 64;
    const q8_tile t = detail::q8_make_tile_avx512(x.data(), ldx, tg, cols, base);
    REQUIRE(t.tokens == tg);
    std::int8_t q[32];
    for (int tok = 0; tok < 16; ++tok)
      for (std::int64_t b = 0; b < nb; ++b) {
        INFO("tg=" << tg << " token " << tok << " block " << b);
        float d = 0.0f;
        if (tok < tg) d = q8_quantize_block(x.data() + tok * ldx + b * 32, q);
        else std::fill(q, q + 32, std::int8_t{0});
        REQUIRE(same_bits(t.d[b * 16 + tok], d));
        int sum = 0;
        for (int p = 0; p < 32; ++p) {
          const int col = p < 16 ? 2 * p : 2 * (p - 16) + 1;
          REQUIRE(t.q[((b * 8 + p / 4) * 16 + tok) * 4 + p % 4] == q[col]);
          sum += q[col];
        }
        REQUIRE(t.corr[b * 16 + tok] == -12 * sum);
      }
  }
}

TEST_CASE("q8 gemm: VNNI equals the reference (tiles bit for bit, few tokens within fp32 order), AVX2 few tokens bit for bit, otherwise the rounded fp32 path", "[mxfp4][q8]") {
  if (!int8_dot_available()) WARN("no AVX512-VNNI on this CPU: only the rounded-fp32 fallback is exercised");
  test::rng r(20261204);
  for (const std::int64_t rows : {1, 5, 13, 33, 130})
    for (const std::int64_t cols : {32, 96, 160, 288, 576})
      for (const std::int64_t m : {1, 2, 3, 4, 5, 16, 17, 33, 40}) {
        const auto w = test::random_mxfp4(r, rows, cols);
        const std::int64_t ldx = cols + 5, ldy = rows + 3;
        auto x = r.normals(m * ldx);
        std::vector<float> xr(m * cols), deq(rows * cols);
        q8_round_rows(x.data(), ldx, m, cols, xr.data());
        dequantize(w.packed.data(), w.scales.data(), rows, cols, deq.data());
        for (isa path : test::isa_paths()) {
          scoped_isa pin(path);
          INFO("rows=" << rows << " cols=" << cols << " m=" << m << " isa=" << to_string(path));
          std::vector<float> y(m * ldy, NAN), want(m * ldy, NAN);
          gemm(x.data(), ldx, m, matrix_view::of(w), y.data(), ldy, activations::int8);
          const bool vnni = int8_dot_available();
          // AVX2 without VNNI: up to q8_avx2_max_tokens the integer kernel, exact to the definition.
          const bool avx2_q8 = !vnni && active_isa() == isa::avx2 && m <= detail::q8_avx2_max_tokens;
          if (vnni || avx2_q8) q8_reference(x.data(), ldx, m, matrix_view::of(w), 0, rows, want.data(), ldy);
          else gemm(xr.data(), cols, m, matrix_view::of(w), want.data(), ldy, activations::fp32);
          for (std::int64_t t = 0; t < m; ++t)
            for (std::int64_t q = 0; q < rows; ++q) {
              INFO("token " << t << " row " << q << " got " << y[t * ldy + q] << " want " << want[t * ldy + q]);
              if (!vnni || m >= q8_min_tokens) {
                REQUIRE(same_bits(y[t * ldy + q], want[t * ldy + q]));
                continue;
              }
              double mag = 0;
              for (std::int64_t k = 0; k < cols; ++k) mag += std::fabs(static_cast<double>(xr[t * cols + k]) * deq[q * cols + k]);
              REQUIRE(std::fabs(y[t * ldy + q] - want[t * ldy + q]) <= 1e-5 * mag + 1e-30);
            }
        }
      }
}

TEST_CASE("q8 grouped gemm: each segment equals its own call, and a token's result does not depend on its tile mates", "[mxfp4][q8]") {
  test::rng r(17);
  const std::int64_t rows = 29, cols = 288;
  const std::int64_t sizes[] = {2, 0, 23, 5, 16, 1, 37};
  std::vector<packed_matrix> experts;
  std::vector<expert_segment> segs;
  std::int64_t total = 0;
  for (const auto n : sizes) {
    experts.push_back(test::random_mxfp4(r, rows, cols));
    segs.push_back({matrix_view::of(experts.back()), total, total + n});
    total += n;
  }
  for (std::size_t i = 0; i < segs.size(); ++i) segs[i].w = matrix_view::of(experts[i]);
  auto x = r.normals(total * cols);
  std::vector<float> y(total * rows, NAN);
  grouped_gemm(x.data(), cols, segs, y.data(), rows, activations::int8);
  for (const auto& s : segs) {
    if (s.end == s.begin) continue;
    std::vector<float> want((s.end - s.begin) * rows, NAN);
    gemm(x.data() + s.begin * cols, cols, s.end - s.begin, s.w, want.data(), rows, activations::int8);
    for (std::int64_t i = 0; i < (s.end - s.begin) * rows; ++i) REQUIRE(same_bits(y[s.begin * rows + i], want[i]));
  }
  if (!int8_dot_available()) return;
  // Tokens 3..7 of the 37-token segment, now with 4 other tokens instead of 36: same bits.
  const auto& big = segs.back();
  std::vector<float> sub(9 * cols);
  for (int i = 0; i < 9; ++i) std::memcpy(&sub[i * cols], &x[(big.begin + (i < 5 ? 3 + i : 20 + i)) * cols], cols * 4);
  std::vector<float> ys(9 * rows, NAN);
  gemm(sub.data(), cols, 9, big.w, ys.data(), rows, activations::int8);
  for (int i = 0; i < 5; ++i)
    for (std::int64_t q = 0; q < rows; ++q) REQUIRE(same_bits(ys[i * rows + q], y[(big.begin + 3 + i) * rows + q]));
}

TEST_CASE("q8 gemm: a NaN activation poisons only its token, a NaN scale only its row", "[mxfp4][q8]") {
  test::rng r(19);
  const std::int64_t rows = 21, cols = 96, m = 17;
  auto w = test::random_mxfp4(r, rows, cols);
  auto x = r.normals(m * cols);
  x[6 * cols + 40] = std::numeric_limits<float>::quiet_NaN();
  w.scales[9 * (cols / 32) + 1] = nan_scale;
  for (const std::int64_t mm : {m, std::int64_t{1}}) {
    std::vector<float> y(mm * rows, 0.0f);
    const float* xs = mm == 1 ? x.data() + 6 * cols : x.data();
    gemm(xs, cols, mm, matrix_view::of(w), y.data(), rows, activations::int8);
    for (std::int64_t t = 0; t < mm; ++t)
      for (std::int64_t q = 0; q < rows; ++q) {
        const bool poisoned = q == 9 || (mm == 1 ? true : t == 6);
        INFO("m=" << mm << " token " << t << " row " << q);
        REQUIRE(std::isnan(y[t * rows + q]) == poisoned);
      }
  }
}

TEST_CASE("q8 gemm: every scale byte, 0 (2^-128) to 255 (NaN), scales as the definition says on every path", "[mxfp4][q8]") {
  // 17 rows × 16 blocks: rows 0–15 carry the bytes 0..254 (each once; 255's slot repeats 254),
  // row 16 is all 255 (a NaN row). 16 blocks per row take the AVX2 kernel's byte transpose.
  test::rng r(23);
  const std::int64_t rows = 17, cols = 16 * block_size, nb = cols / block_size;
  auto w = test::random_mxfp4(r, rows, cols);
  for (std::int64_t q = 0; q < rows; ++q)
    for (std::int64_t b = 0; b < nb; ++b)
      w.scales[q * nb + b] = q == 16 ? std::uint8_t{255} : static_cast<std::uint8_t>(std::min<std::int64_t>(q * nb + b, 254));
  for (const std::int64_t m : {1, 3}) {
    auto x = r.normals(m * cols);
    std::vector<float> want(m * rows, 0.0f);
    q8_reference(x.data(), cols, m, matrix_view::of(w), 0, rows, want.data(), rows);
    for (isa path : test::isa_paths()) {
      scoped_isa pin(path);
      const bool exact = int8_dot_available() ? m >= q8_min_tokens : active_isa() == isa::avx2;
      std::vector<float> y(m * rows, 0.0f);
      gemm(x.data(), cols, m, matrix_view::of(w), y.data(), rows, activations::int8);
      for (std::int64_t t = 0; t < m; ++t)
        for (std::int64_t q = 0; q < rows; ++q) {
          INFO("isa=" << to_string(path) << " m=" << m << " token " << t << " row " << q << " got " << y[t * rows + q] << " want "
                      << want[t * rows + q]);
          if (q == 16) REQUIRE(std::isnan(y[t * rows + q]));
          if (exact) REQUIRE(same_bits(y[t * rows + q], want[t * rows + q]));
          // The fp32 path sums in another order: where the large scales overflow (row 15, bytes
          // up to 254 = 2^126) it may meet +inf and −inf, so only finite results are compared.
          else if (q < 16 && std::isfinite(want[t * rows + q]))
            REQUIRE(std::fabs(y[t * rows + q] - want[t * rows + q]) <= 1e-5f * std::fabs(want[t * rows + q]) + 1e-37f);
        }
    }
  }
}
