#include "kernels/vit/vit_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <cblas.h>

#include "kernels/common/fast_math.hpp"
#include "kernels/common/parallel.hpp"

namespace k3::vit {

void attention(const float* q, std::int64_t ldq, const float* k, std::int64_t ldk, const float* v, std::int64_t ldv,
               std::int64_t L, int heads, int d, float scale, float* out, std::int64_t ldo) {
  constexpr std::int64_t tile = 64;
  const std::int64_t tiles = (L + tile - 1) / tile;
  const int nthreads = kernel_threads();
  std::vector<std::vector<float>> scratch(static_cast<std::size_t>(std::max(1, nthreads)));
  parallel_for(tiles * heads, [&](std::int64_t item) {
    const int h = static_cast<int>(item % heads);
    const std::int64_t t0 = (item / heads) * tile, n = std::min(tile, L - t0);
    auto& s = scratch[static_cast<std::size_t>(omp_get_thread_num()) % scratch.size()];
    s.resize(static_cast<std::size_t>(tile * L));
    const float* qh = q + t0 * ldq + static_cast<std::int64_t>(h) * d;
    const float* kh = k + static_cast<std::int64_t>(h) * d;
    const float* vh = v + static_cast<std::int64_t>(h) * d;
    float* oh = out + t0 * ldo + static_cast<std::int64_t>(h) * d;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(L), d, scale, qh,
                static_cast<int>(ldq), kh, static_cast<int>(ldk), 0.0f, s.data(), static_cast<int>(L));
    float inv[tile];
    for (std::int64_t r = 0; r < n; ++r) {
      float* row = s.data() + r * L;
      float m = -std::numeric_limits<float>::infinity();
      bool nan = false;
      for (std::int64_t j = 0; j < L; ++j) {
        nan |= std::isnan(row[j]);
        m = row[j] > m ? row[j] : m;
      }
      if (nan) m = std::numeric_limits<float>::quiet_NaN(); // poison the row: NaN propagates
      float sum = 0.0f;
      for (std::int64_t j = 0; j < L; ++j) {
        const float e = fast_exp(row[j] - m);
        row[j] = e;
        sum += e;
      }
      inv[r] = nan ? std::numeric_limits<float>::quiet_NaN() : 1.0f / sum;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), d, static_cast<int>(L), 1.0f, s.data(),
                static_cast<int>(L), vh, static_cast<int>(ldv), 0.0f, oh, static_cast<int>(ldo));
    for (std::int64_t r = 0; r < n; ++r)
      for (int c = 0; c < d; ++c) oh[r * ldo + c] *= inv[r];
  });
}

void attention_ref(const float* q, std::int64_t ldq, const float* k, std::int64_t ldk, const float* v, std::int64_t ldv,
                   std::int64_t L, int heads, int d, float scale, float* out, std::int64_t ldo) {
  std::vector<double> s(static_cast<std::size_t>(L)), acc(static_cast<std::size_t>(d));
  for (int h = 0; h < heads; ++h)
    for (std::int64_t t = 0; t < L; ++t) {
      double m = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < L; ++j) {
        double dot = 0;
        for (int c = 0; c < d; ++c) dot += static_cast<double>(q[t * ldq + h * d + c]) * k[j * ldk + h * d + c];
        s[static_cast<std::size_t>(j)] = dot * scale;
        m = std::isnan(dot) || std::isnan(m) ? std::numeric_limits<double>::quiet_NaN() : std::max(m, s[static_cast<std::size_t>(j)]);
      }
      double sum = 0;
      for (auto& x : s) sum += (x = std::exp(x - m));
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::int64_t j = 0; j < L; ++j)
        for (int c = 0; c < d; ++c) acc[static_cast<std::size_t>(c)] += s[static_cast<std::size_t>(j)] * v[j * ldv + h * d + c];
      for (int c = 0; c < d; ++c) out[t * ldo + h * d + c] = static_cast<float>(acc[static_cast<std::size_t>(c)] / sum);
    }
}

} // namespace k3::vit
