// mla::attention's AVX-512 path (queries in the lanes): the per-item driver around the tile
// step of mla_tile_avx512.cpp — softmax spans, their order-preserving fold, and the decode
// split over cache positions.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/common/parallel.hpp"
#include "kernels/mla/mla_parts.hpp"
#include "kernels/mla/mla_tile.hpp"

namespace k3::mla::detail {
namespace {

// The softmax runs over fixed spans of positions [s·span_rows, (s+1)·span_rows), each with its
// own online state, folded into the query's total in span order. A prefill item walks its
// spans in turn; a decode step (fewer token groups than threads) computes the spans of one
// query group in parallel and folds them afterwards — the same operations in the same order,
// so both give the same bits, and a long context is read once, not once per thread.
constexpr std::int64_t span_rows = 16 * tile_rows;

// W_UK-absorbed queries of tokens [t0, t0 + tg) × heads [h0, h0 + HG) into rows [tg·HG][W]:
// row x·HG + hi is token t0 + x, head h0 + hi.
void absorb_rows(const float* q_nope, const float* q_rot, const float* kv_b, const dims& d, std::int64_t t0, int tg, int h0,
                 int HG, std::vector<float>& rows) {
  const int W = d.row_width();
  rows.resize(static_cast<std::size_t>(tg) * HG * W);
  for (int hi = 0; hi < HG; ++hi)
    absorb_queries(q_nope, q_rot, kv_b, d, t0, tg, h0 + hi, rows.data() + static_cast<std::size_t>(hi) * W,
                   static_cast<std::int64_t>(HG) * W);
}

// W_UK-absorbed queries of tokens [t0, t0 + tg) × heads [h0, h0 + HG), transposed for the lanes.
struct lanes_unit {
  std::int64_t t0 = 0;
  int tg = 0, h0 = 0, HG = 0, Q = 0, QP = 0;
  std::int64_t last = 0; // the furthest position a query sees
  std::vector<float> buf;
  std::vector<std::int32_t> see;
  float* qT = nullptr; // [W][QP], 64-byte aligned inside buf

  void prepare(const float* q_nope, const float* q_rot, const float* kv_b, const dims& d, std::int64_t pos0) {
    thread_local std::vector<float> rows;
    absorb_rows(q_nope, q_rot, kv_b, d, t0, tg, h0, HG, rows);
    load(rows.data(), d.row_width(), pos0);
  }
  // From absorbed rows already made ([tg·HG][W], row i = token i / HG, head i % HG): transposed
  // into the lanes, each token seeing up to its position pos0 + t0 + (its index).
  void load(const float* rows, int W, std::int64_t pos0) {
    Q = tg * HG;
    QP = (Q + 15) / 16 * 16;
    last = pos0 + t0 + tg - 1;
    buf.assign(static_cast<std::size_t>(W) * QP + 16, 0.0f);
    qT = buf.data() + (16 - (reinterpret_cast<std::uintptr_t>(buf.data()) / 4) % 16) % 16;
    for (int i = 0; i < Q; ++i)
      for (int w = 0; w < W; ++w) qT[static_cast<std::size_t>(w) * QP + i] = rows[static_cast<std::size_t>(i) * W + w];
    see.resize(static_cast<std::size_t>(QP));
    for (int i = 0; i < QP; ++i) see[static_cast<std::size_t>(i)] = i < Q ? static_cast<std::int32_t>(pos0 + t0 + i / HG) : INT32_MAX;
  }
  [[nodiscard]] std::int64_t spans() const { return last / span_rows + 1; }
};

// Online-softmax state of a unit's queries over one span (or the running total).
struct span_state {
  std::vector<float> m, sum, alpha, acc;
  void reset(const lanes_unit& u, int L) {
    m.assign(static_cast<std::size_t>(u.QP), -INFINITY);
    sum.assign(static_cast<std::size_t>(u.QP), 0.0f);
    alpha.resize(static_cast<std::size_t>(u.QP));
    acc.assign(static_cast<std::size_t>(u.Q) * L, 0.0f);
  }
};

// The unit's queries over span s, from a fresh state.
void run_span(const lanes_unit& u, std::int64_t s, const cache_view& cache, const dims& d, float scale, span_state& st) {
  const int W = d.row_width(), L = d.latent;
  st.reset(u, L);
  thread_local std::vector<float> tile, sc;
  tile.resize(static_cast<std::size_t>(tile_rows) * W);
  sc.resize(static_cast<std::size_t>(tile_rows) * u.QP);
  lanes_state ls{u.Q, u.QP, W, L, u.qT, u.see.data(), st.m.data(), st.sum.data(), st.alpha.data(), sc.data(),
                         st.acc.data()};
  const std::int64_t end = std::min(u.last + 1, (s + 1) * span_rows);
  for (std::int64_t p0 = s * span_rows; p0 < end; p0 += tile_rows) {
    const int nk = static_cast<int>(std::min<std::int64_t>(tile_rows, end - p0));
    tile_lanes_avx512(ls, load_tile(cache, W, p0, nk, tile.data()), nk, p0, scale);
  }
}

// y = y·a + x·b (n floats), explicit 16-wide chunks (a result must not depend on alignment).
__attribute__((target_clones("avx512f", "avx2", "default"))) void scale_add(float* __restrict y, float a,
                                                                             const float* __restrict x, float b, int n) {
  int i = 0;
  for (; i + 16 <= n; i += 16) store16(y + i, load16(y + i) * a + load16(x + i) * b);
  for (; i < n; ++i) y[i] = y[i] * a + x[i] * b;
}

// Query i's total ⊕= its state over one more span (a span it cannot see changes nothing).
void fold_query(span_state& total, const span_state& part, int i, int L) {
  const auto k = static_cast<std::size_t>(i);
  const float mp = part.m[k];
  if (mp == -INFINITY) return;
  float& mt = total.m[k];
  const float M = std::max(mt, mp); // NaN in mp: exp below turns it into a NaN result
  const float a = mt == M ? 1.0f : std::exp(mt - M), b = mp == M ? 1.0f : std::exp(mp - M);
  total.sum[k] = total.sum[k] * a + part.sum[k] * b;
  scale_add(total.acc.data() + k * L, a, part.acc.data() + k * L, b, L);
  mt = M;
}

// The unit's queries over all their spans in order into total (part: scratch), as a decode's
// parallel spans are folded.
void walk_spans(const lanes_unit& u, const cache_view& cache, const dims& d, float scale, span_state& total,
                span_state& part) {
  run_span(u, 0, cache, d, scale, total);
  for (std::int64_t s = 1; s < u.spans(); ++s) {
    run_span(u, s, cache, d, scale, part);
    for (int i = 0; i < u.Q; ++i) fold_query(total, part, i, d.latent);
  }
}

} // namespace

void attention_lanes(const float* q_nope, const float* q_rot, const float* kv_b, const cache_view& cache, const dims& d,
                     std::int64_t pos0, std::int64_t T, const float* gate, float* out) {
  const int H = d.heads, L = d.latent;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.nope + d.rope));
  const int threads = kernel_threads();
  const int G = T >= 4 ? 4 : 1;
  const std::int64_t groups = (T + G - 1) / G;
  const std::int64_t spans = (pos0 + T - 1) / span_rows + 1; // of the furthest query
  const std::int64_t work = T * H * (pos0 + T) * (L + d.rope);
  // Heads per unit: all of them, unless groups × spans cannot keep the threads busy.
  int HG = H;
  if (groups * (groups < threads ? spans : 1) < threads && H > 1) {
    HG = std::max(1, H / threads);
    while (H % HG != 0) --HG; // units must cover the heads exactly
  }
  const int hsplit = H / HG;
  const std::int64_t U = groups * hsplit;
  auto describe = [&](lanes_unit& u, std::int64_t i) {
    u.t0 = i / hsplit * G;
    u.h0 = static_cast<int>(i % hsplit) * HG;
    u.tg = static_cast<int>(std::min<std::int64_t>(G, T - u.t0));
    u.HG = HG;
  };
  if (groups >= threads || spans == 1) {
    // One item per unit, its spans in turn (buffers reused per thread: a long prefill chunk
    // does not hold every group's transposed queries at once).
    parallel_for_work(U, work, [&](std::int64_t item) {
      thread_local lanes_unit u;
      describe(u, item);
      u.prepare(q_nope, q_rot, kv_b, d, pos0);
      thread_local span_state total, part;
      walk_spans(u, cache, d, scale, total, part);
      for (int hi = 0; hi < HG; ++hi) {
        const float* acc[4];
        float sum[4];
        for (int ti = 0; ti < u.tg; ++ti) {
          const auto i = static_cast<std::size_t>(ti * HG + hi);
          acc[ti] = total.acc.data() + i * L;
          sum[ti] = total.sum[i];
        }
        project_out(kv_b, d, acc, sum, u.t0, u.tg, u.h0 + hi, gate, out);
      }
    });
    return;
  }
  // Decode: (unit, span) items in waves of about two spans per thread, each wave folded in span
  // order per query. Fewer units than threads here, so their buffers are few; they live on the
  // calling thread and are reused from call to call.
  thread_local std::vector<lanes_unit> units_tl;
  thread_local std::vector<span_state> parts_tl, totals_tl;
  // Named through references: inside the parallel lambdas a thread_local name would mean each
  // worker's own (empty) copy.
  auto& units = units_tl;
  auto& parts = parts_tl;
  auto& totals = totals_tl;
  units.resize(static_cast<std::size_t>(U));
  for (std::int64_t i = 0; i < U; ++i) describe(units[static_cast<std::size_t>(i)], i);
  parallel_for_work(U, work / std::max<std::int64_t>(1, spans), [&](std::int64_t item) {
    units[static_cast<std::size_t>(item)].prepare(q_nope, q_rot, kv_b, d, pos0);
  });
  const std::int64_t wave = std::min<std::int64_t>(spans, 2 * std::max<std::int64_t>(1, (threads + U - 1) / U));
  parts.resize(static_cast<std::size_t>(U * wave));
  totals.resize(static_cast<std::size_t>(U));
  for (std::int64_t i = 0; i < U; ++i) totals[static_cast<std::size_t>(i)].reset(units[static_cast<std::size_t>(i)], L);
  for (std::int64_t s0 = 0; s0 < spans; s0 += wave) {
    const std::int64_t nw = std::min(wave, spans - s0);
    parallel_for_work(U * nw, work / std::max<std::int64_t>(1, spans / nw), [&](std::int64_t item) {
      const auto& u = units[static_cast<std::size_t>(item / nw)];
      const std::int64_t s = s0 + item % nw;
      auto& st = parts[static_cast<std::size_t>(item)];
      if (s < u.spans()) run_span(u, s, cache, d, scale, st);
      else st.reset(u, L); // a span past this unit's queries: nothing visible
    });
    const bool final_wave = s0 + nw >= spans;
    parallel_for_work(U * G * HG, final_wave ? U * G * HG * d.v * L : 0, [&](std::int64_t item) {
      const std::int64_t ui = item / (G * HG);
      const int i = static_cast<int>(item % (G * HG));
      const auto& u = units[static_cast<std::size_t>(ui)];
      if (i >= u.Q) return;
      auto& total = totals[static_cast<std::size_t>(ui)];
      for (std::int64_t j = 0; j < nw; ++j) {
        const auto& part = parts[static_cast<std::size_t>(ui * nw + j)];
        if (s0 + j == 0) { // the first span is the total so far, exactly
          const auto k = static_cast<std::size_t>(i);
          total.m[k] = part.m[k];
          total.sum[k] = part.sum[k];
          std::copy_n(part.acc.data() + k * L, L, total.acc.data() + k * L);
        } else {
          fold_query(total, part, i, L);
        }
      }
      if (final_wave) {
        const float* acc = total.acc.data() + static_cast<std::size_t>(i) * L;
        project_out(kv_b, d, &acc, &total.sum[static_cast<std::size_t>(i)], u.t0 + i / HG, 1, u.h0 + i % HG, gate, out);
      }
    });
  }
}

void attention_decode_lanes(const float* q_nope, const float* q_rot, const float* kv_b, const cache_view* caches,
                            const std::int64_t* pos, std::int64_t N, const dims& d, const float* gate, float* out) {
  const int H = d.heads, L = d.latent, W = d.row_width();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.nope + d.rope));
  const int threads = kernel_threads();
  // Items: up to 4 sequences × a head group. The 4 tokens share each head's W_UK and W_UV
  // reads (absorb_queries / project_out take 4 tokens at a time); each sequence then walks its
  // own cache with its heads in the lanes. Heads split only while there are too few items.
  constexpr int G = 4;
  const std::int64_t groups = (N + G - 1) / G;
  int hsplit = 1;
  while (groups * hsplit < 2 * threads && hsplit < H) {
    ++hsplit;
    while (H % hsplit != 0) ++hsplit; // units must cover the heads exactly
  }
  const int HG = H / hsplit;
  std::int64_t work = 0;
  for (std::int64_t i = 0; i < N; ++i) work += H * (pos[i] + 1) * (L + d.rope) + 2 * H * (d.nope + d.v) * L;
  parallel_for_work(groups * hsplit, work, [&](std::int64_t item) {
    const std::int64_t t0 = item / hsplit * G;
    const int h0 = static_cast<int>(item % hsplit) * HG;
    const int tg = static_cast<int>(std::min<std::int64_t>(G, N - t0));
    thread_local std::vector<float> rows;
    thread_local lanes_unit u; // one sequence's token (its own position and cache) at a time
    thread_local span_state totals[G], part;
    absorb_rows(q_nope, q_rot, kv_b, d, t0, tg, h0, HG, rows);
    u.t0 = 0;
    u.tg = 1;
    u.h0 = h0;
    u.HG = HG;
    for (int x = 0; x < tg; ++x) {
      u.load(rows.data() + static_cast<std::size_t>(x) * HG * W, W, pos[t0 + x]);
      walk_spans(u, caches[t0 + x], d, scale, totals[x], part);
    }
    for (int hi = 0; hi < HG; ++hi) {
      const float* acc[G];
      float sum[G];
      for (int x = 0; x < tg; ++x) {
        acc[x] = totals[x].acc.data() + static_cast<std::size_t>(hi) * L;
        sum[x] = totals[x].sum[static_cast<std::size_t>(hi)];
      }
      project_out(kv_b, d, acc, sum, t0, tg, h0 + hi, gate, out);
    }
  });
}

} // namespace k3::mla::detail
