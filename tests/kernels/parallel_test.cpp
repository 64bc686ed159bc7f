// parallel_pieces: every piece exactly once, owners front to back, thieves from the back.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

#include <catch2/catch.hpp>
#include <omp.h>

#include "kernels/common/parallel.hpp"

namespace {

struct visit {
  int thread;
  std::int64_t piece, next;
};

// Runs parallel_pieces over `first` with nt threads and returns every call in the order each
// thread made them (per thread), plus how many times each piece ran.
struct record {
  std::vector<std::vector<visit>> by_thread;
  std::vector<int> count;
};

template <class Slow>
record run(const std::vector<std::int64_t>& first, int nt, Slow slow) {
  record r;
  r.by_thread.resize(static_cast<std::size_t>(nt));
  r.count.assign(static_cast<std::size_t>(first.back()), 0);
  std::mutex mu;
  const int prev = omp_get_max_threads();
  omp_set_num_threads(nt);
  k3::parallel_pieces(first, [&](std::int64_t p, std::int64_t next) {
    slow(p);
    const std::lock_guard lock(mu);
    const int t = omp_get_thread_num();
    r.by_thread[static_cast<std::size_t>(t)].push_back({t, p, next});
    ++r.count[static_cast<std::size_t>(p)];
  });
  omp_set_num_threads(prev);
  return r;
}

} // namespace

TEST_CASE("parallel_pieces runs every piece once, each run front to back by its owner", "[parallel]") {
  // Runs of uneven length, empty ones, more runs than threads (the extra ones are stolen), and
  // 1–4 threads. Whatever each thread got, a piece it took from its own run's front comes after
  // the previous one it took there, and one it stole before the previous one it stole there.
  const std::vector<std::vector<std::int64_t>> layouts = {
      {0, 1}, {0, 5, 9}, {0, 0, 7}, {0, 3, 3, 11}, {0, 40, 41, 100, 160}, {0, 2, 4, 6, 8, 10, 12, 14}};
  for (const auto& first : layouts)
    for (const int nt : {1, 2, 3, 4}) {
      INFO("runs=" << first.size() - 1 << " pieces=" << first.back() << " threads=" << nt);
      const record r = run(first, nt, [](std::int64_t) {});
      for (const int c : r.count) REQUIRE(c == 1);
      for (std::size_t t = 0; t < r.by_thread.size(); ++t) {
        // Per run, the pieces this thread took: rising in its own run (or in every run when
        // serial), falling in another's (stolen from the back).
        std::vector<std::int64_t> last(first.size() - 1, -1);
        for (const visit& v : r.by_thread[t]) {
          REQUIRE(v.next >= -1);
          REQUIRE(v.next < first.back());
          REQUIRE(v.next != v.piece);
          std::size_t run_of = 0;
          while (v.piece >= first[run_of + 1]) ++run_of;
          INFO("thread " << t << " piece " << v.piece << " of run " << run_of);
          if (last[run_of] >= 0) {
            if (run_of == t || nt == 1) REQUIRE(v.piece > last[run_of]);
            else REQUIRE(v.piece < last[run_of]);
          }
          last[run_of] = v.piece;
        }
      }
    }
}

TEST_CASE("parallel_pieces: serially the pieces run in order, each told the next", "[parallel]") {
  const std::vector<std::int64_t> first = {0, 4, 4, 9};
  const record r = run(first, 1, [](std::int64_t) {});
  REQUIRE(r.by_thread[0].size() == 9);
  for (std::int64_t p = 0; p < 9; ++p) {
    CHECK(r.by_thread[0][static_cast<std::size_t>(p)].piece == p);
    CHECK(r.by_thread[0][static_cast<std::size_t>(p)].next == (p + 1 < 9 ? p + 1 : -1));
  }
}

TEST_CASE("parallel_pieces: a held-up thread's run is finished from its back by the other", "[parallel]") {
  // Thread 0 is held in its first piece until every other piece has run, so thread 1 must
  // take its own run (6..9) front to back and then thread 0's rest (1..5) from the back:
  // 5, 4, 3, 2, 1, each told the piece before it as its likely next one. (Thread 1's first
  // piece waits until thread 0 holds piece 0, so that it cannot steal that one too.)
  const std::vector<std::int64_t> first = {0, 6, 10};
  std::atomic<int> done{0};
  std::atomic<bool> holding{false}, timed_out{false};
  auto wait_for = [&](auto ready) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!ready())
      if (std::chrono::steady_clock::now() > until) {
        timed_out = true;
        return;
      }
  };
  const record r = run(first, 2, [&](std::int64_t p) {
    if (p == 0) {
      holding = true;
      wait_for([&] { return done.load() == 9; });
      return;
    }
    if (p == 6) wait_for([&] { return holding.load(); });
    done.fetch_add(1);
  });
  REQUIRE_FALSE(timed_out.load());
  for (const int c : r.count) REQUIRE(c == 1);
  REQUIRE(r.by_thread[0].size() == 1);
  CHECK(r.by_thread[0][0].piece == 0);
  const std::vector<std::int64_t> want = {6, 7, 8, 9, 5, 4, 3, 2, 1};
  const std::vector<std::int64_t> want_next = {7, 8, 9, -1, 4, 3, 2, 1, -1};
  REQUIRE(r.by_thread[1].size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("call " << i);
    CHECK(r.by_thread[1][i].piece == want[i]);
    CHECK(r.by_thread[1][i].next == want_next[i]);
  }
}
