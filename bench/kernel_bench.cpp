#include "bench/kernel_bench.hpp"

namespace k3::bench {

int run_kernel_benchmarks(const kernel_bench_options& opts) {
  int rc = 0;
  if (opts.only.empty() || opts.only == "mxfp4") rc |= run_mxfp4_bench(opts);
  if (opts.only.empty() || opts.only == "dense" || opts.only == "dense-decode") rc |= run_dense_bench(opts);
  if (opts.only.empty() || opts.only == "kda") rc |= run_kda_bench(opts);
  if (opts.only.empty() || opts.only == "mla") rc |= run_mla_bench(opts);
  if (opts.only.empty() || opts.only == "ops") rc |= run_ops_bench(opts);
  return rc;
}

} // namespace k3::bench
