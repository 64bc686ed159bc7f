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
#include <memory>
#include <span>

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

/// Pieces [0, n) of a call, n = first.back() < 2^31, over the pool threads in contiguous runs
/// that balance themselves. Run i is pieces [first[i], first[i+1]) (first: non-decreasing,
/// first[0] = 0); pool thread i takes run i front to back, then, its run done, takes pieces from
/// the back of whichever run has the most left, one at a time. So each thread streams through
/// contiguous memory as with one static range per thread, yet a thread held up (a busy shared
/// core, an uneven cost estimate) no longer holds the join: the others finish its run's tail.
/// Callers make runs of equal estimated cost, one per thread (kernel_threads()); runs beyond the
/// team are taken by stealing. fn(p, next) runs piece p; next is the piece this thread expects
/// to run after it (the following one of the run it is taking from the front, the preceding one
/// when stealing) or -1 — a prefetch hint, since another thread may take it first. Serially
/// (one thread, inside a parallel region) the pieces run in order 0 … n−1. Every piece runs
/// exactly once; fn must not throw.
template <class Fn>
void parallel_pieces(std::span<const std::int64_t> first, Fn&& fn) {
  if (first.size() < 2) return;
  const std::int64_t n = first.back();
  if (n <= 0) return;
  if (omp_in_parallel() || omp_get_max_threads() == 1) {
    for (std::int64_t p = 0; p < n; ++p) fn(p, p + 1 < n ? p + 1 : -1);
    return;
  }
  // Each run's [front, back) as one word (front low, back high), its own cache line.
  struct alignas(64) run_state {
    std::atomic<std::uint64_t> fb;
  };
  const std::size_t runs = first.size() - 1;
  const std::unique_ptr<run_state[]> st(new run_state[runs]);
  constexpr std::uint64_t low = 0xffffffffu;
  auto pack = [](std::uint64_t f, std::uint64_t b) { return f | b << 32; };
  for (std::size_t r = 0; r < runs; ++r)
    st[r].fb.store(pack(static_cast<std::uint64_t>(first[r]), static_cast<std::uint64_t>(first[r + 1])),
                   std::memory_order_relaxed);
  // Takes the front (owner) or back (thief) piece of run r; -1 when it is empty.
  auto take = [&](std::size_t r, bool front) -> std::int64_t {
    std::uint64_t v = st[r].fb.load(std::memory_order_relaxed);
    for (;;) {
      const std::uint64_t f = v & low, b = v >> 32;
      if (f >= b) return -1;
      const std::uint64_t nv = front ? pack(f + 1, b) : pack(f, b - 1);
      if (st[r].fb.compare_exchange_weak(v, nv, std::memory_order_relaxed))
        return static_cast<std::int64_t>(front ? f : b - 1);
    }
  };
  parallel_threads([&](int ti, int) {
    const auto own = static_cast<std::size_t>(ti);
    if (own < runs)
      for (std::int64_t p = take(own, true); p >= 0;) {
        const std::uint64_t v = st[own].fb.load(std::memory_order_relaxed);
        fn(p, (v & low) < (v >> 32) ? static_cast<std::int64_t>(v & low) : -1);
        p = take(own, true);
      }
    for (;;) {
      std::size_t victim = runs;
      std::uint64_t most = 0;
      for (std::size_t r = 0; r < runs; ++r) {
        const std::uint64_t v = st[r].fb.load(std::memory_order_relaxed), f = v & low, b = v >> 32;
        if (b > f && b - f > most) most = b - f, victim = r;
      }
      if (victim == runs) return;
      const std::int64_t p = take(victim, false);
      if (p < 0) continue;
      const std::uint64_t v = st[victim].fb.load(std::memory_order_relaxed);
      fn(p, static_cast<std::int64_t>(v & low) < p ? p - 1 : -1);
    }
  });
}

} // namespace k3
