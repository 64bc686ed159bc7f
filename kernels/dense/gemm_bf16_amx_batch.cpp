// AMX bf16 GEMM for batched decode (2 … 64 tokens): y[t, r] = Σ_s Σ_k xs_s[t, k] · w[r, k].
//
// At these sizes the weights are read once and each weight meets only m tokens, so the kernel
// must stream W at memory speed with as little work per weight as possible. The roles are the
// reverse of the prefill kernel (gemm_bf16_amx.cpp): the weights are the A operand, which AMX
// takes as plain rows — a 16-row × 32-column A tile is 16 rows of W as stored, loaded in place
// with the row pitch as stride, so W needs no packing and no pass other than the tile load. The
// activations are the B operand (VNNI: row = a pair of k, one column per token), made once per
// call from the split rows (vnni_tiles). A C tile is then 16 rows of W × 16 tokens; the last
// k-block transposes it into y.
//
// Blocking: G = ⌈m/16⌉ token groups × R row tiles of accumulators, R·G C tiles + R A tiles +
// one B tile ≤ 8: G = 1 → R = 3, G = 2 → R = 2, G = 3, 4 → R = 1 (leftover row tiles run R = 1).
// Every B tile is reused by the R row tiles, every A tile by the G groups and the splits. The
// k range runs in blocks whose B tiles (splits · G KiB per 32 columns) fit in L2 (~1.5 MiB);
// between k-blocks the accumulators wait in a per-thread buffer. B tiles alternate between two
// registers. On the 2-core Xeon a tile load costs ~50 cycles of throughput (three TDPBF16PS), a
// strided one more, so loads, not products, bound the kernel: one A load feeds R·G·splits
// products, one B load R. Each (t, r) sum runs over
// the 32-column chunks in order, all splits within a chunk — the prefill kernel's order — and
// does not depend on m, the k-blocks or the row partition.
//
// Only this file's functions are compiled for AMX; callers check amx_bf16_available().
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/dense/dense_gemm.hpp"

#include <immintrin.h>

#include "kernels/common/amx_tiles.hpp"

namespace k3::dense::detail {
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,amx-tile,amx-bf16")

namespace {

// f(std::integral_constant<int, 0>{}), …, f(std::integral_constant<int, N − 1>{}): tile
// numbers must be constants.
template <int N, class F>
inline void unroll(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) { (f(std::integral_constant<int, I>{}), ...); }(
      std::make_integer_sequence<int, N>{});
}

// 32-column chunks per k-block: B tiles (splits · groups KiB per chunk) up to ~1.5 MiB, in L2.
// Short k-blocks cost more than their accumulator traffic — each restarts the 16-row streams
// through W: 6144 × 7168, one thread, 16 tokens, fp32 activations, 7.1 GB/s in 128-chunk blocks
// against 11.7 in one; 64 tokens, B 2.7 MiB: 2.3 GB/s in one block, 3.4–3.5 in 32- or 64-chunk
// blocks, 4.3–4.5 in 128-chunk blocks.
std::int64_t kblock_chunks(int splits, int groups) { return std::max<std::int64_t>(32, 1536 / (splits * groups)); }

constexpr std::int64_t prefetch_chunks = 4;

// One k-block [c0, c0 + nc) of the R row tiles from `row`. tail: the R A tiles of a partial
// last chunk (zeros past k), or null. first: accumulators start at zero, else from acc; last:
// results go to y, else back to acc (R·G tiles of 256 floats, tile C[r][g] at r·G + g).
template <int S, int G, int R>
void run_block(const bf16_t* xb, std::int64_t split_stride, std::int64_t chunks, const bf16_t* w,
               std::int64_t k, std::int64_t row, std::int64_t c0, std::int64_t nc, const bf16_t* tail, bool first,
               bool last, float* acc, float* y, std::int64_t ldy, std::int64_t m) {
  static_assert(R * G + R + 2 <= 8, "eight tile registers");
  constexpr int a0 = R * G, b0 = R * G + R;
  const std::int64_t pitch = k * static_cast<std::int64_t>(sizeof(bf16_t));
  unroll<R * G>([&](auto ct) {
    if (first) amx::tzero<decltype(ct)::value>();
    else amx::tload<decltype(ct)::value>(acc + decltype(ct)::value * 256, 64);
  });
  for (std::int64_t c = c0; c < c0 + nc; ++c) {
    const bool partial = tail && c == chunks - 1;
    // The rows' lines a few chunks ahead (within noise of none on the 2-core Xeon, where the
    // hardware prefetcher follows the 16-row streams; kept for machines whose prefetcher
    // tracks fewer streams).
    if (c + prefetch_chunks < chunks)
      for (int i = 0; i < 16 * R; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(w + (row + i) * k + 32 * (c + prefetch_chunks)), _MM_HINT_T0);
    unroll<R>([&](auto r) {
      constexpr int ri = decltype(r)::value;
      if (partial) amx::tload<a0 + ri>(tail + ri * 512, 64);
      else amx::tload<a0 + ri>(w + (row + 16 * ri) * k + 32 * c, pitch);
    });
    // B tiles alternate between two registers so that a load need not wait for the previous
    // tile's products.
    unroll<S * G>([&](auto sg) {
      constexpr int si = decltype(sg)::value / G, gi = decltype(sg)::value % G, bt = b0 + decltype(sg)::value % 2;
      amx::tload<bt>(xb + si * split_stride + c * 512 + gi * chunks * 512, 64);
      unroll<R>([&](auto r) { amx::tdp_bf16<decltype(r)::value * G + gi, a0 + decltype(r)::value, bt>(); });
    });
  }
  if (!last) {
    unroll<R * G>([&](auto ct) { amx::tstore<decltype(ct)::value>(acc + decltype(ct)::value * 256, 64); });
    return;
  }
  // C[r][g] holds rows row + 16r + i (tile rows) × tokens 16g + j (columns): transpose to y.
  alignas(64) float tile[256];
  unroll<R * G>([&](auto ct) {
    constexpr int ri = decltype(ct)::value / G, gi = decltype(ct)::value % G;
    amx::tstore<decltype(ct)::value>(tile, 64);
    __m512i v[16];
    for (int i = 0; i < 16; ++i) v[i] = _mm512_load_si512(tile + 16 * i);
    amx::transpose16x16_epi32(v);
    const std::int64_t tokens = std::min<std::int64_t>(16, m - 16 * gi);
    for (std::int64_t j = 0; j < tokens; ++j)
      _mm512_storeu_si512(y + (16 * gi + j) * ldy + row + 16 * ri, v[j]);
  });
}

// The A tiles of rows [row, row + 16R) in the partial last chunk, zero-padded past k.
void tail_tiles(const bf16_t* w, std::int64_t k, std::int64_t row, int R, bf16_t* dst) {
  const std::int64_t k0 = k / 32 * 32;
  const __mmask32 mask = static_cast<__mmask32>((std::uint64_t{1} << (k - k0)) - 1);
  for (int i = 0; i < 16 * R; ++i)
    _mm512_store_si512(dst + 32 * i, _mm512_maskz_loadu_epi16(mask, w + (row + i) * k + k0));
}

template <int S, int G, int R>
void run_rows(const bf16_t* xb, std::int64_t split_stride, std::int64_t chunks, const bf16_t* w,
              std::int64_t k, std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t nc, bool first, bool last,
              float* acc, float* y, std::int64_t ldy, std::int64_t m, std::int64_t& row) {
  alignas(64) bf16_t tail[3 * 512];
  for (; row + 16 * R <= r1; row += 16 * R) {
    const bool partial = k % 32 != 0 && c0 + nc == chunks;
    if (partial) tail_tiles(w, k, row, R, tail);
    run_block<S, G, R>(xb, split_stride, chunks, w, k, row, c0, nc, partial ? tail : nullptr, first, last,
                    acc ? acc + (row - r0) / 16 * G * 256 : nullptr, y, ldy, m);
  }
}

template <int S, int G, int R>
void run_all(const bf16_t* xb, std::int64_t split_stride, std::int64_t m, const bf16_t* w,
             std::int64_t k, std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy) {
  const std::int64_t chunks = (k + 31) / 32, kc = kblock_chunks(S, G);
  thread_local std::vector<float> accbuf;
  float* acc = nullptr;
  if (chunks > kc) {
    const std::int64_t need = (n1 - n0) / 16 * G * 256 + 16;
    if (static_cast<std::int64_t>(accbuf.size()) < need) accbuf.resize(static_cast<std::size_t>(need));
    acc = accbuf.data() + ((64 - reinterpret_cast<std::uintptr_t>(accbuf.data()) % 64) % 64) / sizeof(float);
  }
  for (std::int64_t c0 = 0; c0 < chunks; c0 += kc) {
    const std::int64_t nc = std::min(kc, chunks - c0);
    const bool first = c0 == 0, last = c0 + nc == chunks;
    std::int64_t row = n0;
    run_rows<S, G, R>(xb, split_stride, chunks, w, k, n0, n1, c0, nc, first, last, acc, y, ldy, m, row);
    if constexpr (R > 1)
      run_rows<S, G, 1>(xb, split_stride, chunks, w, k, n0, n1, c0, nc, first, last, acc, y, ldy, m, row);
  }
}

} // namespace

void gemm_bf16_amx_batch(const bf16_t* xb, int splits, std::int64_t split_stride, std::int64_t m, const bf16_t* w,
                         std::int64_t k, std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy) {
  if (n1 <= n0 || m <= 0) return;
  amx::configure_16x64();
  const bool one = splits == 1;
  switch ((m + 15) / 16) {
    case 1: one ? run_all<1, 1, 3>(xb, split_stride, m, w, k, n0, n1, y, ldy) : run_all<3, 1, 3>(xb, split_stride, m, w, k, n0, n1, y, ldy); break;
    case 2: one ? run_all<1, 2, 2>(xb, split_stride, m, w, k, n0, n1, y, ldy) : run_all<3, 2, 2>(xb, split_stride, m, w, k, n0, n1, y, ldy); break;
    case 3: one ? run_all<1, 3, 1>(xb, split_stride, m, w, k, n0, n1, y, ldy) : run_all<3, 3, 1>(xb, split_stride, m, w, k, n0, n1, y, ldy); break;
    default: one ? run_all<1, 4, 1>(xb, split_stride, m, w, k, n0, n1, y, ldy) : run_all<3, 4, 1>(xb, split_stride, m, w, k, n0, n1, y, ldy); break;
  }
  _tile_release();
}

#pragma GCC pop_options

} // namespace k3::dense::detail
