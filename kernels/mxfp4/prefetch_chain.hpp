#pragma once
// Software-prefetch addresses for the MXFP4 row kernels (mxfp4_gemm_avx512*.cpp, mxfp4_q8_avx2.cpp).
//
// A kernel call reads rows [r0, r1) of one expert matrix in R-row groups and prefetches the
// bytes a fixed number of rows ahead (at least two groups and at least 16 KiB of packed bytes:
// DRAM latency × one core's bandwidth). A decode step's expert matrices are small (the README's
// test checkpoint: 576 × 768, 235 KB), so a thread's prefetch reaches the end of its rows long
// before it finishes them; prefetching on past r1 in memory order fetched another expert's
// bytes, and the thread's next rows started cold. With next_rows the addresses past r1
// continue at the start of the thread's next rows instead. Prefetching only: past the end of
// anything, a prefetch never faults and never changes a result.

#include <algorithm>
#include <cstdint>

#include "kernels/mxfp4/mxfp4_gemm.hpp"

namespace k3::mxfp4::detail {

class prefetch_chain {
public:
  /// For a call over rows [.., r1) of w read in groups of group_rows rows.
  prefetch_chain(const matrix_view& w, std::int64_t r1, int group_rows, const next_rows& next) noexcept
      : w_(w), r1_(r1), next_(next), rb_(w.cols / 2), nb_(w.cols / block_size) {
    const std::int64_t group = group_rows * rb_;
    ahead_ = std::max<std::int64_t>(2, (min_bytes + group - 1) / group) * group_rows;
  }
  /// Where the packed-byte prefetch of the group starting at row r begins.
  [[nodiscard]] const std::uint8_t* packed(std::int64_t r) const noexcept {
    const std::int64_t a = r + ahead_;
    return a < r1_ || !next_.packed ? w_.packed + a * rb_ : next_.packed + (a - r1_) * rb_;
  }
  /// Where the scale-byte prefetch of the group starting at row r begins.
  [[nodiscard]] const std::uint8_t* scales(std::int64_t r) const noexcept {
    const std::int64_t a = r + ahead_;
    return a < r1_ || !next_.scales ? w_.scales + a * nb_ : next_.scales + (a - r1_) * nb_;
  }

private:
  static constexpr std::int64_t min_bytes = 16384;
  matrix_view w_;
  std::int64_t r1_;
  next_rows next_;
  std::int64_t rb_, nb_, ahead_ = 0;
};

} // namespace k3::mxfp4::detail
