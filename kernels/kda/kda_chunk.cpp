// Chunked (WY / UT-transform) KDA prefill. See kda.hpp for the contract; derivation:
//
// Within a chunk with entry state S0 and inclusive per-channel cumulative log-decay G_i,
//   W̃ = (I + A)⁻¹ diag(β) (V − (e^G ⊙ K) S0),  A[i][j] = β_i Σ_d k_i k_j e^(G_i − G_j)  (j < i)
//   O  = (e^G ⊙ Q) S0 + Aqk W̃,                 Aqk[i][j] = Σ_d q_i k_j e^(G_i − G_j)  (j ≤ i)
//   S1 = diag(e^G_last) S0 + (e^(G_last − G) ⊙ K)ᵀ W̃
// With U = T V, W = T (e^G ⊙ K), T = (I + A)⁻¹ diag(β): W̃ = U − W S0 (spec §5.4).
//
// Exponent safety: G is a within-chunk cumsum, so e^G, e^(G_last − G) have arguments ≤ 0.
// A and Aqk need e^(G_i − G_j) for j ≤ i: inside a 16-token sub-block we evaluate it pairwise
// (argument ≤ 0); across sub-blocks a < b we factor it through the block boundaries,
// e^(G_i − G_e(a−1)) · e^(G_e(a−1) − G_e(b)) · e^(G_e(b) − G_j), each argument ≤ 0. Nothing is
// ever e^(+large), whatever the gate.
//
// The per-chunk products are sgemm calls (OpenBLAS, single-threaded inside the head-parallel
// loop).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <cblas.h>

#include "kernels/common/fast_math.hpp"
#include "kernels/common/parallel.hpp"
#include "kernels/kda/kda.hpp"

namespace k3::kda {
namespace {

constexpr int sub = 16;

// Σ_d a[d]·b[d]·e^(ga[d] − gb[d]) (arguments ≤ 0 by the caller's ordering).
__attribute__((target_clones("avx512f", "avx2", "default"))) float decayed_dot(const float* __restrict a,
                                                                                const float* __restrict b,
                                                                                const float* __restrict ga,
                                                                                const float* __restrict gb, int n) {
  float acc[16] = {};
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j] * fast_exp(ga[i + j] - gb[i + j]);
  for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i] * fast_exp(ga[i] - gb[i]);
  float s = 0;
  for (float x : acc) s += x;
  return s;
}

// out[i][d] = x[i][d] · e^(g[i][d] − ref[d]) for rows [r0, r1); ref may be null (= 0).
__attribute__((target_clones("avx512f", "avx2", "default"))) void scale_rows(const float* __restrict x,
                                                                              std::int64_t ldx,
                                                                              const float* __restrict g,
                                                                              const float* __restrict ref, int r0,
                                                                              int r1, int n, bool negate,
                                                                              float* __restrict out) {
  for (int i = r0; i < r1; ++i)
    for (int d = 0; d < n; ++d) {
      const float arg = negate ? (ref ? ref[d] : 0.0f) - g[i * n + d] : g[i * n + d] - (ref ? ref[d] : 0.0f);
      out[i * n + d] = x[i * ldx + d] * fast_exp(arg);
    }
}

struct workspace {
  std::vector<float> G, Kg, Qg, Kend, Qh, Kh, Kb, A, Aqk, Tm, U, W, Vn, tmp;
  void size(int C, int K, int V) {
    auto z = [](std::vector<float>& v, std::size_t n) { v.assign(n, 0.0f); };
    z(G, C * K);
    z(Kg, C * K);
    z(Qg, C * K);
    z(Kend, C * K);
    z(Qh, C * K);
    z(Kh, C * K);
    z(Kb, C * K);
    z(A, C * C);
    z(Aqk, C * C);
    z(Tm, C * C);
    z(U, C * V);
    z(W, C * K);
    z(Vn, C * V);
    z(tmp, K);
  }
};

// Builds A (strictly lower, β-scaled rows) and Aqk (lower incl. diagonal) for one chunk of c
// tokens. q, k rows have stride ld; Gc is [c, K] contiguous.
void intra_scores(const float* q, const float* k, std::int64_t ld, const float* beta, std::int64_t ldb, int c, int K,
                  workspace& w) {
  const float* G = w.G.data();
  std::fill(w.A.begin(), w.A.begin() + c * c, 0.0f);
  std::fill(w.Aqk.begin(), w.Aqk.begin() + c * c, 0.0f);
  // Contiguous copies of this chunk's q and k rows (for the pairwise pass).
  std::vector<float>& kq = w.Kb; // reuse as [c, K] copy of k
  for (int i = 0; i < c; ++i) std::memcpy(kq.data() + i * K, k + i * ld, sizeof(float) * K);
  std::vector<float> qq(static_cast<std::size_t>(c) * K);
  for (int i = 0; i < c; ++i) std::memcpy(qq.data() + i * K, q + i * ld, sizeof(float) * K);
  const int nsub = (c + sub - 1) / sub;
  // Diagonal sub-blocks: pairwise.
  for (int a = 0; a < nsub; ++a) {
    const int a0 = a * sub, a1 = std::min(c, a0 + sub);
    for (int i = a0; i < a1; ++i) {
      const float bi = beta[i * ldb];
      for (int j = a0; j <= i; ++j) {
        w.Aqk[i * c + j] = decayed_dot(qq.data() + i * K, kq.data() + j * K, G + i * K, G + j * K, K);
        if (j < i) w.A[i * c + j] = bi * decayed_dot(kq.data() + i * K, kq.data() + j * K, G + i * K, G + j * K, K);
      }
    }
  }
  if (nsub == 1) return;
  // Off-diagonal: factor through block ends. Qh/Kh: rows of block a relative to the end of
  // block a−1; Kb: rows of block b relative to the end of block b (both arguments ≤ 0).
  for (int a = 1; a < nsub; ++a) {
    const int a0 = a * sub, a1 = std::min(c, a0 + sub);
    const float* ref = G + (a0 - 1) * K;
    scale_rows(qq.data(), K, G, ref, a0, a1, K, false, w.Qh.data());
    scale_rows(kq.data(), K, G, ref, a0, a1, K, false, w.Kh.data());
  }
  std::vector<float> kbl(static_cast<std::size_t>(c) * K), dq(static_cast<std::size_t>(sub) * K),
      dk(static_cast<std::size_t>(sub) * K);
  for (int b = 0; b + 1 < nsub; ++b) {
    const int b0 = b * sub, b1 = b0 + sub;
    scale_rows(kq.data(), K, G, G + (b1 - 1) * K, b0, b1, K, true, kbl.data()); // k_j e^(G_e(b) − G_j)
  }
  for (int a = 1; a < nsub; ++a) {
    const int a0 = a * sub, a1 = std::min(c, a0 + sub), ra = a1 - a0;
    for (int b = 0; b < a; ++b) {
      const int b0 = b * sub;
      // D[d] = e^(G_e(a−1) − G_e(b)) ≤ 1.
      for (int d = 0; d < K; ++d) w.tmp[d] = fast_exp(G[(a0 - 1) * K + d] - G[(b0 + sub - 1) * K + d]);
      for (int i = 0; i < ra; ++i)
        for (int d = 0; d < K; ++d) {
          dq[i * K + d] = w.Qh[(a0 + i) * K + d] * w.tmp[d];
          dk[i * K + d] = w.Kh[(a0 + i) * K + d] * w.tmp[d];
        }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ra, sub, K, 1.0f, dq.data(), K, kbl.data() + b0 * K, K,
                  0.0f, w.Aqk.data() + a0 * c + b0, c);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ra, sub, K, 1.0f, dk.data(), K, kbl.data() + b0 * K, K,
                  0.0f, w.A.data() + a0 * c + b0, c);
      for (int i = 0; i < ra; ++i) {
        const float bi = beta[(a0 + i) * ldb];
        for (int j = 0; j < sub; ++j) w.A[(a0 + i) * c + b0 + j] *= bi;
      }
    }
  }
}

// T = (I + A)⁻¹ diag(β): forward substitution on the unit lower-triangular I + A.
void solve_t(const float* beta, std::int64_t ldb, int c, workspace& w) {
  float* X = w.Tm.data();
  std::fill(X, X + c * c, 0.0f);
  for (int i = 0; i < c; ++i) {
    float* xi = X + i * c;
    xi[i] = 1.0f;
    for (int l = 0; l < i; ++l) {
      const float a = w.A[i * c + l];
      if (a == 0.0f) continue;
      const float* xl = X + l * c;
      for (int j = 0; j <= l; ++j) xi[j] -= a * xl[j];
    }
  }
  for (int i = 0; i < c; ++i)
    for (int j = 0; j <= i; ++j) X[i * c + j] *= beta[j * ldb];
}

void chunked_head(const float* q, const float* k, const float* v, const float* g, const float* beta, std::int64_t T,
                  int H, int K, int V, int C, float* S, float* o, workspace& w) {
  const std::int64_t ldk = static_cast<std::int64_t>(H) * K, ldv = static_cast<std::int64_t>(H) * V;
  for (std::int64_t t0 = 0; t0 < T; t0 += C) {
    const int c = static_cast<int>(std::min<std::int64_t>(C, T - t0));
    const float* qc = q + t0 * ldk;
    const float* kc = k + t0 * ldk;
    const float* vc = v + t0 * ldv;
    const float* bc = beta + t0 * H;
    // 1. cumulative log-decay inside the chunk.
    for (int d = 0; d < K; ++d) w.G[d] = g[t0 * ldk + d];
    for (int i = 1; i < c; ++i)
      for (int d = 0; d < K; ++d) w.G[i * K + d] = w.G[(i - 1) * K + d] + g[(t0 + i) * ldk + d];
    const float* Glast = w.G.data() + (c - 1) * K;
    // 2. decayed operands (all exponent arguments ≤ 0).
    scale_rows(kc, ldk, w.G.data(), nullptr, 0, c, K, false, w.Kg.data());   // e^G ⊙ K
    scale_rows(qc, ldk, w.G.data(), nullptr, 0, c, K, false, w.Qg.data());   // e^G ⊙ Q
    scale_rows(kc, ldk, w.G.data(), Glast, 0, c, K, true, w.Kend.data());    // e^(G_last − G) ⊙ K
    // 3. intra-chunk scores, T, U = T V, W = T (e^G ⊙ K).
    intra_scores(qc, kc, ldk, bc, H, c, K, w);
    solve_t(bc, H, c, w);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c, V, c, 1.0f, w.Tm.data(), c, vc, static_cast<int>(ldv),
                0.0f, w.U.data(), V);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c, K, c, 1.0f, w.Tm.data(), c, w.Kg.data(), K, 0.0f,
                w.W.data(), K);
    // 4. inter-chunk: V_new = U − W S; O = (e^G ⊙ Q) S + Aqk V_new; S ← e^G_last S + Kendᵀ V_new.
    std::memcpy(w.Vn.data(), w.U.data(), sizeof(float) * c * V);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c, V, K, -1.0f, w.W.data(), K, S, V, 1.0f, w.Vn.data(), V);
    float* oc = o + t0 * ldv;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c, V, K, 1.0f, w.Qg.data(), K, S, V, 0.0f, oc,
                static_cast<int>(ldv));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c, V, c, 1.0f, w.Aqk.data(), c, w.Vn.data(), V, 1.0f, oc,
                static_cast<int>(ldv));
    for (int d = 0; d < K; ++d) {
      const float a = fast_exp(Glast[d]);
      for (int j = 0; j < V; ++j) S[d * V + j] *= a;
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, V, c, 1.0f, w.Kend.data(), K, w.Vn.data(), V, 1.0f, S, V);
  }
}

} // namespace

void chunked(const float* q, const float* k, const float* v, const float* g, const float* beta, std::int64_t T,
             const dims& d, float* state, float* o, int chunk) {
  if (chunk < 1 || chunk > 256) throw std::invalid_argument("kda::chunked: chunk must be in [1, 256]");
  if (T == 0) return;
  const int H = d.heads, K = d.dk, V = d.dv;
  parallel_for(H, [&](std::int64_t h) {
    thread_local workspace w;
    w.size(chunk, K, V);
    chunked_head(q + h * K, k + h * K, v + h * V, g + h * K, beta + h, T, H, K, V, chunk, state + h * K * V,
                 o + h * V, w);
  });
}

} // namespace k3::kda
