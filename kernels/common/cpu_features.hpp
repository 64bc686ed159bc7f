#pragma once
// Run-time instruction-set selection for the CPU kernels.
//
// Kernels with hand-written SIMD paths (MXFP4 GEMM, bf16 GEMV) ship a scalar, an AVX2+FMA and
// an AVX-512 (F/BW/VL/DQ) variant and pick one per call through active_isa(). The choice is
// made once from CPUID; the environment variable K3_ISA=scalar|avx2|avx512 lowers it (never
// raises it above what the CPU has) so benchmarks and bug reports can pin a path; K3_AMX=0
// turns off the AMX tile paths (prefill GEMMs on Xeons that have AMX). This file is the only
// place the kernels read the environment.
//
// Thread safety: active_isa() is safe from any thread; set_isa_override() is for tests and
// benchmarks and must not race with running kernels.

#include <string_view>

namespace k3 {

enum class isa { scalar = 0, avx2 = 1, avx512 = 2 };

/// Best ISA the CPU supports (ignores overrides).
[[nodiscard]] isa detected_isa() noexcept;

/// ISA the kernels use now: min(detected, K3_ISA, set_isa_override()).
[[nodiscard]] isa active_isa() noexcept;

/// Forces a path (clamped to detected_isa()); returns the previous active value.
isa set_isa_override(isa level) noexcept;

[[nodiscard]] std::string_view to_string(isa level) noexcept;

/// AVX512-BF16 (vdpbf16ps) usable now: the CPU has it and the active ISA is AVX-512.
[[nodiscard]] bool bf16_dot_available() noexcept;

/// bf16_dot_available() on a CPU whose vdpbf16ps does twice the fp32 FMA's flops (AMD Zen 4/5:
/// 1000 vs 540 GFLOP/s measured on a 2-vCPU Zen 5). Intel parts without AMX run it at the
/// FMA's flop rate (166 vs 329 GFLOP/s on a 2-vCPU Xeon), where bf16 prefill GEMMs lose to the
/// widened fp32 sgemm; the prefill route keys on this.
[[nodiscard]] bool bf16_dot_full_rate() noexcept;
/// The CPU's vendor is AMD. Route thresholds measured per vendor key on it (the dense batch
/// route in dense_gemm.cpp).
[[nodiscard]] bool amd_cpu() noexcept;
/// AVX512-VNNI (vpdpbusd) usable now: the CPU has it and the active ISA is AVX-512.
[[nodiscard]] bool int8_dot_available() noexcept;

/// AMX with bf16 tiles (TDPBF16PS) usable now: the CPU has AMX-TILE and AMX-BF16, the OS
/// enables tile state and granted this process tile data (requested once, arch_prctl on
/// Linux), the active ISA is AVX-512, and neither K3_AMX=0 nor set_amx_override(false)
/// turned it off.
[[nodiscard]] bool amx_bf16_available() noexcept;

/// AMX-INT8 (TDPBUSD) usable now: amx_bf16_available()'s conditions with AMX-INT8 for AMX-BF16.
[[nodiscard]] bool amx_int8_available() noexcept;

/// The CPU and OS can run AMX tiles (ignores K3_AMX and overrides); for reports.
[[nodiscard]] bool amx_detected() noexcept;

/// Turns the AMX paths off (false) or back on (true, where detected); returns the previous
/// setting. For tests and benchmarks that time both paths in one run.
bool set_amx_override(bool enabled) noexcept;

/// Parses "scalar", "avx2", "avx512"; false on anything else.
bool parse_isa(std::string_view text, isa& out) noexcept;

/// RAII override for a scope (tests sweep every path with it).
class scoped_isa {
public:
  explicit scoped_isa(isa level) noexcept : prev_(set_isa_override(level)) {}
  ~scoped_isa() { set_isa_override(prev_); }
  scoped_isa(const scoped_isa&) = delete;
  scoped_isa& operator=(const scoped_isa&) = delete;

private:
  isa prev_;
};

} // namespace k3
