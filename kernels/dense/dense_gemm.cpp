#include "kernels/dense/dense_gemm.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <cblas.h>

#include "kernels/common/cpu_features.hpp"
#include "kernels/common/parallel.hpp"
#include "kernels/dense/gemm_bf16_onednn.hpp"

namespace k3::dense {
namespace {

// Above this m the panel+sgemm path wins (measured on the 6144 × 7168 bench matrix: sgemm at
// m = 16 ran at half the GEMV's rate, at m = 64 level with it).
constexpr std::int64_t gemv_max_m = 64;
// From lanes_min_tokens() tokens (fp32 activations) batches run with the tokens in the lanes
// (gemm_bf16_avx512.cpp, gemm_bf16_avx2.cpp) instead of the lane-per-column GEMV. Intel: from 7
// (6144 × 7168, GFLOP/s GEMV → batch kernel, AVX-512 Xeon, 1 thread: m = 16 66.7 → 91.2, m = 64
// 66.1 → 87.9; 2 threads: 136 → 145, 140 → 167 — measured against the GEMV before it read its rows
// as quarter-long streams). AMD: the quarter-order GEMV is the faster one well past 7 tokens, so
// the lanes start later. 2-vCPU Zen 5, 2 threads, GB/s of W read, GEMV vs batch kernel in one run
// (k = 1536 × 16384 rows; k = 7168 × 6144 rows):
//   AVX-512  m = 7: 31.4 vs 15.1; 8: 28.5 vs 15.1; 12: 16.7–19.5 vs 12.1–15.2; 16: 12.6–15.0 vs
//            11.3–14.5; 17: 11.9 / 13.3 vs 8.8 / 10.0; 24: 8.8 / 9.7 vs 6.0 / 6.9; 32: 6.8 / 7.1
//            vs 6.3 / 8.2; 64: 3.5 / 3.0 vs 3.2 / 4.1 → lanes from 25 tokens;
//   AVX2     m = 7: 15.6 vs 10.9; 12: 10.3 vs 7.8; 16: 7.7 / 7.8 vs 7.8 / 8.6; 32: 4.0 / 4.0 vs
//            4.0 / 4.2 → lanes from 13.
// Either way a token's result does not depend on the other tokens of its call; below the
// threshold it is also the same bits as the token alone (the GEMV's sums do not depend on m).
std::int64_t lanes_threshold() noexcept {
  if (!amd_cpu()) return 7;
  return active_isa() == isa::avx512 ? 25 : 13;
}
// From this many tokens batches run on AMX tiles where the CPU has them (gemm_amx_batch).
// 6144 × 7168, one thread, GB/s of W, GEMV/batch kernel → AMX: fp32 activations m = 4 12.5 →
// 11.4–12.1, m = 16 5.5 → 11.6–12.2, m = 32 3.6 → 7.8–8.9, m = 64 1.8 → 4.0–4.5; bf16 (vdpbf16ps
// GEMV) m = 4 15.3 → 12.5, m = 16 5.0 → 12.3–13.2, m = 64 1.4 → 11.3–12.5.
constexpr std::int64_t amx_batch_min_m = 6;
// Tokens per AMX pass (bounds the activation split buffer; see gemm_amx).
constexpr std::int64_t amx_max_tokens = 512;

void check(const float* x, std::int64_t ldx, std::int64_t m, const void* w, std::int64_t n, std::int64_t k,
           const float* y, std::int64_t ldy, const char* who) {
  auto fail = [&](const std::string& what) { throw std::invalid_argument(std::string(who) + ": " + what); };
  if (m < 0 || n < 0 || k < 0) fail("negative dimension");
  if (m == 0 || n == 0) return;
  if (!x || !w || !y) fail("null pointer");
  if (ldx < k) fail("ldx=" + std::to_string(ldx) + " < k=" + std::to_string(k));
  if (m > 1 && ldy < n) fail("ldy=" + std::to_string(ldy) + " < n=" + std::to_string(n));
}

using rows_fn = void (*)(const float*, std::int64_t, std::int64_t, const bf16_t*, std::int64_t, std::int64_t,
                         std::int64_t, float*, std::int64_t);

rows_fn select() noexcept {
  switch (active_isa()) {
    case isa::avx512: return detail::gemv_bf16_rows_avx512;
    case isa::avx2: return detail::gemv_bf16_rows_avx2;
    case isa::scalar: break;
  }
  return detail::gemv_bf16_rows_scalar;
}

// Prefill on AMX (gemm_bf16_amx.cpp). fp32 activations enter as three bf16 parts (hi + mid + lo
// = x), so every product is an fp32-exact product of the activation and the bf16 weight, as in
// the widening paths; bf16 activations enter once, rounded. The 32-token × 32-row body runs on
// tiles; leftover rows of W (n % 32) and tokens (m % 32) take the other paths.
void gemm_amx(const float* x, std::int64_t ldx, std::int64_t m, const bf16_t* w, std::int64_t n, std::int64_t k,
              float* y, std::int64_t ldy, activations a) {
  const int splits = split_count(a);
  const std::int64_t mm = m / 32 * 32, nn = n / 32 * 32, kp = (k + 31) / 32 * 32;
  static_assert(amx_max_tokens % 32 == 0);
  // Tokens in chunks of up to amx_max_tokens bound the split buffer (3 · 512 · kp bf16); W is
  // packed once per chunk, which 512 tokens amortise.
  thread_local std::vector<bf16_t> xbuf;
  for (std::int64_t t0 = 0; t0 < mm; t0 += amx_max_tokens) {
    const std::int64_t mt = std::min(amx_max_tokens, mm - t0), split_stride = mt * kp;
    xbuf.resize(static_cast<std::size_t>(splits * split_stride + 32));
    bf16_t* xs = xbuf.data() + ((64 - reinterpret_cast<std::uintptr_t>(xbuf.data()) % 64) % 64) / sizeof(bf16_t);
    const float* xt = x + t0 * ldx;
    parallel_for_work(mt / 32, mt * k * 8, [&](std::int64_t i) {
      detail::split_bf16_rows(xt + 32 * i * ldx, ldx, 32, k, splits, xs + 32 * i * kp, split_stride);
    });
    // Row blocks of 32 split evenly over the pool threads; each packs its own slice of W.
    const std::int64_t blocks = nn / 32;
    float* yt = y + t0 * ldy;
    parallel_threads([&](int ti, int nt) {
      const std::int64_t b0 = blocks * ti / nt, b1 = blocks * (ti + 1) / nt;
      if (b1 <= b0) return;
      thread_local std::vector<bf16_t> pack;
      const std::int64_t need = 32 * detail::amx_kblock * 32 + 32;
      if (static_cast<std::int64_t>(pack.size()) < need) pack.resize(static_cast<std::size_t>(need));
      bf16_t* wp = pack.data() + ((64 - reinterpret_cast<std::uintptr_t>(pack.data()) % 64) % 64) / sizeof(bf16_t);
      detail::gemm_bf16_amx(xs, splits, split_stride, mt, w, k, 32 * b0, 32 * b1, yt, ldy, wp);
    });
  }
  if (nn < n) gemm_bf16(x, ldx, mm, w + nn * k, n - nn, k, y + nn, ldy, a);
  if (mm < m) gemm_bf16(x + mm * ldx, ldx, m - mm, w, n, k, y + mm * ldy, ldy, a);
}

// Batched decode on AMX (gemm_bf16_amx_batch.cpp): W read in place as A tiles, the m ≤ 64
// activations split as for prefill and turned into B tiles once, here on the calling thread
// (m·k values, small next to W). Rows in multiples of 16 run on tiles, spread evenly over the
// pool threads; leftover rows (n % 16) take the other paths.
void gemm_amx_batch(const float* x, std::int64_t ldx, std::int64_t m, const bf16_t* w, std::int64_t n, std::int64_t k,
                    float* y, std::int64_t ldy, activations a) {
  const int splits = split_count(a);
  const std::int64_t groups = (m + 15) / 16, chunks = (k + 31) / 32, nn = n / 16 * 16;
  const std::int64_t split_stride = groups * chunks * 512;
  thread_local std::vector<bf16_t> xbuf;
  xbuf.resize(static_cast<std::size_t>(splits * split_stride + 32));
  bf16_t* xs = xbuf.data() + ((64 - reinterpret_cast<std::uintptr_t>(xbuf.data()) % 64) % 64) / sizeof(bf16_t);
  detail::split_bf16_rows(x, ldx, m, k, splits, xs, split_stride);
  detail::vnni_tiles(xs, splits * split_stride / 512);
  const std::int64_t tiles = nn / 16;
  if (m * nn * k < min_parallel_work) {
    detail::gemm_bf16_amx_batch(xs, splits, split_stride, m, w, k, 0, nn, y, ldy);
  } else {
    parallel_threads([&](int ti, int nt) {
      const std::int64_t t0 = tiles * ti / nt, t1 = tiles * (ti + 1) / nt;
      detail::gemm_bf16_amx_batch(xs, splits, split_stride, m, w, k, 16 * t0, 16 * t1, y, ldy);
    });
  }
  if (nn < n) gemm_bf16(x, ldx, m, w + nn * k, n - nn, k, y + nn, ldy, a);
}

} // namespace

std::int64_t detail::lanes_min_tokens() noexcept { return lanes_threshold(); }

void gemv_bf16_rows(const float* x, std::int64_t ldx, std::int64_t m, const bf16_t* w, std::int64_t k,
                    std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy) {
  if (m == 0 || n1 <= n0) return;
  if (k == 0) {
    for (std::int64_t t = 0; t < m; ++t) std::fill(y + t * ldy + n0, y + t * ldy + n1, 0.0f);
    return;
  }
  select()(x, ldx, m, w, k, n0, n1, y, ldy);
}

namespace {

// The activations::fp32_bf16x2 values of rows × k activations, packed (stride k).
void round_x2(const float* x, std::int64_t ldx, std::int64_t rows, std::int64_t k, float* dst) {
  if (active_isa() == isa::avx512) detail::round_bf16x2_rows_avx512(x, ldx, rows, k, dst);
  else round_bf16x2_rows(x, ldx, rows, k, dst);
}

// The GEMV route (decode): every token of x against every row of each output's W, a lane per
// column. The rows of all outputs form one index space split into one contiguous range per
// pool thread (boundaries on 4-row blocks): long ranges let each thread stream (8 dynamic
// items per thread measured 0.65–0.72 of a streaming read on the test checkpoint's decode
// shapes, one range per thread 0.78–0.83, 2-thread Zen 5), and outputs that share x cost one
// fork/join. The ranges balance themselves (parallel_pieces): their tails go to whichever
// thread is free. bf16 activations are rounded once here, on the calling thread (m·k values, small
// next to the weights): to bf16 for the vdpbf16ps kernel, else to fp32 holding the rounded
// values. A row's result does not depend on the partition.
void gemv_route(const float* x, std::int64_t ldx, std::int64_t m, std::int64_t k, std::span<const bf16_output> outs) {
  std::int64_t total = 0;
  bool any_bf16 = false, any_x2 = false;
  for (const bf16_output& o : outs) {
    total += o.n;
    any_bf16 = any_bf16 || (o.a == activations::bf16 && o.n > 0);
    any_x2 = any_x2 || (o.a == activations::fp32_bf16x2 && o.n > 0);
  }
  if (total == 0 || m == 0) return;
  const bool dot = any_bf16 && k > 0 && bf16_dot_available();
  const std::int64_t kp = (k + 31) / 32 * 32;
  thread_local std::vector<bf16_t> xb;
  thread_local std::vector<float> xr, x2;
  if (dot) {
    xb.resize(static_cast<std::size_t>(m * kp));
    for (std::int64_t t = 0; t < m; ++t) {
      f32_to_bf16(x + t * ldx, xb.data() + t * kp, k);
      std::fill(xb.data() + t * kp + k, xb.data() + (t + 1) * kp, bf16_t{0});
    }
  } else if (any_bf16 && k > 0) {
    xr.resize(static_cast<std::size_t>(m * k));
    round_bf16_rows(x, ldx, m, k, xr.data());
  }
  if (any_x2 && k > 0) {
    x2.resize(static_cast<std::size_t>(m * k));
    round_x2(x, ldx, m, k, x2.data());
  }
  // The fp32 activations an output's GEMV reads (int8 counts as fp32 in dense kernels).
  const float* const xr_p = xr.data();
  const float* const x2_p = x2.data();
  auto input = [&](activations a, std::int64_t& ld) -> const float* {
    if (k > 0 && a == activations::bf16) return ld = k, xr_p;
    if (k > 0 && a == activations::fp32_bf16x2) return ld = k, x2_p;
    return ld = ldx, x;
  };
  const bf16_t* xbp = xb.data();
  auto run = [&](std::int64_t g0, std::int64_t g1) {
    std::int64_t s = 0;
    for (const bf16_output& o : outs) {
      const std::int64_t lo = std::max<std::int64_t>(g0 - s, 0), hi = std::min(g1 - s, o.n);
      if (lo < hi) {
        if (dot && o.a == activations::bf16) {
          detail::gemv_bf16_rows_avx512bf16(xbp, kp, m, o.w, k, lo, hi, o.y, o.ldy);
        } else {
          std::int64_t ld = 0;
          const float* xi = input(o.a, ld);
          gemv_bf16_rows(xi, ld, m, o.w, k, lo, hi, o.y, o.ldy);
        }
      }
      s += o.n;
    }
  };
  if (m * total * k < min_parallel_work) {
    run(0, total);
    return;
  }
  // Thread i's range starts at total · i / nt, moved to the nearest 4-row block of the output it
  // falls in (monotone in i, so the ranges tile [0, total)).
  auto bound = [&](int i, int nt) -> std::int64_t {
    if (i >= nt) return total;
    const std::int64_t g = total * i / nt;
    std::int64_t s = 0;
    for (const bf16_output& o : outs) {
      if (g < s + o.n) return s + std::min((g - s + 2) / 4 * 4, o.n);
      s += o.n;
    }
    return total;
  };
  // Each thread's range as pieces (parallel_pieces): split where an output ends, and halved
  // again and again (≥ 4-row blocks of ≥ 128 KiB) so that a thread's run starts with long
  // streams and ends in pieces small enough for another thread to finish when this one lags.
  // Which thread sums a row never changes its bits.
  const std::int64_t min_rows = std::max<std::int64_t>(16, (131072 / (2 * k) + 3) / 4 * 4);
  std::vector<std::int64_t> cuts{0}, first{0}; // piece boundaries (rows); each thread's first piece
  const int nt = kernel_threads();
  for (int ti = 0; ti < nt; ++ti) {
    const std::int64_t b = bound(ti + 1, nt);
    for (std::int64_t a = cuts.back(); a < b;) {
      std::int64_t s = 0, e = total; // the output holding row a
      for (const bf16_output& o : outs) {
        if (a < s + o.n) {
          e = s + o.n;
          break;
        }
        s += o.n;
      }
      const std::int64_t half = std::max(min_rows, (b - a) / 2 / 4 * 4);
      a = std::min({e, b, a + half});
      cuts.push_back(a);
    }
    first.push_back(static_cast<std::int64_t>(cuts.size()) - 1);
  }
  parallel_pieces(first, [&](std::int64_t p, std::int64_t) {
    run(cuts[static_cast<std::size_t>(p)], cuts[static_cast<std::size_t>(p) + 1]);
  });
}

// Whether gemm_bf16 takes the GEMV route for these sizes (no AMX batch, no tokens-in-lanes tiles).
bool on_gemv_route(std::int64_t m, std::int64_t n, std::int64_t k, activations a) noexcept {
  if (m > gemv_max_m && k > 0) return false;
  if (m >= amx_batch_min_m && n >= 16 && k > 0 && amx_bf16_available()) return false;
  if (a != activations::bf16 && m >= lanes_threshold() && active_isa() >= isa::avx2) return false;
  return true;
}

} // namespace

void gemm_bf16_multi(const float* x, std::int64_t ldx, std::int64_t m, std::int64_t k,
                     std::span<const bf16_output> outs) {
  bool gemv = true;
  for (const bf16_output& o : outs) {
    check(x, ldx, m, o.w, o.n, k, o.y, o.ldy, "dense::gemm_bf16_multi");
    gemv = gemv && on_gemv_route(m, o.n, k, o.a);
  }
  if (m == 0) return;
  if (gemv) {
    gemv_route(x, ldx, m, k, outs);
    return;
  }
  for (const bf16_output& o : outs) gemm_bf16(x, ldx, m, o.w, o.n, k, o.y, o.ldy, o.a);
}

void gemm_bf16(const float* x, std::int64_t ldx, std::int64_t m, const bf16_t* w, std::int64_t n, std::int64_t k,
               float* y, std::int64_t ldy, activations a) {
  check(x, ldx, m, w, n, k, y, ldy, "dense::gemm_bf16");
  if (m == 0 || n == 0) return;
  if (a == activations::int8) a = activations::fp32; // int8 is for MXFP4 weights only
  const bool gemv = m <= gemv_max_m || k == 0;
  if (on_gemv_route(m, n, k, a)) {
    const bf16_output o{w, n, y, ldy, a};
    gemv_route(x, ldx, m, k, {&o, 1});
    return;
  }
  if (gemv && m >= amx_batch_min_m && n >= 16 && k > 0 && amx_bf16_available()) {
    gemm_amx_batch(x, ldx, m, w, n, k, y, ldy, a);
    return;
  }
  if (!gemv && amx_bf16_available() && n >= 32) {
    gemm_amx(x, ldx, m, w, n, k, y, ldy, a);
    return;
  }
  if (!gemv && detail::onednn_available()) {
    detail::gemm_bf16_onednn(x, ldx, m, w, n, k, y, ldy, split_count(a));
    return;
  }
  // Prefill with bf16 or fp32_bf16x2 activations off AMX and oneDNN: the rounded values,
  // multiplied in fp32 (rounding again is the identity, so the GEMV tail below may).
  thread_local std::vector<float> xr;
  if ((a == activations::bf16 || a == activations::fp32_bf16x2) && k > 0) {
    xr.resize(static_cast<std::size_t>(m * k));
    if (a == activations::bf16) round_bf16_rows(x, ldx, m, k, xr.data());
    else round_x2(x, ldx, m, k, xr.data());
    x = xr.data();
    ldx = k;
  }
  std::int64_t t0 = 0;
  if (gemv) {
    // Batches with fp32 activations (on_gemv_route said so): tiles of one vector of tokens (16 on AVX-512, 8 on AVX2;
    // two vectors while more than 1.5 vectors remain) in the lanes, transposed once here into
    // xt[k][W·V] (zeros past the tile), row spans over the pool. Fewer than lanes_min_tokens()
    // left go to the GEMV route. (bf16 activations keep the GEMV for every m ≤ 64, whose
    // result per token does not depend on m.)
    const bool wide = active_isa() == isa::avx512;
    const int width = wide ? 16 : 8;
    thread_local std::vector<float> xbuf;
    xbuf.resize(static_cast<std::size_t>(k * 32 + 16));
    float* xt = xbuf.data() + ((64 - reinterpret_cast<std::uintptr_t>(xbuf.data()) % 64) % 64) / sizeof(float);
    const std::int64_t threads = kernel_threads();
    const std::int64_t per = std::max<std::int64_t>(16, ((n + 4 * threads - 1) / (4 * threads) + 15) / 16 * 16);
    const std::int64_t spans = (n + per - 1) / per;
    const std::int64_t min_tokens = lanes_threshold();
    while (m - t0 >= min_tokens) {
      const int vec = 2 * (m - t0) > 3 * width ? 2 : 1, lanes = width * vec;
      const int tg = static_cast<int>(std::min<std::int64_t>(lanes, m - t0));
      for (std::int64_t kk = 0; kk < k; ++kk) {
        float* d = xt + kk * lanes;
        for (int t = 0; t < tg; ++t) d[t] = x[(t0 + t) * ldx + kk];
        for (int t = tg; t < lanes; ++t) d[t] = 0.0f;
      }
      parallel_for_work(spans, static_cast<std::int64_t>(tg) * n * k, [&](std::int64_t i) {
        thread_local std::vector<float> wbuf;
        wbuf.resize(static_cast<std::size_t>(16 * detail::bcast_chunk + 16));
        float* wt = wbuf.data() + ((64 - reinterpret_cast<std::uintptr_t>(wbuf.data()) % 64) % 64) / sizeof(float);
        if (wide) detail::gemm_bf16_tile_avx512(xt, vec, tg, w, k, i * per, std::min(n, (i + 1) * per), y + t0 * ldy, ldy, wt);
        else detail::gemm_bf16_tile_avx2(xt, vec, tg, w, k, i * per, std::min(n, (i + 1) * per), y + t0 * ldy, ldy, wt);
      });
      t0 += tg;
    }
    if (t0 < m) {
      const bf16_output o{w, n, y + t0 * ldy, ldy, a};
      gemv_route(x + t0 * ldx, ldx, m - t0, k, {&o, 1});
    }
    return;
  }
  // Prefill: widen a block of W (rows × kc) to fp32 and let sgemm multiply it, accumulating
  // over the kc blocks; each pool item owns one row panel, and OpenBLAS runs single-threaded
  // inside the pool. Blocking k matters: sgemm packs its A operand (x, m × K) on every call, so
  // narrow full-K panels (the earlier 36 rows × 7168) spent more time packing x than multiplying.
  // 256 × 512 blocks measured best on a 2-core Xeon at m = 512 (221 GFLOP/s against 129 for
  // full-K 36-row panels; 512 × 256, 128 × 1024 and 256 × 256 were 5–25 % slower). Panels are
  // evened out so that every pool thread gets the same number of rows.
  const std::int64_t threads = kernel_threads();
  const std::int64_t items = threads * ((n + threads * 256 - 1) / (threads * 256));
  const std::int64_t panel = ((n + items - 1) / items + 15) / 16 * 16, kc = std::min<std::int64_t>(k, 512);
  parallel_for((n + panel - 1) / panel, [&](std::int64_t i) {
    const std::int64_t r0 = i * panel, rows = std::min(panel, n - r0);
    thread_local std::vector<float> buf;
    buf.resize(static_cast<std::size_t>(rows * kc));
    for (std::int64_t k0 = 0; k0 < k; k0 += kc) {
      const std::int64_t kl = std::min(kc, k - k0);
      for (std::int64_t r = 0; r < rows; ++r) bf16_to_f32(w + (r0 + r) * k + k0, buf.data() + r * kl, kl);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(rows),
                  static_cast<int>(kl), 1.0f, x + k0, static_cast<int>(ldx), buf.data(), static_cast<int>(kl),
                  k0 == 0 ? 0.0f : 1.0f, y + r0, static_cast<int>(ldy));
    }
  });
}

void gemm_f32(const float* x, std::int64_t ldx, std::int64_t m, const float* w, std::int64_t n, std::int64_t k,
              float* y, std::int64_t ldy) {
  check(x, ldx, m, w, n, k, y, ldy, "dense::gemm_f32");
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (std::int64_t t = 0; t < m; ++t) std::fill(y + t * ldy, y + t * ldy + n, 0.0f);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              1.0f, x, static_cast<int>(ldx), w, static_cast<int>(k), 0.0f, y, static_cast<int>(m == 1 ? n : ldy));
}

} // namespace k3::dense
