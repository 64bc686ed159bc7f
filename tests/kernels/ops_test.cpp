// Norms, activations, softmax and the AttnRes mix vs straightforward fp64 formulas.
#include <catch2/catch.hpp>

#include <cmath>

#include "kernels/common/cpu_features.hpp"
#include "kernels/common/fast_math.hpp"
#include "kernels/ops/activations.hpp"
#include "kernels/ops/attnres.hpp"
#include "kernels/ops/norms.hpp"
#include "tests/support/test_util.hpp"

using namespace k3;

namespace {
double sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }
} // namespace

TEST_CASE("rms_norm, gated rms_norm and l2_norm match fp64", "[ops]") {
  test::rng r(11);
  for (std::int64_t n : {1, 7, 33, 127, 7168}) {
    const std::int64_t rows = 3;
    auto x = r.normals(rows * n, 2.0f), w = r.normals(n), gate = r.normals(rows * n, 3.0f);
    std::vector<float> y(rows * n), yg(rows * n), yl(rows * n);
    ops::rms_norm(x.data(), w.data(), 1e-5f, rows, n, y.data());
    ops::rms_norm_gated(x.data(), gate.data(), w.data(), 1e-5f, rows, n, yg.data());
    ops::l2_norm(x.data(), 1e-6f, rows, n, yl.data());
    std::vector<double> ry(rows * n), rg(rows * n), rl(rows * n);
    for (std::int64_t i = 0; i < rows; ++i) {
      double ss = 0;
      for (std::int64_t j = 0; j < n; ++j) ss += double(x[i * n + j]) * x[i * n + j];
      const double inv = 1.0 / std::sqrt(ss / n + 1e-5), inv2 = 1.0 / std::sqrt(ss + 1e-6);
      for (std::int64_t j = 0; j < n; ++j) {
        ry[i * n + j] = x[i * n + j] * inv * w[j];
        rg[i * n + j] = ry[i * n + j] * sig(gate[i * n + j]);
        rl[i * n + j] = x[i * n + j] * inv2;
      }
    }
    INFO("n=" << n);
    CHECK(test::count_mismatches(std::span<const float>(y), std::span<const double>(ry), 1e-6, 1e-5) == 0);
    CHECK(test::count_mismatches(std::span<const float>(yg), std::span<const double>(rg), 1e-6, 1e-5) == 0);
    CHECK(test::count_mismatches(std::span<const float>(yl), std::span<const double>(rl), 1e-6, 1e-5) == 0);
  }
}

TEST_CASE("SiLU-GLU, SiTU-GLU (beta 4, linear beta 25, and untransformed up) match fp64", "[ops]") {
  test::rng r(12);
  const std::int64_t n = 333; // 20 full AVX-512 vectors and a tail of 13
  auto a = r.normals(n, 6.0f), b = r.normals(n, 40.0f);
  a[5] = 0.1f; // the tanh polynomial branch (|y| < 0.25 after a / 4)
  a[6] = -95.0f, a[7] = 95.0f, b[8] = 900.0f; // exp clamps, tanh saturation
  for (isa path : test::isa_paths()) {
    scoped_isa pin(path);
    INFO("isa=" << to_string(path));
    std::vector<float> s(n), t(n), t0(n);
    ops::silu_glu(a.data(), b.data(), n, s.data());
    ops::situ_glu(a.data(), b.data(), n, {4.0f, 25.0f}, t.data());
    ops::situ_glu(a.data(), b.data(), n, {4.0f, 0.0f}, t0.data());
    for (std::int64_t i = 0; i < n; ++i) {
      const double A = a[i], B = b[i];
      const double rs = A * sig(A) * B;
      const double rt = 4.0 * std::tanh(A / 4.0) * sig(A) * 25.0 * std::tanh(B / 25.0);
      const double rt0 = 4.0 * std::tanh(A / 4.0) * sig(A) * B;
      REQUIRE(std::fabs(s[i] - rs) <= 1e-5 * std::fabs(rs) + 1e-6);
      REQUIRE(std::fabs(t[i] - rt) <= 1e-5 * std::fabs(rt) + 1e-6);
      REQUIRE(std::fabs(t0[i] - rt0) <= 1e-5 * std::fabs(rt0) + 1e-6);
    }
    // Fused [gate | up] layout gives the same values.
    std::vector<float> gu(2 * n), f(n);
    for (std::int64_t i = 0; i < n; ++i) {
      gu[i] = a[i];
      gu[n + i] = b[i];
    }
    ops::situ_glu_fused(gu.data(), 1, n, {4.0f, 25.0f}, f.data());
    CHECK(f == t);
    // NaN in, NaN out, on both branches.
    const float nan_in[2] = {NAN, 1.0f}, one[2] = {1.0f, NAN};
    float o[2];
    ops::situ_glu(nan_in, one, 2, {4.0f, 25.0f}, o);
    CHECK((std::isnan(o[0]) && std::isnan(o[1])));
    ops::silu_glu(nan_in, one, 2, o);
    CHECK((std::isnan(o[0]) && std::isnan(o[1])));
  }
}

TEST_CASE("SiLU-GLU, SiTU-GLU: SIMD paths agree with the scalar path", "[ops]") {
  test::rng r(13);
  const std::int64_t n = 1000 + 7;
  auto a = r.normals(n, 8.0f), b = r.normals(n, 60.0f);
  std::vector<float> ss(n), st(n), vs(n), vt(n);
  {
    scoped_isa pin(isa::scalar);
    ops::silu_glu(a.data(), b.data(), n, ss.data());
    ops::situ_glu(a.data(), b.data(), n, {4.0f, 25.0f}, st.data());
  }
  for (isa path : test::isa_paths()) {
    scoped_isa pin(path);
    INFO("isa=" << to_string(path));
    ops::silu_glu(a.data(), b.data(), n, vs.data());
    ops::situ_glu(a.data(), b.data(), n, {4.0f, 25.0f}, vt.data());
    for (std::int64_t i = 0; i < n; ++i) {
      INFO("i=" << i << " a=" << a[i] << " b=" << b[i]);
      REQUIRE(std::fabs(vs[i] - ss[i]) <= 1e-6f * std::fabs(ss[i]) + 1e-30f);
      REQUIRE(std::fabs(vt[i] - st[i]) <= 1e-6f * std::fabs(st[i]) + 1e-30f);
    }
  }
}

TEST_CASE("fast_tanh and fast_sigmoid match fp64 over the whole range, NaN stays NaN", "[ops]") {
  double worst_t = 0, worst_s = 0;
  auto check_at = [&](float y) {
    const double t = std::tanh(static_cast<double>(y)), s = 1.0 / (1.0 + std::exp(-static_cast<double>(y)));
    worst_t = test::nan_max(worst_t, std::fabs(fast_tanh(y) - t) / std::max(std::fabs(t), 1e-30));
    worst_s = test::nan_max(worst_s, std::fabs(fast_sigmoid(y) - s) / std::max(s, 1e-30));
  };
  for (float y = -40.0f; y <= 40.0f; y += 0.001953125f) check_at(y); // includes ±0.25 exactly
  for (float y = 1e-30f; y < 1.0f; y *= 1.5f) {
    check_at(y);
    check_at(-y);
  }
  INFO("tanh " << worst_t << ", sigmoid " << worst_s);
  CHECK(worst_t <= 1e-6);
  CHECK(worst_s <= 1e-6); // relative, also where sigmoid is tiny (down to e^-40)
  CHECK(fast_tanh(0.0f) == 0.0f);
  CHECK(fast_tanh(100.0f) == 1.0f);
  CHECK(fast_tanh(-100.0f) == -1.0f);
  CHECK(std::isnan(fast_tanh(NAN)));
  CHECK(std::isnan(fast_sigmoid(NAN)));
}

TEST_CASE("softmax is stable for large logits and sums to one", "[ops]") {
  std::vector<float> x = {1000.0f, 999.0f, -1000.0f, 998.0f};
  ops::softmax(x.data(), 1, 4);
  const double z = 1 + std::exp(-1.0) + std::exp(-2.0);
  CHECK(x[0] == Approx(1 / z).epsilon(1e-6));
  CHECK(x[2] == 0.0f);
  CHECK(x[0] + x[1] + x[2] + x[3] == Approx(1.0f));
}

TEST_CASE("AttnRes mix matches the fp64 formula for 1..9 sources and past 64", "[ops][attnres]") {
  const std::uint64_t seed = 515;
  INFO("seed=" << seed);
  test::rng r(seed);
  for (std::int64_t n : {7, 64, 7168}) {
    auto nw = r.normals(n), pw = r.normals(n, 0.05f);
    std::vector<float> w(n);
    ops::attnres_fuse_weight(nw.data(), pw.data(), n, w.data());
    // 64 scores fit the kernel's stack buffer; 65 and 100 (a deep checkpoint in tiny blocks) do not.
    for (int S : {1, 2, 3, 4, 5, 6, 7, 8, 9, 64, 65, 100}) {
      std::vector<std::vector<float>> src;
      std::vector<const float*> ptr;
      for (int s = 0; s < S; ++s) src.push_back(r.normals(n, 0.5f + static_cast<float>(s % 9)));
      for (auto& v : src) ptr.push_back(v.data());
      std::vector<float> out(n);
      ops::attnres_mix(ptr.data(), S, w.data(), 1e-5f, n, out.data());
      std::vector<double> score(S);
      double mx = -1e300;
      for (int s = 0; s < S; ++s) {
        double ss = 0, dot = 0;
        for (std::int64_t d = 0; d < n; ++d) ss += double(src[s][d]) * src[s][d];
        const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
        for (std::int64_t d = 0; d < n; ++d) dot += src[s][d] * inv * (double(nw[d]) * pw[d]);
        score[s] = dot;
        mx = std::max(mx, dot);
      }
      double z = 0;
      for (auto& v : score) z += v = std::exp(v - mx);
      std::vector<double> ref(n, 0.0);
      for (int s = 0; s < S; ++s)
        for (std::int64_t d = 0; d < n; ++d) ref[d] += score[s] / z * src[s][d];
      INFO("n=" << n << " S=" << S);
      CHECK(test::rel_rmse(std::span<const float>(out), std::span<const double>(ref)) < 1e-5); // fp32 scores over 7168 terms; a wrong formula is ~1e-1
    }
  }
}

TEST_CASE("AttnRes batch form equals per-token mixes", "[ops][attnres]") {
  test::rng r(7);
  // Small (one thread), a decode batch at K3's width (the pool), and more sources than the
  // stack holds (each pool thread's heap row array).
  struct shape {
    std::int64_t T, n;
    int S;
  };
  for (const shape sh : {shape{5, 33, 4}, shape{37, 1536, 5}, shape{3, 257, 70}}) {
    const auto [T, n, S] = sh;
    std::vector<std::vector<float>> src;
    std::vector<const float*> ptr;
    for (int s = 0; s < S; ++s) src.push_back(r.normals(T * n));
    for (auto& v : src) ptr.push_back(v.data());
    auto w = r.normals(n, 0.1f);
    std::vector<float> batch(T * n), one(n);
    ops::attnres_mix_batch(ptr.data(), S, w.data(), 1e-5f, T, n, batch.data());
    for (std::int64_t t = 0; t < T; ++t) {
      std::vector<const float*> row;
      for (auto& v : src) row.push_back(v.data() + t * n);
      ops::attnres_mix(row.data(), S, w.data(), 1e-5f, n, one.data());
      INFO("T=" << T << " n=" << n << " S=" << S << " t=" << t);
      CHECK(std::equal(one.begin(), one.end(), batch.begin() + t * n));
    }
  }
}
