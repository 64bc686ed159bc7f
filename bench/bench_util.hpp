#pragma once
// Small helpers shared by the kernel benchmarks: wall-clock timing, a streaming-read baseline
// over the same bytes the kernel reads, and fixed-width table output.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace k3::bench {

/// Seconds since an arbitrary epoch (steady clock).
[[nodiscard]] inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// max that keeps NaN (std::max(a, NaN) returns a, which would let a NaN error pass validation).
[[nodiscard]] inline double nan_max(double a, double b) noexcept { return (a != a || b != b) ? a + b : (a < b ? b : a); }

/// Runs fn() until at least min_seconds have passed (and at least min_reps times); returns the
/// best per-call time of `trials` such batches (best-of filters out neighbours on a shared box).
double time_best(const std::function<void()>& fn, double min_seconds, int trials = 3, int min_reps = 1);

/// Best per-call times of a and b, measured alternately (3 rounds, `seconds` in total) so both
/// see the same state of a shared machine. Returns {time_a, time_b}.
std::pair<double, double> time_pair(const std::function<void()>& a, const std::function<void()>& b, double seconds);
/// The same for any number of functions, measured in turn each round.
std::vector<double> time_alternating(const std::vector<std::function<void()>>& fns, double seconds);

/// Reads `bytes` bytes starting at each pointer of `regions` with wide loads on all kernel
/// threads; returns the checksum so the compiler cannot drop the loads.
std::uint64_t stream_read(const std::vector<std::pair<const std::uint8_t*, std::int64_t>>& regions);

/// Zeroed anonymous memory of `bytes` bytes, 2 MiB-aligned and advised for transparent huge
/// pages (what the model's in-memory weight copy uses), so a kernel and the streaming read over
/// it see the same page size as decode does. Throws std::bad_alloc if it cannot be mapped.
class huge_buffer {
public:
  explicit huge_buffer(std::size_t bytes);
  ~huge_buffer();
  huge_buffer(const huge_buffer&) = delete;
  huge_buffer& operator=(const huge_buffer&) = delete;
  template <class T>
  [[nodiscard]] T* as() const noexcept {
    return static_cast<T*>(p_);
  }

private:
  void* map_ = nullptr;
  std::size_t len_ = 0;
  void* p_ = nullptr;
};

/// A printed table: header once, then rows; columns right-aligned to fixed widths.
class table {
public:
  explicit table(std::vector<std::pair<std::string, int>> columns);
  void row(const std::vector<std::string>& cells);

private:
  std::vector<std::pair<std::string, int>> cols_;
};

[[nodiscard]] std::string fmt(double v, int decimals = 2);

} // namespace k3::bench
