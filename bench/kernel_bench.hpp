#pragma once
// `k3 bench kernels`: the kernel benchmarks whose numbers go into the README.
//
//  * MXFP4 GEMV/GEMM at K3 expert shapes (w1/w3 3072x3584, w2 3584x3072) cycling over a
//    working set larger than the last-level cache, M = 1 and M = 16, against a streaming read
//    of the same bytes measured in the same run.
//  * KDA prefill: chunked vs token-by-token recurrent, same inputs, same run.
//  * MLA attention at a 4K-token context: tiled vs row-wise kernel, prefill and decode.
//  * Elementwise ops (SiTU/SiLU-GLU, KDA short conv): the active ISA vs the scalar path.
// Each benchmark validates its kernel against the reference before timing it.

#include <string>

namespace k3::bench {

struct kernel_bench_options {
  std::string only;          ///< "", "mxfp4", "kda", "dense", "dense-decode", "mla", "ops"
  double working_set_gib = 1.0; ///< MXFP4 bytes cycled over (≥ 1 GiB defeats a 32 MiB L3)
  int kda_tokens = 4096;
  int kda_heads = 16;
  double min_seconds = 0.5;  ///< per measurement
  bool quick = false;        ///< smaller sizes for smoke runs
};

/// Runs the selected benchmarks, prints tables to stdout; returns 0, or 1 if a validation failed.
int run_kernel_benchmarks(const kernel_bench_options& opts);

int run_mxfp4_bench(const kernel_bench_options& opts);
int run_kda_bench(const kernel_bench_options& opts);
int run_dense_bench(const kernel_bench_options& opts);
int run_mla_bench(const kernel_bench_options& opts);
int run_ops_bench(const kernel_bench_options& opts);

} // namespace k3::bench
