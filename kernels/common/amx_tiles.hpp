#pragma once
// Shared pieces of the AMX kernels (dense/gemm_bf16_amx.cpp, mxfp4/mxfp4_gemm_amx.cpp) and the
// AMX peak bench: the one tile shape they use and the 16 × 16 32-bit transpose that turns 16 rows
// of bf16 pairs into AMX's pair-interleaved B layout. Callers check amx_bf16_available()
// (cpu_features.hpp) first; these functions carry their own target attributes so that they can
// be included anywhere and inline into the AMX-compiled kernels.

#include <cstdint>

#include <immintrin.h>

namespace k3::amx {

/// Palette 1, tiles 0..7 each 16 rows × 64 bytes (16 × 16 fp32, 16 × 32 bf16). Configures the
/// calling thread's tile registers; pair with _tile_release() when done.
__attribute__((target("amx-tile"))) inline void configure_16x64() {
  struct alignas(64) {
    std::uint8_t palette = 1;
    std::uint8_t start_row = 0;
    std::uint8_t reserved[14] = {};
    std::uint16_t colsb[16] = {};
    std::uint8_t rows[16] = {};
  } cfg;
  for (int i = 0; i < 8; ++i) {
    cfg.colsb[i] = 64;
    cfg.rows[i] = 16;
  }
  _tile_loadconfig(&cfg);
}

/// Tile instructions with the tile numbers as template arguments. GCC's _tile_* intrinsics
/// paste their tile arguments into the assembly text, so they only take literal numbers; these
/// take constant expressions (for kernels unrolled over tile blocks). Same operations:
/// tload<T>(p, stride) = _tile_loadd, tstore = _tile_stored, tzero = _tile_zero,
/// tdp_bf16<C, A, B>() = _tile_dpbf16ps(C, A, B): C += A · B.
template <int T>
inline void tload(const void* p, std::int64_t stride) {
  __asm__ volatile("{tileloadd\t(%0,%1,1), %%tmm%c2|tileloadd\t%%tmm%c2, [%0+%1*1]}" ::"r"(p), "r"(stride), "i"(T)
                   : "memory");
}
template <int T>
inline void tstore(void* p, std::int64_t stride) {
  __asm__ volatile("{tilestored\t%%tmm%c2, (%0,%1,1)|tilestored\t[%0+%1*1], %%tmm%c2}" ::"r"(p), "r"(stride), "i"(T)
                   : "memory");
}
template <int T>
inline void tzero() {
  __asm__ volatile("tilezero\t%%tmm%c0" ::"i"(T));
}
template <int C, int A, int B>
inline void tdp_bf16() {
  __asm__ volatile("{tdpbf16ps\t%%tmm%c0, %%tmm%c1, %%tmm%c2|tdpbf16ps\t%%tmm%c2, %%tmm%c1, %%tmm%c0}" ::"i"(B), "i"(A),
                   "i"(C));
}

/// 16 rows of 16 32-bit values → their transpose (r[i] holds row i on entry, column i on exit).
__attribute__((target("avx512f"))) inline void transpose16x16_epi32(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {
    u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g + 0], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g + 0], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  // u[4g + j], 128-bit lane L: column 4L + j of rows 4g..4g+3.
  for (int j = 0; j < 4; ++j) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88), v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xdd);
    const __m512i w0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88),
                  w1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xdd);
    r[j] = _mm512_shuffle_i32x4(v0, w0, 0x88);
    r[8 + j] = _mm512_shuffle_i32x4(v0, w0, 0xdd);
    r[4 + j] = _mm512_shuffle_i32x4(v1, w1, 0x88);
    r[12 + j] = _mm512_shuffle_i32x4(v1, w1, 0xdd);
  }
}

} // namespace k3::amx
