#pragma once
// Random MXFP4 matrices for the kernel tests: uniform codes and scale bytes 118..129, so the
// values stay in a range where fp32 sums are well conditioned.

#include <cstdint>

#include "kernels/mxfp4/mxfp4_format.hpp"
#include "tests/support/test_util.hpp"

namespace k3::test {

inline mxfp4::packed_matrix random_mxfp4(rng& r, std::int64_t rows, std::int64_t cols) {
  mxfp4::packed_matrix m;
  m.rows = rows;
  m.cols = cols;
  m.packed.resize(static_cast<std::size_t>(rows * cols / 2));
  m.scales.resize(static_cast<std::size_t>(rows * cols / 32));
  for (auto& b : m.packed) b = static_cast<std::uint8_t>(r.bits());
  for (auto& s : m.scales) s = static_cast<std::uint8_t>(118 + r.below(12));
  return m;
}

} // namespace k3::test
