// Dense bf16/fp32 GEMM vs fp64 reference, every path, odd shapes, both the GEMV (m ≤ 64) and
// the prefill routes (m > 64: AMX tiles where the CPU has them, else the widened-panel sgemm,
// k blocked by 512), with fp32 and bf16 activations.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <omp.h>

#include "kernels/common/bf16.hpp"
#include "kernels/common/blas_core.hpp"
#include "kernels/common/cpu_features.hpp"
#include "kernels/dense/dense_gemm.hpp"
#include "kernels/dense/gemm_bf16_onednn.hpp"
#include "tests/support/test_util.hpp"

using namespace k3;

namespace {

/// n random normals as bf16, and the same values widened back to fp32 (what the kernels multiply).
std::pair<std::vector<bf16_t>, std::vector<float>> random_bf16(test::rng& r, std::int64_t n) {
  const auto f = r.normals(n);
  std::vector<bf16_t> b(f.size());
  f32_to_bf16(f.data(), b.data(), n);
  std::vector<float> w(f.size());
  bf16_to_f32(b.data(), w.data(), n);
  return {std::move(b), std::move(w)};
}

/// |y - Σ x·w| ≤ 1e-5 · Σ|x·w| for every output (x as given: the caller rounds it for bf16).
void check_ref(const std::vector<float>& x, std::int64_t ldx, std::int64_t m, const std::vector<float>& w,
               std::int64_t n, std::int64_t k, const std::vector<float>& y, std::int64_t ldy) {
  for (std::int64_t t = 0; t < m; ++t)
    for (std::int64_t j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (std::int64_t i = 0; i < k; ++i) {
        ref += static_cast<double>(x[t * ldx + i]) * w[j * k + i];
        mag += std::fabs(static_cast<double>(x[t * ldx + i]) * w[j * k + i]);
      }
      INFO("token " << t << " row " << j << " got " << y[t * ldy + j] << " ref " << ref);
      REQUIRE(std::fabs(y[t * ldy + j] - ref) <= 1e-5 * mag + 1e-30);
    }
}

} // namespace

TEST_CASE("bf16 conversion rounds to nearest even and keeps NaN", "[dense]") {
  CHECK(f32_to_bf16(1.0f) == 0x3F80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  CHECK(f32_to_bf16(1.00390625f) == 0x3F80);
  CHECK(f32_to_bf16(1.01171875f) == 0x3F82); // halfway, odd below -> rounds up
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  CHECK(bf16_to_f32(f32_to_bf16(-2.5f)) == -2.5f);
}

TEST_CASE("dense gemm bf16/fp32 matches fp64 over odd shapes on every path", "[dense]") {
  const std::uint64_t seed = 2024;
  INFO("seed=" << seed);
  test::rng r(seed);
  for (isa path : test::isa_paths()) {
    scoped_isa pin(path);
    for (std::int64_t n : {1, 7, 33, 130})
      for (std::int64_t k : {1, 15, 16, 127, 300})
        for (std::int64_t m : {1, 3, 8, 9, 33, 64, 65}) {
          INFO("isa=" << to_string(path) << " m=" << m << " n=" << n << " k=" << k);
          const std::int64_t ldx = k + 2, ldy = n + 1;
          const auto [wb, wr] = random_bf16(r, n * k);
          auto x = r.normals(m * ldx);
          std::vector<float> yb(m * ldy, NAN), yf(m * ldy, NAN);
          dense::gemm_bf16(x.data(), ldx, m, wb.data(), n, k, yb.data(), ldy);
          dense::gemm_f32(x.data(), ldx, m, wr.data(), n, k, yf.data(), ldy);
          check_ref(x, ldx, m, wr, n, k, yb, ldy);
          check_ref(x, ldx, m, wr, n, k, yf, ldy);
        }
  }
}

TEST_CASE("dense gemm: in a batch, a token's result does not depend on the other tokens", "[dense]") {
  // fp32 activations, up to 64 tokens: from lanes_min_tokens() (7 on Intel, 25 / 13 on AMD with
  // AVX-512 / AVX2) tiles of 16 or 32 tokens (AVX-512; 8 or 16 on AVX2) in the lanes, each lane
  // summing its own products over k in order; below that the GEMV (a lane per column, the same
  // order for any token count; the only route on the scalar path). Tokens 0..4 shared by calls
  // of T, T + 9 and 30 tokens (T the threshold; all on the tiles, with fewer-token remainders on
  // the GEMV) whose other tokens differ: the same bits, over row tails and a k tail (256 + 44
  // columns). Calls of 7 and T - 1 tokens (the GEMV, where T > 7) give the shared tokens the
  // bits they get alone.
  test::rng r(31);
  const std::int64_t n = 31, k = 300;
  const auto [wb, wr] = random_bf16(r, n * k);
  const auto shared = r.normals(5 * k);
  for (isa path : test::isa_paths()) {
    scoped_isa pin(path);
    const std::int64_t lanes = dense::detail::lanes_min_tokens();
    INFO("isa=" << to_string(path) << " lanes from " << lanes << " tokens");
    REQUIRE(lanes >= 7);
    REQUIRE(lanes <= 30);
    auto call = [&](std::int64_t m) {
      auto x = r.normals(m * k);
      std::copy(shared.begin(), shared.end(), x.begin());
      std::vector<float> y(m * n, NAN);
      dense::gemm_bf16(x.data(), k, m, wb.data(), n, k, y.data(), n);
      check_ref(x, k, m, wr, n, k, y, n);
      return y;
    };
    std::vector<float> alone(5 * n, NAN);
    for (std::int64_t t = 0; t < 5; ++t) dense::gemm_bf16(shared.data() + t * k, k, 1, wb.data(), n, k, alone.data() + t * n, n);
    const auto ya = call(lanes), yb = call(lanes + 9), yc = call(30);
    for (std::int64_t t = 0; t < 5; ++t)
      for (std::int64_t j = 0; j < n; ++j) {
        INFO("token " << t << " row " << j);
        REQUIRE(yb[t * n + j] == ya[t * n + j]);
        REQUIRE(yc[t * n + j] == ya[t * n + j]);
      }
    for (const std::int64_t m : {std::int64_t{7}, lanes - 1}) {
      if (m >= lanes) continue;
      const auto y = call(m);
      for (std::int64_t t = 0; t < 5; ++t)
        for (std::int64_t j = 0; j < n; ++j) {
          INFO("GEMV batch of " << m << ": token " << t << " row " << j);
          REQUIRE(y[t * n + j] == alone[t * n + j]);
        }
    }
  }
}

TEST_CASE("dense: the tokens-in-lanes tiles, called directly, give a token the same bits at one and two vectors", "[dense]") {
  // gemm_bf16 reaches the one-vector tiles only below 1.5 vectors of tokens at or above the
  // lanes threshold, which on AMD (25 tokens on AVX-512, 13 on AVX2) never happens; the kernels
  // still serve Intel, so they are checked here on any CPU that runs them. Rows 0..30 cover the
  // band tails (16 + 8 + 4 + 2 + 1 at one vector, 12 + 12 + 4 + 2 + 1 at two), k = 300 a chunk
  // tail (256 + 44).
  test::rng r(57);
  const std::int64_t n = 31, k = 300;
  const auto [wb, wr] = random_bf16(r, n * k);
  for (isa path : test::isa_paths()) {
    if (path == isa::scalar) continue;
    scoped_isa pin(path);
    const int width = path == isa::avx512 ? 16 : 8;
    INFO("isa=" << to_string(path));
    const int tg1 = width - 3, tg2 = 2 * width - 1; // the first tg1 tokens shared
    const auto x = r.normals(tg2 * k);
    std::vector<float> scratch(16 * dense::detail::bcast_chunk + 16 + 2 * width * k + 16);
    auto aligned = [](float* p) { return p + ((64 - reinterpret_cast<std::uintptr_t>(p) % 64) % 64) / sizeof(float); };
    float* wt = aligned(scratch.data());
    float* xt = aligned(wt + 16 * dense::detail::bcast_chunk);
    auto run = [&](int vectors, int tg) {
      const int lanes = width * vectors;
      for (std::int64_t kk = 0; kk < k; ++kk)
        for (int t = 0; t < lanes; ++t) xt[kk * lanes + t] = t < tg ? x[t * k + kk] : 0.0f;
      std::vector<float> y(tg * n, NAN);
      if (path == isa::avx512) dense::detail::gemm_bf16_tile_avx512(xt, vectors, tg, wb.data(), k, 0, n, y.data(), n, wt);
      else dense::detail::gemm_bf16_tile_avx2(xt, vectors, tg, wb.data(), k, 0, n, y.data(), n, wt);
      check_ref(x, k, tg, wr, n, k, y, n);
      return y;
    };
    const auto one = run(1, tg1), two = run(2, tg2);
    for (std::int64_t t = 0; t < tg1; ++t)
      for (std::int64_t j = 0; j < n; ++j) {
        INFO("token " << t << " row " << j);
        REQUIRE(two[t * n + j] == one[t * n + j]);
      }
  }
}

TEST_CASE("dense gemm_bf16_multi gives each output gemm_bf16's bits, whatever the thread split", "[dense]") {
  // Outputs of 1, 6, 37 and 130 rows (row tails, one output smaller than a 4-row block, range
  // boundaries falling inside outputs), k with a 32-, a 16- and a masked tail, 1–6 tokens on the
  // GEMV route and 9 / 33 tokens on the others; fp32, bf16, fp32_bf16x2 and mixed activations;
  // 1–4 threads.
  // k = 383 = 11·32 + 16 + 15; 174 rows × 383 columns is past the parallel threshold even at
  // one token.
  test::rng r(4242);
  const std::int64_t k = 383, ldx = k + 3;
  const std::int64_t rows[4] = {37, 1, 130, 6};
  std::vector<std::vector<bf16_t>> ws;
  for (std::int64_t n : rows) ws.push_back(random_bf16(r, n * k).first);
  const int threads = omp_get_max_threads();
  for (isa path : test::isa_paths())
    for (int mix = 0; mix < 4; ++mix)
      for (std::int64_t m : {1, 2, 5, 6, 9, 33}) {
        scoped_isa pin(path);
        // All fp32, all bf16, all fp32_bf16x2, or mixed: the model's router (fp32) in one call
        // with projections of the other precisions.
        const activations mixed[4] = {activations::fp32, activations::fp32_bf16x2, activations::bf16,
                                      activations::fp32_bf16x2};
        auto act = [&](int j) {
          return mix == 0 ? activations::fp32 : mix == 1 ? activations::bf16 : mix == 2 ? activations::fp32_bf16x2 : mixed[j];
        };
        const auto x = r.normals(m * ldx);
        std::vector<std::vector<float>> want;
        for (int j = 0; j < 4; ++j) {
          want.emplace_back(m * (rows[j] + 2), NAN);
          dense::gemm_bf16(x.data(), ldx, m, ws[j].data(), rows[j], k, want[j].data(), rows[j] + 2, act(j));
        }
        for (int nt : {1, 2, 3, 4}) {
          omp_set_num_threads(nt);
          std::vector<std::vector<float>> got;
          std::vector<dense::bf16_output> outs;
          for (int j = 0; j < 4; ++j) got.emplace_back(m * (rows[j] + 2), NAN);
          for (int j = 0; j < 4; ++j) outs.push_back({ws[j].data(), rows[j], got[j].data(), rows[j] + 2, act(j)});
          dense::gemm_bf16_multi(x.data(), ldx, m, k, outs);
          INFO("isa=" << to_string(path) << " precisions=" << mix << " m=" << m << " threads=" << nt);
          for (int j = 0; j < 4; ++j)
            for (std::int64_t t = 0; t < m; ++t)
              for (std::int64_t i = 0; i < rows[j] + 2; ++i) {
                INFO("output " << j << " token " << t << " row " << i);
                const float g = got[j][t * (rows[j] + 2) + i], e = want[j][t * (rows[j] + 2) + i];
                if (i >= rows[j]) REQUIRE(std::isnan(g)); // the stride's padding untouched
                else REQUIRE(std::memcmp(&g, &e, sizeof g) == 0);
              }
        }
        omp_set_num_threads(threads);
      }
}

TEST_CASE("dense: oneDNN prefill gives a token the same bits whatever the token count", "[dense]") {
  // The oneDNN route (AMD Zen 4/5) compiles one primitive per weight shape with the token count
  // a run-time dimension; for the prefill sizes gemm_bf16 sends it (more than 64 tokens) a row's
  // result must not depend on how many tokens share the call, nor on how the call is cut into
  // passes of at most 512 (600 → 300 + 300, 513 → 257 + 256). fp32 activations (three parts) and
  // bf16; odd n and k.
  if (!dense::detail::onednn_available()) {
    WARN("oneDNN prefill route not taken on this CPU/build: not exercised");
    return;
  }
  test::rng r(909);
  const std::int64_t n = 37, k = 301;
  const auto [wb, wr] = random_bf16(r, n * k);
  const auto x = r.normals(600 * k);
  for (int splits : {3, 1}) {
    std::vector<float> all(600 * n);
    dense::detail::gemm_bf16_onednn(x.data(), k, 600, wb.data(), n, k, all.data(), n, splits);
    for (std::int64_t m : {65, 130, 513}) {
      std::vector<float> y(m * n);
      dense::detail::gemm_bf16_onednn(x.data(), k, m, wb.data(), n, k, y.data(), n, splits);
      INFO("splits=" << splits << " m=" << m);
      REQUIRE(std::memcmp(y.data(), all.data(), sizeof(float) * m * n) == 0);
    }
    // The last 100 tokens (inside the second pass above) as a call of their own.
    std::vector<float> tail(100 * n);
    dense::detail::gemm_bf16_onednn(x.data() + 500 * k, k, 100, wb.data(), n, k, tail.data(), n, splits);
    CHECK(std::memcmp(tail.data(), all.data() + 500 * n, sizeof(float) * 100 * n) == 0);
    std::vector<float> xr(x.begin(), x.begin() + 65 * k);
    if (splits == 1) round_bf16_rows(x.data(), k, 65, k, xr.data());
    check_ref(xr, k, 65, wr, n, k, all, n);
  }
}

TEST_CASE("dense gemm with bf16 activations equals the fp64 reference of the rounded activations", "[dense]") {
  // bf16 activations: x rounded to bf16 once, fp32 sums. Shapes cover the vdpbf16ps GEMV
  // (k tails under 32, row tails under 4, token groups of 1–6), the rounded-fp32 GEMV on the
  // other paths, and the sgemm route with several k blocks and uneven panels. AMX is off here
  // (its batch and prefill tiles have their own tests): the GEMV's bit-identity of a token
  // alone and batched is what this checks; on AMX a batch of 6–64 tokens takes the tiles, where
  // a token's bits do not depend on the others either, but differ from its GEMV alone.
  const bool prev_amx = set_amx_override(false);
  struct restore {
    bool v;
    ~restore() { set_amx_override(v); }
  } restore_amx{prev_amx};
  test::rng r(20261203);
  if (!bf16_dot_available()) WARN("no AVX512-BF16 on this CPU: the vdpbf16ps GEMV is not exercised");
  for (isa path : test::isa_paths()) {
    scoped_isa pin(path);
    for (std::int64_t n : {1, 6, 37, 300})
      for (std::int64_t k : {1, 31, 32, 33, 200, 1100})
        for (std::int64_t m : {1, 2, 5, 16, 64, 70}) {
          if (n * k * m > 4'000'000) continue; // keep the fp64 reference quick
          INFO("isa=" << to_string(path) << " m=" << m << " n=" << n << " k=" << k);
          const std::int64_t ldx = k + 3, ldy = n + 2;
          const auto [wb, wr] = random_bf16(r, n * k);
          auto x = r.normals(m * ldx);
          std::vector<float> y(m * ldy, NAN);
          dense::gemm_bf16(x.data(), ldx, m, wb.data(), n, k, y.data(), ldy, activations::bf16);
          auto xr = x;
          for (auto& v : xr) v = round_bf16(v);
          check_ref(xr, ldx, m, wr, n, k, y, ldy);
          // Up to the GEMV limit a token's result is bit-identical alone or batched.
          if (m <= 64)
            for (std::int64_t t = 0; t < m; t += 3) {
              std::vector<float> one(n, NAN);
              dense::gemm_bf16(x.data() + t * ldx, ldx, 1, wb.data(), n, k, one.data(), n, activations::bf16);
              for (std::int64_t j = 0; j < n; ++j) REQUIRE(one[j] == y[t * ldy + j]);
            }
        }
  }
}

TEST_CASE("dense: the vdpbf16ps GEMV kernel matches fp64 on any row range and token count", "[dense]") {
  if (!bf16_dot_available()) {
    WARN("no AVX512-BF16 on this CPU: kernel not exercised");
    return;
  }
  test::rng r(77);
  for (std::int64_t k : {5, 64, 97})
    for (std::int64_t m : {1, 3, 4, 9}) {
      const std::int64_t n = 11, kp = (k + 31) / 32 * 32, ldy = n + 1;
      const auto [wb, wr] = random_bf16(r, n * k);
      auto x = r.normals(m * kp);
      std::vector<bf16_t> xb(x.size(), 0);
      for (std::int64_t t = 0; t < m; ++t) f32_to_bf16(x.data() + t * kp, xb.data() + t * kp, k); // pad stays 0
      std::vector<float> xr(x.size(), 0.0f);
      bf16_to_f32(xb.data(), xr.data(), static_cast<std::int64_t>(xb.size()));
      std::vector<float> y(m * ldy, NAN);
      dense::detail::gemv_bf16_rows_avx512bf16(xb.data(), kp, m, wb.data(), k, 2, 9, y.data(), ldy);
      INFO("k=" << k << " m=" << m);
      for (std::int64_t t = 0; t < m; ++t) {
        CHECK(std::isnan(y[t * ldy + 1])); // rows outside [2, 9) untouched
        CHECK(std::isnan(y[t * ldy + 9]));
      }
      // Rows 2..8 as a 7-row problem for the reference.
      std::vector<float> w7(wr.begin() + 2 * k, wr.begin() + 9 * k), y7(m * 7);
      for (std::int64_t t = 0; t < m; ++t)
        for (std::int64_t j = 0; j < 7; ++j) y7[t * 7 + j] = y[t * ldy + 2 + j];
      check_ref(xr, kp, m, w7, 7, k, y7, 7);
    }
}

TEST_CASE("dense: a GEMV row's bits do not depend on the row range it is computed in", "[dense]") {
  // Ranges of 8 rows and more with rows of 256 bytes and more are read as four quarters (row j
  // beside rows j + q, j + 2q, j + 3q), shorter ones in 4-row blocks, single rows alone: every
  // row must come out the same bits whichever way, and every row of the range exactly once.
  test::rng r(4242);
  const std::int64_t n = 45;
  for (isa path : test::isa_paths()) {
    scoped_isa pin(path);
    for (std::int64_t k : {64, 130, 300, 1100})
      for (std::int64_t m : {1, 3, 6}) {
        INFO("isa=" << to_string(path) << " k=" << k << " m=" << m);
        const std::int64_t ldx = k + 3, ldy = n + 2;
        const auto [wb, wr] = random_bf16(r, n * k);
        const auto x = r.normals(m * ldx);
        std::vector<float> alone(m * ldy, NAN);
        for (std::int64_t j = 0; j < n; ++j) dense::gemv_bf16_rows(x.data(), ldx, m, wb.data(), k, j, j + 1, alone.data(), ldy);
        check_ref(x, ldx, m, wr, n, k, alone, ldy);
        const std::pair<std::int64_t, std::int64_t> ranges[] = {{0, n}, {1, n}, {5, 37}, {0, 8}, {3, 12}, {9, 10}, {2, 6}};
        for (const auto& [n0, n1] : ranges) {
          INFO("rows [" << n0 << ", " << n1 << ")");
          std::vector<float> y(m * ldy, NAN);
          dense::gemv_bf16_rows(x.data(), ldx, m, wb.data(), k, n0, n1, y.data(), ldy);
          for (std::int64_t t = 0; t < m; ++t)
            for (std::int64_t j = 0; j < n; ++j) {
              INFO("token " << t << " row " << j);
              if (j < n0 || j >= n1) REQUIRE(std::isnan(y[t * ldy + j])); // outside the range: untouched
              else REQUIRE(std::memcmp(&y[t * ldy + j], &alone[t * ldy + j], sizeof(float)) == 0);
            }
        }
      }
  }
  if (!bf16_dot_available()) return;
  // The vdpbf16ps kernel the same way (bf16 activations, rows zero-padded to 32).
  for (std::int64_t k : {64, 200, 1100}) {
    const std::int64_t m = 2, kp = (k + 31) / 32 * 32, ldy = n;
    const auto [wb, wr] = random_bf16(r, n * k);
    const auto x = r.normals(m * kp);
    std::vector<bf16_t> xb(x.size(), 0);
    for (std::int64_t t = 0; t < m; ++t) f32_to_bf16(x.data() + t * kp, xb.data() + t * kp, k);
    std::vector<float> alone(m * ldy, NAN), all(m * ldy, NAN);
    for (std::int64_t j = 0; j < n; ++j)
      dense::detail::gemv_bf16_rows_avx512bf16(xb.data(), kp, m, wb.data(), k, j, j + 1, alone.data(), ldy);
    dense::detail::gemv_bf16_rows_avx512bf16(xb.data(), kp, m, wb.data(), k, 0, n, all.data(), ldy);
    INFO("vdpbf16ps k=" << k);
    REQUIRE(std::memcmp(alone.data(), all.data(), alone.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("dense: AMX activation splits hi + mid + lo give back every fp32 value", "[dense]") {
  if (!amx_bf16_available()) {
    WARN("no AMX on this CPU: the tile path is not exercised");
    return;
  }
  // Values over a wide exponent range (incl. ties and values near bf16's largest), k tails.
  test::rng r(4242);
  for (std::int64_t k : {1, 17, 32, 33, 100}) {
    const std::int64_t rows = 32, chunks = (k + 31) / 32, stride = rows * chunks * 32;
    std::vector<float> x(rows * k);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] = r.uniform(-1.0f, 1.0f) * std::ldexp(1.0f, static_cast<int>(i % 160) - 80);
    x[0] = 1.00390625f;     // exactly between two bf16 values
    x[rows * k - 1] = 3.0e38f; // hi near the top of the range
    std::vector<bf16_t> xs3(3 * stride + 32), xs1(stride + 32);
    bf16_t* a3 = xs3.data() + ((64 - reinterpret_cast<std::uintptr_t>(xs3.data()) % 64) % 64) / sizeof(bf16_t);
    bf16_t* a1 = xs1.data() + ((64 - reinterpret_cast<std::uintptr_t>(xs1.data()) % 64) % 64) / sizeof(bf16_t);
    dense::detail::split_bf16_rows(x.data(), k, rows, k, 3, a3, stride);
    dense::detail::split_bf16_rows(x.data(), k, rows, k, 1, a1, stride);
    for (std::int64_t t = 0; t < rows; ++t)
      for (std::int64_t c = 0; c < chunks * 32; ++c) {
        // Tile order: band of 16 rows, chunk, row in band, column in chunk.
        const std::int64_t at = (t / 16) * chunks * 512 + (c / 32) * 512 + (t % 16) * 32 + c % 32;
        const float v = c < k ? x[t * k + c] : 0.0f;
        INFO("k=" << k << " row " << t << " col " << c << " x=" << v);
        REQUIRE(a1[at] == f32_to_bf16(v));
        REQUIRE(a3[at] == a1[at]);
        const double sum = static_cast<double>(bf16_to_f32(a3[at])) + bf16_to_f32(a3[stride + at]) +
                           bf16_to_f32(a3[2 * stride + at]);
        REQUIRE(sum == static_cast<double>(v));
      }
  }
}

TEST_CASE("dense gemm on AMX tiles (prefill) matches fp64 with fp32 and bf16 activations", "[dense]") {
  if (!amx_bf16_available()) {
    WARN("no AMX on this CPU: the tile path is not exercised");
    return;
  }
  // Shapes: token counts past one 512-token pass and with tails (m % 32), row tails (n % 32),
  // k tails and several k-blocks (1100 columns = 35 chunks); each result against fp64 of the
  // activations the path promises (fp32 as given, or rounded to bf16), and the same call with
  // AMX off (the widening sgemm path) against the same bound.
  test::rng r(20261205);
  for (std::int64_t m : {65, 100, 545})
    for (std::int64_t n : {32, 95, 160})
      for (std::int64_t k : {1, 33, 1100})
        for (auto act : {activations::fp32, activations::bf16}) {
          if (m * n * k > 20'000'000) continue;
          INFO("m=" << m << " n=" << n << " k=" << k << " act=" << (act == activations::bf16 ? "bf16" : "fp32"));
          const std::int64_t ldx = k + 5, ldy = n + 3;
          const auto [wb, wr] = random_bf16(r, n * k);
          auto x = r.normals(m * ldx);
          auto xr = x;
          if (act == activations::bf16)
            for (auto& v : xr) v = round_bf16(v);
          for (bool amx : {true, false}) {
            const bool prev = set_amx_override(amx);
            std::vector<float> y(m * ldy, NAN);
            dense::gemm_bf16(x.data(), ldx, m, wb.data(), n, k, y.data(), ldy, act);
            set_amx_override(prev);
            INFO("amx=" << amx);
            check_ref(xr, ldx, m, wr, n, k, y, ldy);
          }
        }
}

TEST_CASE("dense gemm on AMX tiles: a token's result does not depend on the others, NaN and inf propagate", "[dense]") {
  if (!amx_bf16_available()) {
    WARN("no AMX on this CPU: the tile path is not exercised");
    return;
  }
  test::rng r(99);
  const std::int64_t n = 64, k = 96;
  const auto [wb, wr] = random_bf16(r, n * k);
  auto x128 = r.normals(128 * k), x96 = r.normals(96 * k);
  std::copy(x128.begin(), x128.begin() + 32 * k, x96.begin());
  x128[40 * k + 7] = NAN;      // token 40: every output NaN
  x128[41 * k + 3] = INFINITY; // token 41: every output non-finite (±inf, or NaN)
  for (auto act : {activations::fp32, activations::bf16}) {
    std::vector<float> y128(128 * n), y96(96 * n);
    dense::gemm_bf16(x128.data(), k, 128, wb.data(), n, k, y128.data(), n, act);
    dense::gemm_bf16(x96.data(), k, 96, wb.data(), n, k, y96.data(), n, act);
    for (std::int64_t j = 0; j < n; ++j) {
      INFO("row " << j);
      for (std::int64_t t = 0; t < 32; ++t) REQUIRE(y96[t * n + j] == y128[t * n + j]);
      REQUIRE(std::isnan(y128[40 * n + j]));
      REQUIRE(!std::isfinite(y128[41 * n + j]));
      REQUIRE(std::isfinite(y128[42 * n + j]));
    }
  }
}

TEST_CASE("dense gemm on AMX tiles (batched decode, weights in place) matches fp64, tokens independent", "[dense]") {
  if (!amx_bf16_available()) {
    WARN("no AMX on this CPU: the tile path is not exercised");
    return;
  }
  // 6–64 tokens: W read in place as A tiles. Shapes cover one to four token groups and partial
  // ones, row groups of 3, 2 and 1 tiles with a row tail (n % 16, other paths), k tails (partial
  // last chunk, zero-padded copy) and k-blocks (4200 columns = 132 chunks, past the 128-chunk
  // blocks of 49–64 tokens with fp32 activations); AMX off against the same bound.
  test::rng r(20261206);
  for (std::int64_t m : {6, 16, 17, 40, 64})
    for (std::int64_t n : {16, 50, 112})
      for (std::int64_t k : {1, 33, 4200})
        for (auto act : {activations::fp32, activations::bf16}) {
          if (k == 4200 && m < 49 && n != 16) continue; // one k-block: covered by k = 33
          INFO("m=" << m << " n=" << n << " k=" << k << " act=" << (act == activations::bf16 ? "bf16" : "fp32"));
          const std::int64_t ldx = k + 3, ldy = n + 5;
          const auto [wb, wr] = random_bf16(r, n * k);
          auto x = r.normals(m * ldx);
          auto xr = x;
          if (act == activations::bf16)
            for (auto& v : xr) v = round_bf16(v);
          for (bool amx : {true, false}) {
            const bool prev = set_amx_override(amx);
            std::vector<float> y(m * ldy, NAN);
            dense::gemm_bf16(x.data(), ldx, m, wb.data(), n, k, y.data(), ldy, act);
            set_amx_override(prev);
            INFO("amx=" << amx);
            check_ref(xr, ldx, m, wr, n, k, y, ldy);
          }
        }
  // Tokens 0..15 shared by calls of 17 and 40 tokens (two and three token groups): the same
  // bits; a NaN and an inf in other tokens stay theirs.
  const std::int64_t n = 48, k = 100;
  const auto [wb, wr] = random_bf16(r, n * k);
  auto x40 = r.normals(40 * k), x17 = r.normals(17 * k);
  std::copy(x40.begin(), x40.begin() + 16 * k, x17.begin());
  x40[20 * k + 9] = NAN;
  x40[33 * k + 99] = INFINITY;
  for (auto act : {activations::fp32, activations::bf16}) {
    std::vector<float> y40(40 * n), y17(17 * n);
    dense::gemm_bf16(x40.data(), k, 40, wb.data(), n, k, y40.data(), n, act);
    dense::gemm_bf16(x17.data(), k, 17, wb.data(), n, k, y17.data(), n, act);
    for (std::int64_t j = 0; j < n; ++j) {
      INFO("row " << j);
      for (std::int64_t t = 0; t < 16; ++t) REQUIRE(y17[t * n + j] == y40[t * n + j]);
      REQUIRE(std::isnan(y40[20 * n + j]));
      REQUIRE(!std::isfinite(y40[33 * n + j]));
      REQUIRE(std::isfinite(y40[21 * n + j]));
      REQUIRE(std::isfinite(y40[39 * n + j]));
    }
  }
}

TEST_CASE("dense gemm rejects bad strides with a message", "[dense]") {
  std::vector<float> x(10), y(10);
  std::vector<bf16_t> w(10);
  CHECK_THROWS_WITH(dense::gemm_bf16(x.data(), 2, 1, w.data(), 2, 5, y.data(), 2), Catch::Contains("ldx=2 < k=5"));
}

TEST_CASE("blas: OpenBLAS runs kernels this CPU supports, not its SSE3 fallback", "[dense]") {
  CHECK(k3::blas_core_upgrade("SkylakeX") == nullptr);
  CHECK(k3::blas_core_upgrade("Haswell") == nullptr);
  CHECK(k3::blas_core_upgrade(nullptr) == nullptr);
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2) CHECK(k3::blas_core_upgrade("Prescott") != nullptr);
  // The test main went through ensure_blas_core: whatever OpenBLAS detected, it is not a
  // pre-AVX2 fallback on a CPU that has better (unless the user pinned OPENBLAS_CORETYPE).
  INFO("OpenBLAS core: " << k3::blas_core_name());
  if (avx2 && !std::getenv("K3_BLAS_CORE")) CHECK(k3::blas_core_upgrade(k3::blas_core_name()) == nullptr);
}

TEST_CASE("dense gemm with fp32_bf16x2 activations multiplies round_bf16x2(x) on every route", "[dense]") {
  // The definition: each activation enters as round_bf16x2(x) = hi + lo (16 significant bits),
  // whatever the route — GEMV, tokens-in-lanes tiles, the widened sgemm, oneDNN's two bf16
  // parts, AMX tiles. Weights that pick one column per row (a permutation, values ±1 and 2)
  // make every route's result exact: y must equal the rounded activation times the weight bit
  // for bit, and fp32 activations must give x itself (so the two modes differ where
  // round_bf16x2 moves x, which random normals do for most values). Then random weights against
  // the fp64 reference of the rounded activations, tighter than the rounding's own effect.
  test::rng r(77);
  for (isa path : test::isa_paths()) {
    scoped_isa pin(path);
    for (std::int64_t m : {1, 3, 7, 30, 64, 65, 130, 300}) {
      const std::int64_t k = 96, n = 96;
      INFO("isa=" << to_string(path) << " m=" << m);
      std::vector<bf16_t> w(static_cast<std::size_t>(n * k), f32_to_bf16(0.0f));
      std::vector<std::int64_t> col(static_cast<std::size_t>(n));
      for (std::int64_t j = 0; j < n; ++j) {
        col[j] = (j * 37 + 11) % k; // a permutation of the columns (37 is prime to 96)
        w[j * k + col[j]] = f32_to_bf16(j % 3 == 0 ? -1.0f : j % 3 == 1 ? 1.0f : 2.0f);
      }
      const auto x = r.normals(m * k);
      std::vector<float> y2(m * n, NAN), y3(m * n, NAN);
      dense::gemm_bf16(x.data(), k, m, w.data(), n, k, y2.data(), n, activations::fp32_bf16x2);
      dense::gemm_bf16(x.data(), k, m, w.data(), n, k, y3.data(), n, activations::fp32);
      std::int64_t moved = 0;
      for (std::int64_t t = 0; t < m; ++t)
        for (std::int64_t j = 0; j < n; ++j) {
          const float s = bf16_to_f32(w[j * k + col[j]]), v = x[t * k + col[j]];
          INFO("token " << t << " row " << j << " x " << v);
          REQUIRE(y2[t * n + j] == round_bf16x2(v) * s);
          REQUIRE(y3[t * n + j] == v * s);
          moved += round_bf16x2(v) != v;
        }
      CHECK(moved > m * n / 2);
    }
    // Random weights: within fp32 summation error of Σ round_bf16x2(x)·w.
    for (std::int64_t m : {1, 5, 40, 200}) {
      const std::int64_t k = 700, n = 45;
      INFO("isa=" << to_string(path) << " random weights, m=" << m);
      const auto [wb, wr] = random_bf16(r, n * k);
      const auto x = r.normals(m * k);
      std::vector<float> y(m * n, NAN);
      dense::gemm_bf16(x.data(), k, m, wb.data(), n, k, y.data(), n, activations::fp32_bf16x2);
      for (std::int64_t t = 0; t < m; ++t)
        for (std::int64_t j = 0; j < n; ++j) {
          double ref = 0, mag = 0;
          for (std::int64_t i = 0; i < k; ++i) {
            const double p = static_cast<double>(round_bf16x2(x[t * k + i])) * wr[j * k + i];
            ref += p;
            mag += std::fabs(p);
          }
          INFO("token " << t << " row " << j);
          REQUIRE(std::fabs(y[t * n + j] - ref) <= 2e-7 * mag);
        }
    }
  }
}

TEST_CASE("round_bf16x2: AVX-512 rows equal the scalar rule bit for bit, special values included", "[dense]") {
  // Ties, the largest finite floats (hi overflows to inf: it stands alone), inf, NaN, denormals,
  // signed zeros, and random normals over a masked tail (k = 37).
  std::vector<float> x = {1.00390625f, 1.01171875f, -1.0000001f, 3.3895e38f, 3.4e38f, -3.4028235e38f, INFINITY,
                          -INFINITY, NAN, 1e-40f, -3e-39f, 0.0f, -0.0f, 1.0f + 0x1p-9f + 0x1p-17f, 0x1p-126f};
  test::rng r(91);
  const auto more = r.normals(37 * 3 - static_cast<std::int64_t>(x.size()));
  x.insert(x.end(), more.begin(), more.end());
  std::vector<float> want(x.size()), got(x.size(), 7.0f);
  round_bf16x2_rows(x.data(), 37, 3, 37, want.data());
  for (std::size_t i = 0; i < x.size(); ++i) {
    // The scalar rule: hi + lo exact (16 significant bits), non-finite hi alone.
    const float hi = round_bf16(x[i]);
    INFO("x " << x[i]);
    if (std::isfinite(hi)) CHECK(static_cast<double>(want[i]) == static_cast<double>(hi) + round_bf16(x[i] - hi));
    else CHECK(std::memcmp(&want[i], &hi, sizeof hi) == 0);
    if (std::isfinite(x[i]) && std::isfinite(hi) && x[i] != 0.0f && std::fabs(x[i]) >= 0x1p-126f)
      CHECK(std::fabs(want[i] - x[i]) <= std::ldexp(std::fabs(x[i]), -17));
  }
  if (active_isa() < isa::avx512) {
    WARN("no AVX-512 on this CPU: the vector rounding is not exercised");
    return;
  }
  dense::detail::round_bf16x2_rows_avx512(x.data(), 37, 3, 37, got.data());
  for (std::size_t i = 0; i < x.size(); ++i) {
    INFO("x " << x[i] << " scalar " << want[i] << " avx512 " << got[i]);
    CHECK(std::memcmp(&want[i], &got[i], sizeof got[i]) == 0);
  }
}
