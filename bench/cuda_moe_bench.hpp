#pragma once
// `k3 bench cuda`: the GPU MoE layer (kernels/cuda/moe_decode) at K3's real dimensions — 896
// experts of 3 × 3072 × 3584 MXFP4, 16 active per token, batch 1 … 64 — against the HBM floor
// (bytes of the selected experts / 4.8 TB/s, H200) and against this card's measured
// device-to-device copy bandwidth; and the KDA recurrent decode of one K3 layer against the
// same measured bandwidth; then the KDA prefill table (H = 96, dk = dv = 128, T = 8192, chunked
// vs recurrent, against the measured copy bandwidth and fp32 FMA rate; cuda_bench_util.hpp).
// Needs a CUDA device; returns 2 without one.

#include <string>

namespace k3::bench {

/// `model_dir` non-empty: also the whole-model table (run_cuda_model_table).
int run_cuda_moe_benchmark(bool quick, const std::string& model_dir = {});

} // namespace k3::bench
