#include "kernels/mxfp4/mxfp4_gemm.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/common/cpu_features.hpp"
#include "kernels/common/parallel.hpp"
#include "kernels/dense/dense_gemm.hpp"
#include "kernels/mxfp4/mxfp4_q8.hpp"

namespace k3::mxfp4 {
namespace {

detail::gemm_rows_fn select() noexcept {
  switch (active_isa()) {
    case isa::avx512: return detail::gemm_rows_avx512;
    case isa::avx2: return detail::gemm_rows_avx2;
    case isa::scalar: break;
  }
  return detail::gemm_rows_scalar;
}

// bf16 activations take the vdpbf16ps kernel wherever the CPU has it, for every m: a token's
// result must not depend on how many tokens share its expert in a step (seeded sampling gives
// the same text alone or batched). Measured on a 2-core Xeon: M = 16 1.24× the fp32 kernel,
// M = 1 0.92×. Elsewhere the fp32 kernel multiplies the same rounded values.
bool use_dot(activations a, std::int64_t cols) noexcept {
  return a == activations::bf16 && cols % 64 == 0 && bf16_dot_available();
}

// Rounds rows × cols activations to bf16 values (kept as fp32) into buf; returns buf's data.
const float* rounded(const float* x, std::int64_t ldx, std::int64_t rows, std::int64_t cols, std::vector<float>& buf) {
  buf.resize(static_cast<std::size_t>(rows * cols));
  round_bf16_rows(x, ldx, rows, cols, buf.data());
  return buf.data();
}

void check(const float* x, std::int64_t ldx, std::int64_t m, const matrix_view& w, const float* y,
           std::int64_t ldy, const char* who) {
  auto fail = [&](const std::string& what) { throw std::invalid_argument(std::string(who) + ": " + what); };
  if (w.cols <= 0 || w.cols % block_size != 0)
    fail("cols=" + std::to_string(w.cols) + " must be a positive multiple of 32");
  if (w.rows < 0 || m < 0) fail("negative rows or token count");
  if (m > 0 && w.rows > 0) {
    if (!x || !y || !w.packed || !w.scales) fail("null pointer");
    if (ldx < w.cols) fail("ldx=" + std::to_string(ldx) + " < cols=" + std::to_string(w.cols));
    if (ldy < w.rows && m > 1) fail("ldy=" + std::to_string(ldy) + " < rows=" + std::to_string(w.rows));
  }
}

// AMX expert path (grouped_amx): from this many tokens per expert (below, the GEMV-style
// kernels), for blocks of at most amx_max_cols columns (the 32-row B tiles of a row block,
// 64 · cols bytes, stay in L2), splitting at most amx_split_budget bytes of activations at once.
constexpr std::int64_t amx_min_tokens = 8;
constexpr std::int64_t amx_max_cols = 16384;
constexpr std::int64_t amx_split_budget = std::int64_t{64} << 20;

// Row tile handed to one pool item: large enough to amortise the per-tile activation
// de-interleave (cost m·K) against m·K·tile multiply-adds, small enough for balance.
std::int64_t row_tile(std::int64_t rows, std::int64_t m) {
  const std::int64_t threads = kernel_threads();
  std::int64_t tile = std::max<std::int64_t>(16, (rows + 8 * threads - 1) / (8 * threads));
  if (m > 16) tile = std::max<std::int64_t>(tile, 32);
  return (tile + 3) / 4 * 4;
}

// A pool work item of grouped_gemm: rows [r0, r1) of segment seg.
struct item {
  std::size_t seg;
  std::int64_t r0, r1;
};

// Decode-sized grouped calls: at most this many tokens in every segment (the lane-per-column
// kernels; the AVX-512 fp32 kernel puts 7+ tokens in the lanes).
constexpr std::int64_t chain_max_tokens = 6;

// A decode-sized grouped call with each pool thread on one contiguous run of the call's rows
// (segments in order), every kernel call told where the thread's next rows start so its
// prefetch runs on into them (detail::next_rows). Dynamic (segment, row-tile) items left each
// expert matrix to start cold — the README's test checkpoint has 235 KB matrices, and their
// first 16 KB were read at DRAM latency. Runs are weighted by rows × (tokens + 3) (a row's
// decode costs about three tokens' multiply-adds) and cut at 4-row boundaries, so every row's
// result is the one the dynamic route gives (each row is summed alone, in column order).
// The runs balance themselves (parallel_pieces): a thread done with its own run takes pieces
// from the back of the other's. piece(seg, r0, r1, next) runs rows [r0, r1) of segment seg,
// next = where the thread's next piece probably starts (empty when there is none).
template <class Piece>
void chained_rows(std::span<const expert_segment> segments, std::int64_t work, Piece piece) {
  const auto ns = static_cast<std::int64_t>(segments.size());
  auto tokens = [&](std::int64_t i) { return segments[static_cast<std::size_t>(i)].end - segments[static_cast<std::size_t>(i)].begin; };
  auto rows = [&](std::int64_t i) { return tokens(i) > 0 ? segments[static_cast<std::size_t>(i)].w.rows : 0; };
  std::int64_t total = 0;
  for (std::int64_t i = 0; i < ns; ++i) total += rows(i) * (tokens(i) + 3);
  struct pos {
    std::int64_t seg, row;
  };
  // Where thread i of nt starts: the segment and 4-row boundary nearest total · i / nt.
  auto bound = [&](int i, int nt) -> pos {
    if (i >= nt) return {ns, 0};
    const std::int64_t g = total * i / nt;
    std::int64_t acc = 0;
    for (std::int64_t s = 0; s < ns; ++s) {
      const std::int64_t c = tokens(s) + 3, here = rows(s) * c;
      if (g < acc + here) return {s, std::min(((g - acc) / c + 2) / 4 * 4, rows(s))};
      acc += here;
    }
    return {ns, 0};
  };
  auto start_of = [&](std::int64_t s, std::int64_t r) {
    const matrix_view& w = segments[static_cast<std::size_t>(s)].w;
    return detail::next_rows{w.packed + r * (w.cols / 2), w.scales + r * (w.cols / block_size)};
  };
  if (work < min_parallel_work) {
    // Serially: every segment's rows in order, each told where the next one starts.
    std::int64_t ps = -1;
    for (std::int64_t s = 0; s < ns; ++s) {
      if (rows(s) == 0) continue;
      if (ps >= 0) piece(static_cast<std::size_t>(ps), 0, rows(ps), start_of(s, 0));
      ps = s;
    }
    if (ps >= 0) piece(static_cast<std::size_t>(ps), 0, rows(ps), {});
    return;
  }
  // Each thread's rows as pieces that balance themselves (parallel_pieces): cut where a
  // segment ends, the run's last rows halved down to 64-row pieces, so that a thread that lags
  // (a busy shared core) has its tail finished by the other. Which thread sums a row never
  // changes its bits.
  struct cut {
    std::int64_t seg, r0, r1;
  };
  std::vector<cut> pieces;
  std::vector<std::int64_t> first{0}; // each thread's first piece
  const int nt = kernel_threads();
  for (int ti = 0; ti < nt; ++ti) {
    const pos a = bound(ti, nt), b = bound(ti + 1, nt);
    std::int64_t left = 0; // the run's rows not yet cut
    for (std::int64_t s = a.seg; s < ns && s <= b.seg; ++s)
      left += (s == b.seg ? b.row : rows(s)) - (s == a.seg ? a.row : 0);
    for (std::int64_t s = a.seg; s < ns && s <= b.seg; ++s) {
      const std::int64_t r1 = s == b.seg ? b.row : rows(s);
      for (std::int64_t r0 = s == a.seg ? a.row : 0; r0 < r1;) {
        const std::int64_t r = std::min(r1, r0 + std::max<std::int64_t>(64, left / 2 / 4 * 4));
        pieces.push_back({s, r0, r});
        left -= r - r0;
        r0 = r;
      }
    }
    first.push_back(static_cast<std::int64_t>(pieces.size()));
  }
  parallel_pieces(first, [&](std::int64_t p, std::int64_t q) {
    const cut& c = pieces[static_cast<std::size_t>(p)];
    const detail::next_rows next = q >= 0 ? start_of(pieces[static_cast<std::size_t>(q)].seg, pieces[static_cast<std::size_t>(q)].r0)
                                          : detail::next_rows{};
    piece(static_cast<std::size_t>(c.seg), c.r0, c.r1, next);
  });
}

// grouped_gemm for activations::int8 where AVX512-VNNI is usable. First every token is
// quantized once, in parallel: a large segment's tokens into 16-token tiles, a small segment's
// tokens each into the few-token layout. Then the rows run: chained when every segment is a
// few-token one (decode), else as the (segment, row-tile) items make_items() returns (built
// only on that route).
template <class MakeItems>
void grouped_q8(const float* x, std::int64_t ldx, std::span<const expert_segment> segments, MakeItems make_items,
                float* y, std::int64_t ldy) {
  const std::int64_t cols = segments.front().w.cols;
  const std::int64_t tile_bytes = q8_tile_bytes(cols), vec_bytes = q8_vec_bytes(cols);
  // Per segment: its first tile, or for a small one its first token vector.
  std::vector<std::int64_t> first(segments.size(), 0);
  struct tile_job {
    std::int64_t row, tokens; // first row of x, tokens in the tile
  };
  std::vector<tile_job> tile_jobs;
  std::vector<std::int64_t> vec_rows; // one token each, in the few-token layout
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const auto& s = segments[i];
    const std::int64_t n = s.end - s.begin;
    if (n <= 0 || s.w.rows == 0) continue;
    if (n < q8_min_tokens) {
      first[i] = static_cast<std::int64_t>(vec_rows.size());
      for (std::int64_t t = 0; t < n; ++t) vec_rows.push_back(s.begin + t);
      continue;
    }
    first[i] = static_cast<std::int64_t>(tile_jobs.size());
    for (std::int64_t t = 0; t < n; t += q8_tile_tokens)
      tile_jobs.push_back({s.begin + t, std::min<std::int64_t>(q8_tile_tokens, n - t)});
  }
  const auto n_tiles = static_cast<std::int64_t>(tile_jobs.size()), n_vecs = static_cast<std::int64_t>(vec_rows.size());
  thread_local std::vector<std::uint8_t> storage;
  thread_local std::vector<q8_tile> tiles;
  thread_local std::vector<const std::uint8_t*> vecs;
  storage.resize(static_cast<std::size_t>(n_tiles * tile_bytes + n_vecs * vec_bytes + 64));
  tiles.resize(tile_jobs.size());
  vecs.resize(vec_rows.size());
  std::uint8_t* base = storage.data() + (64 - reinterpret_cast<std::uintptr_t>(storage.data()) % 64) % 64;
  std::uint8_t* vec_base = base + n_tiles * tile_bytes;
  for (std::int64_t k = 0; k < n_vecs; ++k) vecs[static_cast<std::size_t>(k)] = vec_base + k * vec_bytes;
  // The pool's threads must see this thread's buffers, not their own thread_locals.
  q8_tile* tile = tiles.data();
  const std::uint8_t* const* vec = vecs.data();
  parallel_for_work(n_tiles + n_vecs, (n_tiles * 16 + n_vecs) * cols * 8, [&](std::int64_t k) {
    if (k < n_tiles) {
      const tile_job& j = tile_jobs[static_cast<std::size_t>(k)];
      tile[k] = detail::q8_make_tile_avx512(x + j.row * ldx, ldx, static_cast<int>(j.tokens), cols, base + k * tile_bytes);
    } else {
      const std::int64_t row = vec_rows[static_cast<std::size_t>(k - n_tiles)];
      detail::q8_make_vec_avx512(x + row * ldx, cols, vec_base + (k - n_tiles) * vec_bytes);
    }
  });
  std::int64_t work = 0;
  for (const auto& s : segments) work += (s.end - s.begin) * s.w.rows * s.w.cols;
  if (n_tiles == 0) {
    // Decode-sized (every segment few-token): each thread on one contiguous run of rows, its
    // prefetch running on from one expert matrix into the next (as the fp32 route's
    // grouped_chained; the dynamic items below started every matrix cold).
    chained_rows(segments, work, [&](std::size_t i, std::int64_t r0, std::int64_t r1, const detail::next_rows& next) {
      const auto& s = segments[i];
      detail::q8_gemv_avx512vnni(vec + first[i], static_cast<int>(s.end - s.begin), s.w, r0, r1, y + s.begin * ldy,
                                 ldy, next);
    });
    return;
  }
  const std::vector<item> items = make_items();
  parallel_for_work(static_cast<std::int64_t>(items.size()), work, [&](std::int64_t k) {
    const item& it = items[static_cast<std::size_t>(k)];
    const auto& s = segments[it.seg];
    const std::int64_t n = s.end - s.begin;
    const std::int64_t f = first[it.seg];
    if (n >= q8_min_tokens)
      detail::q8_rows_avx512vnni(tile + f, (n + q8_tile_tokens - 1) / q8_tile_tokens, s.w, it.r0, it.r1,
                                 y + s.begin * ldy, ldy);
    else
      detail::q8_gemv_avx512vnni(vec + f, static_cast<int>(n), s.w, it.r0, it.r1, y + s.begin * ldy, ldy);
  });
}

// grouped_gemm for activations::int8 on AVX2 CPUs (no VNNI): segments of at most
// q8_avx2_max_tokens tokens (decode) take the integer kernel on per-token vectors; larger ones
// the fp32 AVX2 kernel on the rounded activations, as without this path. A call whose segments
// are all of the first kind (a decode step) runs chained, as grouped_q8's; otherwise the
// (segment, row-tile) items make_items() returns.
template <class MakeItems>
void grouped_q8_avx2(const float* x, std::int64_t ldx, std::int64_t x_rows, std::span<const expert_segment> segments,
                     MakeItems make_items, float* y, std::int64_t ldy) {
  const std::int64_t cols = segments.front().w.cols, vec_bytes = detail::q8_vec_avx2_bytes(cols);
  std::vector<std::int64_t> first(segments.size(), 0);
  std::vector<std::int64_t> vec_rows;
  bool any_large = false;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const auto& s = segments[i];
    const std::int64_t n = s.end - s.begin;
    if (n <= 0 || s.w.rows == 0) continue;
    if (n > detail::q8_avx2_max_tokens) {
      any_large = true;
      continue;
    }
    first[i] = static_cast<std::int64_t>(vec_rows.size());
    for (std::int64_t t = 0; t < n; ++t) vec_rows.push_back(s.begin + t);
  }
  const auto n_vecs = static_cast<std::int64_t>(vec_rows.size());
  thread_local std::vector<std::uint8_t> storage;
  thread_local std::vector<const std::uint8_t*> vecs;
  thread_local std::vector<float> rounded_x;
  storage.resize(static_cast<std::size_t>(n_vecs * vec_bytes + 64));
  vecs.resize(vec_rows.size());
  std::uint8_t* base = storage.data() + (64 - reinterpret_cast<std::uintptr_t>(storage.data()) % 64) % 64;
  for (std::int64_t k = 0; k < n_vecs; ++k) vecs[static_cast<std::size_t>(k)] = base + k * vec_bytes;
  const std::uint8_t* const* vec = vecs.data(); // the pool's threads see this thread's buffers
  parallel_for_work(n_vecs, n_vecs * cols * 8, [&](std::int64_t k) {
    detail::q8_make_vec_avx2(x + vec_rows[static_cast<std::size_t>(k)] * ldx, cols, base + k * vec_bytes);
  });
  const float* xr = nullptr;
  if (any_large) {
    rounded_x.resize(static_cast<std::size_t>(x_rows * cols));
    q8_round_rows(x, ldx, x_rows, cols, rounded_x.data());
    xr = rounded_x.data();
  }
  std::int64_t work = 0;
  for (const auto& s : segments) work += (s.end - s.begin) * s.w.rows * s.w.cols;
  if (!any_large) {
    chained_rows(segments, work, [&](std::size_t i, std::int64_t r0, std::int64_t r1, const detail::next_rows& next) {
      const auto& s = segments[i];
      detail::q8_gemv_avx2(vec + first[i], static_cast<int>(s.end - s.begin), s.w, r0, r1, y + s.begin * ldy, ldy,
                           next);
    });
    return;
  }
  const std::vector<item> items = make_items();
  parallel_for_work(static_cast<std::int64_t>(items.size()), work, [&](std::int64_t k) {
    const item& it = items[static_cast<std::size_t>(k)];
    const auto& s = segments[it.seg];
    const std::int64_t n = s.end - s.begin;
    if (n <= detail::q8_avx2_max_tokens)
      detail::q8_gemv_avx2(vec + first[it.seg], static_cast<int>(n), s.w, it.r0, it.r1, y + s.begin * ldy, ldy);
    else
      detail::gemm_rows_avx2(xr + s.begin * cols, cols, n, s.w, it.r0, it.r1, y + s.begin * ldy, ldy, {});
  });
}

// grouped_gemm on AMX (mxfp4_gemm_amx.cpp) for fp32 and bf16 activations: segments of at least
// amx_min_tokens tokens run on tiles — fp32 activations as three bf16 parts (hi + mid + lo, so
// the products are those of the fp32 kernel), bf16 activations as the one rounded copy — and
// smaller segments (decode) the kernels they take without AMX. Segments go in waves whose split
// activations fit amx_split_budget bytes, each wave one split pass and one pass of items.
void grouped_amx(const float* x, std::int64_t ldx, std::int64_t x_rows, std::span<const expert_segment> segments,
                 float* y, std::int64_t ldy, activations a) {
  const std::int64_t cols = segments.front().w.cols, nb = cols / block_size;
  const int splits = a == activations::bf16 ? 1 : 3; // fp32_bf16x2 counts as fp32 here
  // The non-AMX route of small segments, as grouped_gemm runs it without AMX.
  auto fn = select();
  const float* xf = x;
  std::int64_t ldf = ldx;
  thread_local std::vector<float> rounded_buf;
  if (use_dot(a, cols)) {
    fn = detail::gemm_rows_avx512bf16;
  } else if (a == activations::bf16) {
    xf = rounded(x, ldx, x_rows, cols, rounded_buf);
    ldf = cols;
  }
  const std::int64_t threads = kernel_threads();
  std::int64_t total_rows = 0;
  for (const auto& s : segments)
    if (s.end > s.begin) total_rows += s.w.rows;
  thread_local std::vector<bf16_t> split_buf;
  std::vector<std::size_t> wave;
  std::vector<std::int64_t> offset(segments.size(), 0);
  std::size_t next = 0;
  while (next < segments.size()) {
    // Collect one wave.
    wave.clear();
    std::int64_t split_elems = 0;
    for (; next < segments.size(); ++next) {
      const auto& s = segments[next];
      const std::int64_t n = s.end - s.begin;
      if (n <= 0 || s.w.rows == 0) continue;
      const std::int64_t need = n >= amx_min_tokens ? (n + 15) / 16 * 16 * nb * 32 * splits : 0;
      if (!wave.empty() && (split_elems + need) * 2 > amx_split_budget) break;
      offset[next] = split_elems;
      split_elems += need;
      wave.push_back(next);
    }
    split_buf.resize(static_cast<std::size_t>(split_elems + 32));
    bf16_t* xs = split_buf.data() + ((64 - reinterpret_cast<std::uintptr_t>(split_buf.data()) % 64) % 64) / sizeof(bf16_t);
    std::vector<std::size_t> amx_segs;
    for (std::size_t i : wave)
      if (segments[i].end - segments[i].begin >= amx_min_tokens) amx_segs.push_back(i);
    parallel_for_work(static_cast<std::int64_t>(amx_segs.size()), split_elems * 4, [&](std::int64_t j) {
      const auto& s = segments[amx_segs[static_cast<std::size_t>(j)]];
      const std::int64_t n = s.end - s.begin, stride = (n + 15) / 16 * 16 * nb * 32;
      bf16_t* dst = xs + offset[amx_segs[static_cast<std::size_t>(j)]];
      dense::detail::split_bf16_rows(x + s.begin * ldx, ldx, n, cols, splits, dst, stride);
      dense::detail::vnni_tiles(dst, splits * stride / 512);
    });
    // Items: (segment, row range); AMX segments in multiples of 32 rows.
    std::vector<item> items;
    std::int64_t work = 0;
    for (std::size_t i : wave) {
      const auto& s = segments[i];
      const std::int64_t n = s.end - s.begin;
      work += n * s.w.rows * cols;
      std::int64_t tile = std::max<std::int64_t>(16, total_rows / (4 * threads));
      tile = n >= amx_min_tokens ? (tile + 31) / 32 * 32 : (tile + 3) / 4 * 4;
      for (std::int64_t r = 0; r < s.w.rows; r += tile) items.push_back({i, r, std::min(s.w.rows, r + tile)});
    }
    parallel_for_work(static_cast<std::int64_t>(items.size()), work, [&](std::int64_t k) {
      const item& it = items[static_cast<std::size_t>(k)];
      const auto& s = segments[it.seg];
      const std::int64_t n = s.end - s.begin;
      if (n >= amx_min_tokens && detail::amx_scales_ok(s.w, it.r0, it.r1)) {
        thread_local std::vector<bf16_t> scratch;
        thread_local std::vector<float> acc;
        scratch.resize(static_cast<std::size_t>(32 * 32 * detail::amx_kblocks + 32));
        acc.resize(static_cast<std::size_t>((n + 31) / 32 * 1024 + 16));
        bf16_t* sp = scratch.data() + ((64 - reinterpret_cast<std::uintptr_t>(scratch.data()) % 64) % 64) / sizeof(bf16_t);
        float* ap = acc.data() + ((64 - reinterpret_cast<std::uintptr_t>(acc.data()) % 64) % 64) / sizeof(float);
        detail::gemm_rows_amx(xs + offset[it.seg], splits, (n + 15) / 16 * 16 * nb * 32, n, s.w, it.r0, it.r1,
                              y + s.begin * ldy, ldy, sp, ap);
      } else {
        fn(xf + s.begin * ldf, ldf, n, s.w, it.r0, it.r1, y + s.begin * ldy, ldy, {});
      }
    });
  }
}

void grouped_chained(const float* x, std::int64_t ldx, std::span<const expert_segment> segments, float* y,
                     std::int64_t ldy, detail::gemm_rows_fn fn, std::int64_t work) {
  chained_rows(segments, work, [&](std::size_t i, std::int64_t r0, std::int64_t r1, const detail::next_rows& next) {
    const expert_segment& sg = segments[i];
    fn(x + sg.begin * ldx, ldx, sg.end - sg.begin, sg.w, r0, r1, y + sg.begin * ldy, ldy, next);
  });
}

} // namespace

void gemm_rows(const float* x, std::int64_t ldx, std::int64_t m, const matrix_view& w, std::int64_t row_begin,
               std::int64_t row_end, float* y, std::int64_t ldy) {
  check(x, ldx, m, w, y, ldy, "mxfp4::gemm_rows");
  row_begin = std::max<std::int64_t>(0, row_begin);
  row_end = std::min(row_end, w.rows);
  if (m == 0 || row_end <= row_begin) return;
  select()(x, ldx, m, w, row_begin, row_end, y, ldy, {});
}

void gemm(const float* x, std::int64_t ldx, std::int64_t m, const matrix_view& w, float* y, std::int64_t ldy,
          activations a) {
  check(x, ldx, m, w, y, ldy, "mxfp4::gemm");
  if (m == 0 || w.rows == 0) return;
  if (a == activations::int8) {
    const expert_segment one{w, 0, m};
    grouped_gemm(x, ldx, std::span<const expert_segment>(&one, 1), y, ldy, a);
    return;
  }
  auto fn = select();
  thread_local std::vector<float> xr;
  if (use_dot(a, w.cols)) {
    fn = detail::gemm_rows_avx512bf16;
  } else if (a == activations::bf16) {
    x = rounded(x, ldx, m, w.cols, xr);
    ldx = w.cols;
  }
  const std::int64_t tile = row_tile(w.rows, m);
  const std::int64_t tiles = (w.rows + tile - 1) / tile;
  parallel_for_work(tiles, m * w.rows * w.cols, [&](std::int64_t t) {
    fn(x, ldx, m, w, t * tile, std::min(w.rows, (t + 1) * tile), y, ldy, {});
  });
}

void grouped_gemm(const float* x, std::int64_t ldx, std::span<const expert_segment> segments, float* y,
                  std::int64_t ldy, activations a) {
  std::int64_t total_rows = 0, x_rows = 0, max_tokens = 0;
  for (const auto& s : segments) {
    if (s.end < s.begin) throw std::invalid_argument("mxfp4::grouped_gemm: segment end < begin");
    check(x, ldx, s.end - s.begin, s.w, y, ldy, "mxfp4::grouped_gemm");
    if (s.end > s.begin) total_rows += s.w.rows;
    x_rows = std::max(x_rows, s.end);
    max_tokens = std::max(max_tokens, s.end - s.begin);
  }
  if (total_rows == 0) return;
  // (segment, row-tile) pool items for the routes that hand work out dynamically (not the
  // chained decode route, which partitions rows itself).
  auto make_items = [&] {
    std::vector<item> items;
    const std::int64_t threads = kernel_threads();
    for (std::size_t i = 0; i < segments.size(); ++i) {
      const auto& s = segments[i];
      if (s.end <= s.begin || s.w.rows == 0) continue;
      // Aim for ≥ 4 items per thread over the whole call, never tiles under 16 rows.
      std::int64_t tile = std::max<std::int64_t>(16, total_rows / (4 * threads));
      tile = (tile + 3) / 4 * 4;
      for (std::int64_t r = 0; r < s.w.rows; r += tile) items.push_back({i, r, std::min(s.w.rows, r + tile)});
    }
    return items;
  };
  const std::int64_t cols = segments.front().w.cols;
  if (a == activations::int8 && int8_dot_available()) {
    grouped_q8(x, ldx, segments, make_items, y, ldy);
    return;
  }
  if (a == activations::int8 && active_isa() == isa::avx2) {
    grouped_q8_avx2(x, ldx, x_rows, segments, make_items, y, ldy);
    return;
  }
  // Decode-sized calls keep the streaming kernels on AMX CPUs too (below amx_min_tokens the AMX
  // route runs them anyway); the chained route below is their faster form.
  if (a != activations::int8 && amx_bf16_available() && cols <= amx_max_cols &&
      max_tokens >= amx_min_tokens) {
    grouped_amx(x, ldx, x_rows, segments, y, ldy, a);
    return;
  }
  // bf16 or int8 activations without the dot kernel: round once here, then the fp32 kernel.
  auto fn = select();
  thread_local std::vector<float> buf;
  if (a == activations::int8) {
    buf.resize(static_cast<std::size_t>(x_rows * cols));
    q8_round_rows(x, ldx, x_rows, cols, buf.data());
    x = buf.data();
    ldx = cols;
  } else if (use_dot(a, cols)) {
    fn = detail::gemm_rows_avx512bf16;
  } else if (a == activations::bf16) {
    x = rounded(x, ldx, x_rows, cols, buf);
    ldx = cols;
  }
  std::int64_t work = 0;
  for (const auto& s : segments) work += (s.end - s.begin) * s.w.rows * s.w.cols;
  if (max_tokens <= chain_max_tokens) {
    grouped_chained(x, ldx, segments, y, ldy, fn, work);
    return;
  }
  const std::vector<item> items = make_items();
  parallel_for_work(static_cast<std::int64_t>(items.size()), work, [&](std::int64_t k) {
    const item& it = items[static_cast<std::size_t>(k)];
    const auto& s = segments[it.seg];
    fn(x + s.begin * ldx, ldx, s.end - s.begin, s.w, it.r0, it.r1, y + s.begin * ldy, ldy, {});
  });
}

} // namespace k3::mxfp4
