#include "bench/bench_util.hpp"

#include <algorithm>
#include <atomic>
#include <new>

#include <sys/mman.h>

#include "kernels/common/parallel.hpp"

#include <immintrin.h>

namespace k3::bench {
namespace {

__attribute__((target("avx512f"))) std::uint64_t sum512(const std::uint8_t* p, std::int64_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  std::int64_t i = 0;
  for (; i + 256 <= n; i += 256) {
    a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(p + i + 64));
    a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(p + i + 128));
    a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(p + i + 192));
  }
  // Reduce as unsigned (the intrinsic's reduction is a signed add, UB on wrap-around).
  alignas(64) std::uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  std::uint64_t s = 0;
  for (std::uint64_t v : lanes) s += v;
  for (; i < n; ++i) s += p[i];
  return s;
}

// The AVX2 form: without it AVX2-only CPUs timed a 64-bit scalar loop that reads ~1.5× slower
// than their bf16 GEMV streams, so every ratio to streaming came out above 1.
__attribute__((target("avx2"))) std::uint64_t sum256(const std::uint8_t* p, std::int64_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  std::int64_t i = 0;
  for (; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  alignas(32) std::uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  std::uint64_t s = 0;
  for (std::uint64_t v : lanes) s += v;
  for (; i < n; ++i) s += p[i];
  return s;
}

std::uint64_t sum_generic(const std::uint8_t* p, std::int64_t n) {
  std::uint64_t s0 = 0, s1 = 0;
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    std::uint64_t a, b;
    __builtin_memcpy(&a, p + i, 8);
    __builtin_memcpy(&b, p + i + 8, 8);
    s0 += a;
    s1 += b;
  }
  for (; i < n; ++i) s0 += p[i];
  return s0 + s1;
}

} // namespace

double time_best(const std::function<void()>& fn, double min_seconds, int trials, int min_reps) {
  double best = 1e300;
  for (int t = 0; t < trials; ++t) {
    int reps = 0;
    const double t0 = now_s();
    double t1 = t0;
    while (reps < min_reps || t1 - t0 < min_seconds) {
      fn();
      ++reps;
      t1 = now_s();
    }
    best = std::min(best, (t1 - t0) / reps);
  }
  return best;
}

std::vector<double> time_alternating(const std::vector<std::function<void()>>& fns, double seconds) {
  std::vector<double> best(fns.size(), 1e300);
  const double each = seconds / (3.0 * static_cast<double>(fns.size()));
  for (int rep = 0; rep < 3; ++rep)
    for (std::size_t i = 0; i < fns.size(); ++i) best[i] = std::min(best[i], time_best(fns[i], each, 1));
  return best;
}

std::pair<double, double> time_pair(const std::function<void()>& a, const std::function<void()>& b,
                                   double seconds) {
  const auto t = time_alternating({a, b}, seconds);
  return {t[0], t[1]};
}

std::uint64_t stream_read(const std::vector<std::pair<const std::uint8_t*, std::int64_t>>& regions) {
  // Same work split as the kernels: chunks of ~256 KiB handed out dynamically.
  constexpr std::int64_t chunk = 256 << 10;
  struct piece {
    const std::uint8_t* p;
    std::int64_t n;
  };
  std::vector<piece> pieces;
  for (const auto& [p, n] : regions)
    for (std::int64_t o = 0; o < n; o += chunk) pieces.push_back({p + o, std::min(chunk, n - o)});
  const bool wide = __builtin_cpu_supports("avx512f"), avx2 = __builtin_cpu_supports("avx2");
  std::atomic<std::uint64_t> total{0};
  parallel_for(static_cast<std::int64_t>(pieces.size()), [&](std::int64_t i) {
    const auto& pc = pieces[static_cast<std::size_t>(i)];
    total.fetch_add(wide ? sum512(pc.p, pc.n) : avx2 ? sum256(pc.p, pc.n) : sum_generic(pc.p, pc.n),
                    std::memory_order_relaxed);
  });
  return total.load();
}

huge_buffer::huge_buffer(std::size_t bytes) {
  constexpr std::size_t huge = 2u << 20;
  len_ = (bytes + 2 * huge - 1) / huge * huge;
  map_ = mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw std::bad_alloc();
  }
  p_ = reinterpret_cast<void*>((reinterpret_cast<std::uintptr_t>(map_) + huge - 1) & ~(std::uintptr_t{huge} - 1));
  (void)madvise(p_, len_ - huge, MADV_HUGEPAGE); // advice only: 4 KiB pages if refused
}

huge_buffer::~huge_buffer() {
  if (map_ != nullptr) munmap(map_, len_);
}

table::table(std::vector<std::pair<std::string, int>> columns) : cols_(std::move(columns)) {
  std::string line, rule;
  for (const auto& [name, w] : cols_) {
    line += std::string(static_cast<std::size_t>(std::max<int>(0, w - static_cast<int>(name.size()))), ' ') + name + "  ";
    rule += std::string(static_cast<std::size_t>(w), '-') + "  ";
  }
  std::printf("%s\n%s\n", line.c_str(), rule.c_str());
}

void table::row(const std::vector<std::string>& cells) {
  std::string line;
  for (std::size_t i = 0; i < cells.size() && i < cols_.size(); ++i) {
    const int w = cols_[i].second;
    line += std::string(static_cast<std::size_t>(std::max<int>(0, w - static_cast<int>(cells[i].size()))), ' ')
            + cells[i] + "  ";
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::string fmt(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

} // namespace k3::bench
