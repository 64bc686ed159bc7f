#pragma once
// Shared helpers for the kernel tests: seeded random data and the comparison metrics used by
// the references (fla's relative RMSE, element-wise atol/rtol). Every random test states its
// seed with INFO so a failure report carries it.

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "kernels/common/cpu_features.hpp"

namespace k3::test {

/// Every SIMD path this CPU can run, scalar first (tests sweep them with k3::scoped_isa).
inline std::vector<isa> isa_paths() {
  std::vector<isa> v{isa::scalar};
  if (detected_isa() >= isa::avx2) v.push_back(isa::avx2);
  if (detected_isa() >= isa::avx512) v.push_back(isa::avx512);
  return v;
}

class rng {
public:
  explicit rng(std::uint64_t seed) : gen_(seed) {}
  /// Uniform in [lo, hi).
  float uniform(float lo = -1.f, float hi = 1.f) {
    return lo + (hi - lo) * static_cast<float>((gen_() >> 40) * (1.0 / 16777216.0));
  }
  /// Standard normal (Box–Muller on our own uniforms, so values are identical across libstdc++s).
  float normal() {
    double u1 = ((gen_() >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (gen_() >> 11) * (1.0 / 9007199254740992.0);
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  std::uint64_t bits() { return gen_(); }
  int below(int n) { return static_cast<int>(gen_() % static_cast<std::uint64_t>(n)); }
  std::vector<float> normals(std::size_t n, float scale = 1.f) {
    std::vector<float> v(n);
    for (auto& x : v) x = scale * normal();
    return v;
  }
  std::vector<float> uniforms(std::size_t n, float lo = -1.f, float hi = 1.f) {
    std::vector<float> v(n);
    for (auto& x : v) x = uniform(lo, hi);
    return v;
  }

private:
  std::mt19937_64 gen_;
};

/// fla's metric: rmse(ref − got) / rmse(ref).
template <class A, class B>
double rel_rmse(std::span<const A> got, std::span<const B> ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(ref[i]);
    num += d * d;
    den += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

/// max(a, b) that propagates NaN: std::max(worst, NaN) and std::fmax drop it, so an all-NaN
/// output would pass an error bound. Every error reduction in the tests goes through this.
inline double nan_max(double a, double b) noexcept { return (a != a || b != b) ? std::nan("") : (a < b ? b : a); }

template <class A, class B>
double max_abs_diff(std::span<const A> got, std::span<const B> ref) {
  double m = 0;
  for (std::size_t i = 0; i < ref.size(); ++i)
    m = nan_max(m, std::fabs(static_cast<double>(got[i]) - static_cast<double>(ref[i])));
  return m;
}

/// Count of elements violating |got − ref| ≤ atol + rtol·|ref| (NaN counts as a violation).
template <class A, class B>
std::size_t count_mismatches(std::span<const A> got, std::span<const B> ref, double atol, double rtol) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double g = static_cast<double>(got[i]), r = static_cast<double>(ref[i]);
    if (!(std::fabs(g - r) <= atol + rtol * std::fabs(r))) ++bad;
  }
  return bad;
}

} // namespace k3::test
