#include "kernels/common/blas_core.hpp"

#include <cstdlib>
#include <cstring>

#include <unistd.h>

extern "C" char* openblas_get_corename(void);

namespace k3 {

const char* blas_core_name() noexcept { return openblas_get_corename(); }

const char* blas_core_upgrade(const char* current) noexcept {
  if (!current) return nullptr;
  // OpenBLAS's generic x86-64 fallbacks (pre-AVX2 kernels).
  static const char* const weak[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
                                     "Sandybridge", "Katmai", "Coppermine", "Northwood", "Banias", "Opteron",
                                     "Opteron_SSE3", "Barcelona", "Bobcat", "Bulldozer", "Piledriver"};
  bool is_weak = false;
  for (const char* w : weak) is_weak = is_weak || std::strcmp(current, w) == 0;
  if (!is_weak) return nullptr;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    return __builtin_cpu_supports("avx512bf16") ? "Cooperlake" : "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

void ensure_blas_core(char** argv) noexcept {
  if (std::getenv("OPENBLAS_CORETYPE")) return;
  if (const char* keep = std::getenv("K3_BLAS_CORE"); keep && std::strcmp(keep, "keep") == 0) return;
  const char* pick = blas_core_upgrade(blas_core_name());
  if (!pick || !argv) return;
  if (::setenv("OPENBLAS_CORETYPE", pick, 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  // exec failed (no /proc): carry on with the slower kernels; the variable stays set so a
  // child process started from here gets the better ones.
}

} // namespace k3
