#include "bench/kernel_bench.hpp"
namespace k3::bench { int run_kda_bench(const kernel_bench_options&) { return 0; } }
