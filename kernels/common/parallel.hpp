#pragma once
// Data-parallel loops for the CPU kernels.
//
// One primitive, parallel_for(n, fn): fn(i) runs for every i in [0, n) on the kernel thread
// pool (OpenMP underneath, shared with the OpenMP build of OpenBLAS so the two never
// oversubscribe). Work is handed out dynamically in single items, so callers choose item
// granularity (rows, heads, expert tiles) big enough to amortise scheduling (~1 µs).
// Nested calls run serially in the calling thread. fn must not throw.

#include <atomic>
#include <cstdint>

#include <omp.h>

namespace k3 {

/// Parallel regions entered so far (all threads; relaxed). Benchmarks read it to report
/// fork/join barriers per decode step — the fixed cost that dominates small models.
inline std::atomic<std::uint64_t> parallel_regions{0};

/// Number of threads parallel_for uses (OMP_NUM_THREADS or the core count).
[[nodiscard]] inline int kernel_threads() noexcept { return omp_get_max_threads(); }

template <class Fn>
void parallel_for(std::int64_t n, Fn&& fn) {
  if (n <= 0) return;
  if (n == 1 || omp_in_parallel() || omp_get_max_threads() == 1) {
    for (std::int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  parallel_regions.fetch_add(1, std::memory_order_relaxed);
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t i = 0; i < n; ++i) fn(i);
}

/// Below this many multiply-adds (or comparable inner-loop steps) a call runs on the calling
/// thread: a fork/join costs a few µs — more than two threads save on ~64 Ki operations — and a
/// small model's decode step is made of such calls.
inline constexpr std::int64_t min_parallel_work = std::int64_t{1} << 16;

/// parallel_for when `work` (the whole call's operation count) is worth a fork/join, else a
/// plain loop on this thread. Same contract as parallel_for.
template <class Fn>
void parallel_for_work(std::int64_t n, std::int64_t work, Fn&& fn) {
  if (work < min_parallel_work) {
    for (std::int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  parallel_for(n, static_cast<Fn&&>(fn));
}

/// Runs fn(thread_index, num_threads) once on every pool thread (for static partitions).
template <class Fn>
void parallel_threads(Fn&& fn) {
  if (omp_in_parallel() || omp_get_max_threads() == 1) {
    fn(0, 1);
    return;
  }
  parallel_regions.fetch_add(1, std::memory_order_relaxed);
#pragma omp parallel
  fn(omp_get_thread_num(), omp_get_num_threads());
}

} // namespace k3
