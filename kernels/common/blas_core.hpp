#pragma once
// OpenBLAS kernel selection. Debian's OpenBLAS (0.3.21, DYNAMIC_ARCH) picks its kernels from
// the CPU model at load time, and on CPUs it does not know (recent Xeons under a hypervisor
// report "Intel(R) Xeon(R) Processor") it falls back to "Prescott": SSE3 sgemm, several times
// slower than the AVX-512 kernels the same library ships. The choice can only be changed
// through OPENBLAS_CORETYPE before the library initialises, i.e. before main.
//
// ensure_blas_core(argv) is the first call of k3's main: when OpenBLAS chose a pre-AVX2 core
// on a CPU with AVX-512 (→ Cooperlake with AVX512-BF16, else SkylakeX) or AVX2+FMA (→ Haswell),
// it sets OPENBLAS_CORETYPE and re-executes the binary (same PID, same arguments); if
// OPENBLAS_CORETYPE is already set (by the user or by the first pass) nothing happens.
// K3_BLAS_CORE=keep disables it.

namespace k3 {

/// The OpenBLAS core to use on this CPU if the library's own choice is a fallback; nullptr
/// when its choice is fine (or nothing better is available).
[[nodiscard]] const char* blas_core_upgrade(const char* current) noexcept;
/// OpenBLAS's current core name.
[[nodiscard]] const char* blas_core_name() noexcept;
/// See above; returns only when no re-execution happens.
void ensure_blas_core(char** argv) noexcept;

} // namespace k3
