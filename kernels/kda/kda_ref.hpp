#pragma once
// fp64 oracle for KDA: the literal per-timestep recurrence of spec §5.3 (fla naive_recurrent_kda)
// and the gate/conv formulas, written for clarity, not speed. Same layouts as kda.hpp.

#include <cstdint>
#include <vector>

#include "kernels/kda/kda.hpp"

namespace k3::kda {

/// state (in/out) and o use double. Inputs are fp32 as the kernels see them.
void recurrent_ref(const float* q, const float* k, const float* v, const float* g, const float* beta, std::int64_t T,
                   const dims& d, std::vector<double>& state, std::vector<double>& o);

void decay_gate_ref(const float* graw, std::int64_t T, int H, int dk, const float* A_log, const float* dt_bias,
                    const gate_params& p, std::vector<double>& g);

void short_conv_ref(const float* x, std::int64_t T, std::int64_t C, const float* w, int K,
                    std::vector<double>& state, std::vector<double>& y);

} // namespace k3::kda
