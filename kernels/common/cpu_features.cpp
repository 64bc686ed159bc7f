#include "kernels/common/cpu_features.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace k3 {
namespace {

isa probe() noexcept {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
      && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return isa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return isa::avx2;
  return isa::scalar;
}

isa min_isa(isa a, isa b) noexcept { return static_cast<int>(a) < static_cast<int>(b) ? a : b; }

isa initial_active() noexcept {
  isa level = detected_isa();
  if (const char* env = std::getenv("K3_ISA")) {
    isa wanted;
    if (parse_isa(env, wanted)) level = min_isa(level, wanted);
  }
  return level;
}

std::atomic<int>& active_slot() noexcept {
  static std::atomic<int> slot{static_cast<int>(initial_active())};
  return slot;
}

struct amx_caps {
  bool bf16 = false;
  bool int8 = false;
};

// CPUID leaf 7 EDX: AMX-BF16 bit 22, AMX-TILE bit 24, AMX-INT8 bit 25 (GCC 12's
// __builtin_cpu_supports does not know them). The OS must enable XTILECFG/XTILEDATA in XCR0
// (bits 17, 18), and Linux hands tile data to a process only after ARCH_REQ_XCOMP_PERM.
amx_caps probe_amx() noexcept {
  amx_caps caps;
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return caps;
  const bool tile = (d >> 24) & 1u;
  if (!tile) return caps;
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  if (!__get_cpuid(1, &a1, &b1, &c1, &d1) || !((c1 >> 27) & 1u)) return caps; // OSXSAVE
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if (((lo >> 17) & 3u) != 3u) return caps;
#if defined(__linux__)
  constexpr long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
  if (syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) != 0) return caps;
#else
  return caps;
#endif
  caps.bf16 = (d >> 22) & 1u;
  caps.int8 = (d >> 25) & 1u;
#endif
  return caps;
}

const amx_caps& amx_cpu() noexcept {
  static const amx_caps caps = probe_amx();
  return caps;
}

std::atomic<bool>& amx_slot() noexcept {
  static std::atomic<bool> slot{[] {
    const char* env = std::getenv("K3_AMX");
    return !(env && std::strcmp(env, "0") == 0);
  }()};
  return slot;
}

} // namespace

bool amx_detected() noexcept { return amx_cpu().bf16 || amx_cpu().int8; }

bool amx_bf16_available() noexcept {
  return amx_cpu().bf16 && active_isa() == isa::avx512 && amx_slot().load(std::memory_order_relaxed);
}

bool amx_int8_available() noexcept {
  return amx_cpu().int8 && active_isa() == isa::avx512 && amx_slot().load(std::memory_order_relaxed);
}

bool set_amx_override(bool enabled) noexcept { return amx_slot().exchange(enabled); }

isa detected_isa() noexcept {
  static const isa level = probe();
  return level;
}

isa active_isa() noexcept { return static_cast<isa>(active_slot().load(std::memory_order_relaxed)); }

isa set_isa_override(isa level) noexcept {
  level = min_isa(level, detected_isa());
  return static_cast<isa>(active_slot().exchange(static_cast<int>(level)));
}

std::string_view to_string(isa level) noexcept {
  switch (level) {
    case isa::avx512: return "avx512";
    case isa::avx2: return "avx2";
    case isa::scalar: return "scalar";
  }
  return "scalar";
}

bool parse_isa(std::string_view text, isa& out) noexcept {
  if (text == "scalar") out = isa::scalar;
  else if (text == "avx2") out = isa::avx2;
  else if (text == "avx512") out = isa::avx512;
  else return false;
  return true;
}

bool bf16_dot_available() noexcept {
  static const bool cpu = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") != 0;
  }();
  return cpu && active_isa() == isa::avx512;
}

bool amd_cpu() noexcept {
  static const bool amd = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("amd") != 0;
  }();
  return amd;
}

bool bf16_dot_full_rate() noexcept { return amd_cpu() && bf16_dot_available(); }

bool int8_dot_available() noexcept {
  static const bool cpu = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") != 0;
  }();
  return cpu && active_isa() == isa::avx512;
}

} // namespace k3
