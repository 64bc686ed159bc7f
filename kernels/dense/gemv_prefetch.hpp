#pragma once
// Software prefetch and row order for the bf16 GEMV micro-kernels (gemv_bf16_*.cpp).
//
// Row order. A micro-kernel reads R rows at a time, a 64-byte line of each per step. Rows that
// are neighbours in memory (a contiguous R-row block) make R interleaved streams only one row
// long (3 KiB at k = 1536), too short for the hardware prefetchers, which then leave the
// software prefetch alone to find the bytes: one core reached 0.59–0.86 of a streaming read of
// the same huge-page bytes (2-vCPU Zen 5, k = 7168…256; 8–11 GB/s with no software prefetch at
// all). Reading a thread's rows [n0, n1) instead as R *quarters* — rows j, j + q, j + 2q, j + 3q
// for q = (n1 − n0) / R — makes R streams each as long as the quarter, which the hardware
// follows; with a prefetch 2 KiB ahead along each stream into L1 the same core measured
// 0.96–0.98 of the streaming read at 1 thread and 0.99–1.10 at 2 (a throwaway driver over
// 470 MB at k = 7168, 1536, 256, alternating with the read). Each row's sum is the same
// instructions in the same order either way, so results are bit-identical to the block order.
// Rows shorter than 256 bytes (k < 128) keep the block order: per row, the reduction of the
// accumulators then costs more than the memory stalls it would save.
//
// block_prefetch (the block order): one prefetch per 64 bytes consumed walks the bytes ahead in
// memory order — the next block, line by line, as this one is read — at a distance of one
// block and at least 8 KiB so that blocks of short rows still look far enough ahead; into L2
// (T1), which measured better than L1 for this order on the Zen 5. Prefetches past the end of W
// are harmless (they never fault).

#include <cstdint>

#include <xmmintrin.h>

#include "kernels/common/bf16.hpp"

namespace k3::dense::detail {

/// Rows of at least this many bytes are read in the quarter order (see above).
inline constexpr std::int64_t stream_min_row_bytes = 256;
/// How far ahead along each row stream the quarter order prefetches (into L1).
inline constexpr std::int64_t stream_distance = 2048;

/// One prefetch for the line `stream_distance` bytes past p (the line being read in a stream).
inline void stream_prefetch(const bf16_t* p) noexcept {
  _mm_prefetch(reinterpret_cast<const char*>(p) + stream_distance, _MM_HINT_T0);
}

class block_prefetch {
public:
  /// For a block of `rows` rows of length k starting at w.
  block_prefetch(const bf16_t* w, int rows, std::int64_t k) noexcept
      : p_(reinterpret_cast<const char*>(w) + distance(rows, k)) {}
  /// One call per 64 bytes of the block consumed.
  void line() noexcept {
    _mm_prefetch(p_, _MM_HINT_T1);
    p_ += 64;
  }

private:
  static std::int64_t distance(int rows, std::int64_t k) noexcept {
    const std::int64_t block = rows * k * static_cast<std::int64_t>(sizeof(bf16_t));
    return block > min_distance ? block : min_distance;
  }
  static constexpr std::int64_t min_distance = 8192;
  const char* p_;
};

} // namespace k3::dense::detail
