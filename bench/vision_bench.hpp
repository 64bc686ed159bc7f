#pragma once
// `k3 bench vision`: the MoonViT tower + projector on the CPU for a few image sizes: patches/s
// and achieved GFLOP/s beside the dense bf16 GEMM's own rate at the tower's shapes, measured in
// the same run (bench/vision_bench.cpp).

#include <string>
#include <vector>

namespace k3::bench {

struct vision_bench_options {
  std::string model_dir; ///< a checkpoint with a vision tower; empty: K3's tower sizes, written once
  std::string cache_dir = "/tmp/k3-vision-bench";
  std::vector<std::string> sizes{"224x224", "1024x1024", "1536x1024"};
  int repetitions = 1;
  int threads = 0;
};

int run_vision_benchmark(const vision_bench_options& o);

} // namespace k3::bench
