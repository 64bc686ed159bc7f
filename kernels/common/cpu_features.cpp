#include "kernels/common/cpu_features.hpp"

#include <atomic>
#include <cstdlib>

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

} // namespace

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

bool int8_dot_available() noexcept {
  static const bool cpu = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") != 0;
  }();
  return cpu && active_isa() == isa::avx512;
}

} // namespace k3
