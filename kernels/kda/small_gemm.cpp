#include "kernels/kda/small_gemm.hpp"

#include <cblas.h>

#include "kernels/common/cpu_features.hpp"

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")

namespace k3::kda::detail {
namespace {

// C[MR, NR·16] tile: A element a(i, k) broadcast, B row k loaded as NR vectors.
template <bool TransA, int MR, int NR, bool Masked>
inline void tile(int K, float alpha, const float* A, int lda, const float* B, int ldb, float* C, int ldc, bool acc,
                 __mmask16 last_mask, const float* row_scale) {
  __m512 c[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) c[i][j] = _mm512_setzero_ps();
  for (int k = 0; k < K; ++k) {
    __m512 b[NR];
    for (int j = 0; j < NR; ++j)
      b[j] = (j + 1 < NR || !Masked) ? _mm512_loadu_ps(B + k * ldb + 16 * j)
                                     : _mm512_maskz_loadu_ps(last_mask, B + k * ldb + 16 * j);
    for (int i = 0; i < MR; ++i) {
      const __m512 a = _mm512_set1_ps(TransA ? A[k * lda + i] : A[i * lda + k]);
      for (int j = 0; j < NR; ++j) c[i][j] = _mm512_fmadd_ps(a, b[j], c[i][j]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha);
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      float* dst = C + i * ldc + 16 * j;
      const __mmask16 m = j + 1 < NR ? __mmask16(0xFFFF) : last_mask;
      __m512 v = _mm512_mul_ps(c[i][j], al);
      if (acc) {
        const __m512 old = Masked || j + 1 < NR ? _mm512_maskz_loadu_ps(m, dst) : _mm512_loadu_ps(dst);
        v = row_scale ? _mm512_fmadd_ps(old, _mm512_set1_ps(row_scale[i]), v) : _mm512_add_ps(v, old);
      }
      if (Masked && j + 1 == NR) _mm512_mask_storeu_ps(dst, m, v);
      else _mm512_storeu_ps(dst, v);
    }
}

template <bool TransA, int MR>
inline void rows(int N, int K, float alpha, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
                 bool acc, const float* rs) {
  int j = 0;
  for (; j + 32 <= N; j += 32) tile<TransA, MR, 2, false>(K, alpha, A, lda, B + j, ldb, C + j, ldc, acc, 0xFFFF, rs);
  if (j < N) {
    const int rem = N - j;
    // Masked loads are several times slower than plain ones on this core: use them only for
    // a genuinely partial last vector.
    if (rem == 16)
      tile<TransA, MR, 1, false>(K, alpha, A, lda, B + j, ldb, C + j, ldc, acc, 0xFFFF, rs);
    else if (rem > 16)
      tile<TransA, MR, 2, true>(K, alpha, A, lda, B + j, ldb, C + j, ldc, acc, __mmask16((1u << (rem - 16)) - 1), rs);
    else
      tile<TransA, MR, 1, true>(K, alpha, A, lda, B + j, ldb, C + j, ldc, acc, __mmask16((1u << rem) - 1), rs);
  }
}

template <bool TransA>
void gemm512(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
             bool acc, const float* rs) {
  auto a_at = [&](int i) { return TransA ? A + i : A + i * lda; };
  int i = 0;
  for (; i + 8 <= M; i += 8) rows<TransA, 8>(N, K, alpha, a_at(i), lda, B, ldb, C + i * ldc, ldc, acc, rs ? rs + i : nullptr);
  for (; i + 4 <= M; i += 4) rows<TransA, 4>(N, K, alpha, a_at(i), lda, B, ldb, C + i * ldc, ldc, acc, rs ? rs + i : nullptr);
  for (; i < M; ++i) rows<TransA, 1>(N, K, alpha, a_at(i), lda, B, ldb, C + i * ldc, ldc, acc, rs ? rs + i : nullptr);
}

// C[i][j] = Σ_k A[i][k]·B[j][k]: dot-product form, 4 B rows at a time.
void gemm_nt512(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
                bool acc) {
  for (int i = 0; i < M; ++i) {
    const float* a = A + i * lda;
    for (int j = 0; j < N; ++j) {
      const float* b = B + j * ldb;
      __m512 s = _mm512_setzero_ps();
      int k = 0;
      for (; k + 16 <= K; k += 16) s = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), s);
      if (k < K) {
        const __mmask16 m = __mmask16((1u << (K - k)) - 1);
        s = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + k), _mm512_maskz_loadu_ps(m, b + k), s);
      }
      const float v = alpha * _mm512_reduce_add_ps(s);
      C[i * ldc + j] = acc ? C[i * ldc + j] + v : v;
    }
  }
}

} // namespace
} // namespace k3::kda::detail

#pragma GCC pop_options

namespace k3::kda::detail {

void gemm_nn(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
             bool accumulate) {
  if (M <= 0 || N <= 0) return;
  if (active_isa() == isa::avx512) return gemm512<false>(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate, nullptr);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, accumulate ? 1.0f : 0.0f, C,
              ldc);
}

void gemm_tn(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
             bool accumulate, const float* row_scale) {
  if (M <= 0 || N <= 0) return;
  if (active_isa() == isa::avx512)
    return gemm512<true>(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate, accumulate ? row_scale : nullptr);
  if (accumulate && row_scale)
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) C[i * ldc + j] *= row_scale[i];
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, accumulate ? 1.0f : 0.0f, C,
              ldc);
}

void gemm_nt(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
             bool accumulate) {
  if (M <= 0 || N <= 0) return;
  if (active_isa() == isa::avx512) return gemm_nt512(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, alpha, A, lda, B, ldb, accumulate ? 1.0f : 0.0f, C,
              ldc);
}

} // namespace k3::kda::detail
