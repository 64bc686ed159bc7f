#pragma once
// Software prefetch for the bf16 GEMV micro-kernels (gemv_bf16_*.cpp).
//
// A micro-kernel reads an R-row block of W (R · k contiguous bf16) as R interleaved streams, a
// 64-byte line of each row per step. Prefetching along each row (a fixed distance ahead in that
// row) left the GEMV at ~0.8 of a streaming read on the test checkpoint's shapes (k = 64…7168,
// 2-thread Zen 5); instead one prefetch per 64 bytes consumed walks the bytes ahead in memory
// order — the next block, line by line, as this one is read — which measured 0.93–1.1 of the
// same streaming read at 2 threads and ~0.92 at 1 thread (k = 1536). The distance is one block,
// and at least 8 KiB so that blocks of short rows (k = 64, 256) still look far enough ahead to
// cover DRAM latency. Prefetches past the end of W are harmless (they never fault).
// The lines go to L2 (T1), not L1: on the 2-vCPU Zen 5 the decode GEMVs of the test checkpoint
// (`k3 bench kernels --only dense`, last table) ran 0.81/0.81/0.88 of streaming at 2 threads and
// 0.86/0.82/0.99 at 1 with T0, against 0.92/0.94/0.84 and 0.92/0.88/0.89 with T1, the two builds
// alternating (µs per token at 2 threads 11.7–12.4 k → 10.7–11.7 k); L1 fills from L2 on its own
// prefetcher without 256 software prefetches in flight competing for its fill buffers. Not
// measured on the Xeons; the MXFP4 kernels (instruction-bound) keep T0, where T1 measured no
// better.

#include <cstdint>

#include <xmmintrin.h>

#include "kernels/common/bf16.hpp"

namespace k3::dense::detail {

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
