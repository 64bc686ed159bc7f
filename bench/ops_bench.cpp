// `k3 bench kernels --only ops`: the elementwise kernels of a prefill step — SiTU-GLU (K3),
// SiLU-GLU (Kimi Linear) and KDA's short convolution + SiLU — on the active ISA against the
// scalar path, same inputs, same run. Each validates the active path against the scalar one
// (within 1e-5 relative + 1e-6) before timing.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "bench/kernel_bench.hpp"
#include "kernels/common/cpu_features.hpp"
#include "kernels/kda/kda.hpp"
#include "kernels/ops/activations.hpp"

namespace k3::bench {

int run_ops_bench(const kernel_bench_options& opts) {
  // One MoE layer's GLU at pp512 on bench3-like sizes (512 tokens × top-8 × 1024), and the KDA
  // conv of a 512-token chunk over q, k and v of 16 heads × 128.
  const std::int64_t n = opts.quick ? 65536 : 512 * 8 * 1024;
  const std::int64_t T = opts.quick ? 64 : 512, C = 3 * 16 * 128;
  const int K = 4;
  std::vector<float> a(n), b(n), o(n), ref(n);
  for (std::int64_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(6.0 * std::sin(0.013 * static_cast<double>(i)));
    b[i] = static_cast<float>(40.0 * std::cos(0.007 * static_cast<double>(i)));
  }
  std::vector<float> x(static_cast<std::size_t>(T * C)), w(static_cast<std::size_t>(C * K)), y(x.size()), yref(x.size()),
      st(static_cast<std::size_t>(C * (K - 1)));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(0.5 * std::cos(0.11 * static_cast<double>(i)));

  const isa active = active_isa();
  std::printf("\nElementwise kernels, %lld GLU elements, KDA conv %lld tokens x %lld channels (K = %d), 1 thread "
              "for the GLU (the conv on the kernel pool in both forms), isa=%s vs scalar\n",
              (long long)n, (long long)T, (long long)C, K, std::string(to_string(active)).c_str());
  struct kernel {
    const char* name;
    std::int64_t elems;
    std::function<void(float*)> run;
  };
  const ops::situ_params sp{4.0f, 25.0f};
  std::vector<kernel> ks = {
      {"SiTU-GLU (K3)", n, [&](float* out) { ops::situ_glu(a.data(), b.data(), n, sp, out); }},
      {"SiLU-GLU (Kimi Linear)", n, [&](float* out) { ops::silu_glu(a.data(), b.data(), n, out); }},
      {"KDA short conv + SiLU", T * C, [&](float* out) {
         std::fill(st.begin(), st.end(), 0.0f);
         kda::short_conv(x.data(), T, C, w.data(), K, st.data(), out);
       }},
  };
  table t({{"kernel", 24}, {"scalar ns/elem", 15}, {"active ns/elem", 15}, {"speed-up", 9}});
  int rc = 0;
  for (auto& k : ks) {
    float* out = k.elems == n ? o.data() : y.data();
    float* want = k.elems == n ? ref.data() : yref.data();
    double ts = 0, ta = 0;
    {
      scoped_isa pin(isa::scalar);
      k.run(want);
      ts = time_best([&] { k.run(want); }, opts.min_seconds);
    }
    k.run(out);
    // |active − scalar| ≤ 1e-5·|scalar| + 1e-6 (the kernel tests' bound against fp64; the conv's
    // sums cancel, so near-zero outputs carry an absolute term). NaN-keeping maximum.
    double worst = 0;
    for (std::int64_t i = 0; i < k.elems; ++i) {
      const double e = std::fabs(out[i] - want[i]) / (1e-5 * std::fabs(want[i]) + 1e-6);
      if (!(e <= worst)) worst = e;
    }
    if (!(worst <= 1.0)) {
      std::printf("%s: validation FAILED, worst difference to scalar %.2f of the bound\n", k.name, worst);
      rc = 1;
      continue;
    }
    ta = time_best([&] { k.run(out); }, opts.min_seconds);
    const double e = static_cast<double>(k.elems);
    t.row({k.name, fmt(ts / e * 1e9, 2), fmt(ta / e * 1e9, 2), fmt(ts / ta, 1)});
  }
  return rc;
}

} // namespace k3::bench
