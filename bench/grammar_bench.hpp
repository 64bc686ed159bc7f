#pragma once
// `k3 bench grammar`: compile time per schema (one thread and several) and the time per token to
// fill a grammar's token mask on a 163,840-id vocabulary (the K3 size), p50 / p99 / max (bench/grammar_bench.cpp).

#include <cstdint>
#include <string>

namespace k3::bench {

struct grammar_bench_options {
  std::string tiktoken; ///< a real rank file instead of the generated 163,584-token vocabulary
  int steps = 400;      ///< tokens per walk
  std::uint64_t seed = 1;
  unsigned threads = 4; ///< compile threads for the second compile column
};

int run_grammar_benchmark(const grammar_bench_options& o);

} // namespace k3::bench
