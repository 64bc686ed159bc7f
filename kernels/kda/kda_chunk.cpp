// Chunked (WY / UT-transform) KDA prefill. See kda.hpp for the contract; derivation:
//
// Within a chunk with entry state S0 and inclusive per-channel cumulative log-decay G_i,
//   W̃ = (I + A)⁻¹ diag(β) (V − (e^G ⊙ K) S0),  A[i][j] = β_i Σ_d k_i k_j e^(G_i − G_j)  (j < i)
//   O  = (e^G ⊙ Q) S0 + Aqk W̃,                 Aqk[i][j] = Σ_d q_i k_j e^(G_i − G_j)  (j ≤ i)
//   S1 = diag(e^G_last) S0 + (e^(G_last − G) ⊙ K)ᵀ W̃
// With T = (I + A)⁻¹ diag(β) this is W̃ = T (V − (e^G ⊙ K) S0) (= U − W S0 of spec §5.4
// without forming U and W); one product [e^G⊙K; e^G⊙Q]·S0 serves both W̃ and O.
//
// Exponent safety: G is a within-chunk cumsum, so e^G, e^(G_last − G) have arguments ≤ 0.
// A and Aqk need e^(G_i − G_j) for j ≤ i. Fast path: when the whole chunk decays by ≤ 80 nats
// in every channel (K3's bounded gate with chunks ≤ 16 always does), e^(G_i)·e^(−G_j) has
// finite factors and each score matrix is one product. Otherwise the chunk is cut into
// sub-blocks short enough to decay by ≤ 80 nats each (powers of two ≤ 16): inside a block the
// same factoring holds relative to the block start (a block whose single token decays more is
// evaluated pairwise, argument ≤ 0); across blocks a > b the factor goes through the block
// ends, e^(G_i − G_e(a−1)) · e^(G_e(a−1) − G_e(b)) · e^(G_e(b) − G_j), each argument ≤ 0.
// Nothing is ever e^(+large), whatever the gate. The products use small_gemm.hpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/common/fast_math.hpp"
#include "kernels/common/parallel.hpp"
#include "kernels/kda/kda.hpp"
#include "kernels/kda/small_gemm.hpp"

namespace k3::kda {
namespace {

constexpr int max_sub = 16;

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

// out[i][d] = x[i][d] · e^(sign · (g[i][d] − ref[d])) for rows [r0, r1). Callers choose sign and
// ref so that every argument is ≤ 0 (or bounded, on the checked fast path).
__attribute__((target_clones("avx512f", "avx2", "default"))) void scale_rows(const float* __restrict x,
                                                                              std::int64_t ldx,
                                                                              const float* __restrict g,
                                                                              const float* __restrict ref, int r0,
                                                                              int r1, int n, float sign,
                                                                              float* __restrict out) {
  for (int i = r0; i < r1; ++i) {
    const float* gi = g + i * n;
    const float* xi = x + i * ldx;
    float* oi = out + i * n;
    for (int d = 0; d < n; ++d) oi[d] = xi[d] * fast_exp(sign * (gi[d] - ref[d]));
  }
}

// Fast-path operands from one exponential per element (valid when the chunk decays by ≤ 80
// nats, so E = e^G ≥ e^-80 and 1/E is finite):
//   Kg = k·E, Qg = q·E, Kend = k·e^G_last/E, Kinv = k/E; then KinvT = Kinvᵀ for the score
//   products (a separate pass: a strided store inside the exp loop defeats vectorisation).
__attribute__((target_clones("avx512f", "avx2", "default"))) void fast_operands(
    const float* __restrict q, const float* __restrict k, std::int64_t ld, const float* __restrict G,
    const float* __restrict glast_exp, int c, int n, float* __restrict Kg, float* __restrict Qg,
    float* __restrict Kend, float* __restrict Kinv, float* __restrict KinvT) {
  for (int i = 0; i < c; ++i) {
    const float* gi = G + i * n;
    const float* qi = q + i * ld;
    const float* ki = k + i * ld;
    for (int d = 0; d < n; ++d) {
      const float e = fast_exp(gi[d]);
      const float inv = fast_exp(-gi[d]); // ≤ e^80; a second exp pipelines better than a divide
      Kg[i * n + d] = ki[d] * e;
      Qg[i * n + d] = qi[d] * e;
      Kend[i * n + d] = ki[d] * (glast_exp[d] * inv);
      Kinv[i * n + d] = ki[d] * inv;
    }
  }
  for (int d = 0; d < n; ++d)
    for (int i = 0; i < c; ++i) KinvT[d * c + i] = Kinv[i * n + d];
}

struct workspace {
  std::vector<float> G, KQ, P, Y, Kend, Kinv, Qh, Kh, Kb, qq, kbl, dq, dk, zero, A, Aqk, Tm, Vn, tmp, decay;
  void size(int C, int K, int V) {
    auto z = [](std::vector<float>& v, std::size_t n) {
      if (v.size() != n) v.assign(n, 0.0f);
    };
    z(Kinv, C * K);
    z(qq, C * K);
    z(kbl, C * K);
    z(dq, max_sub * K);
    z(dk, max_sub * K);
    z(zero, K);
    z(decay, K);
    z(G, C * K);
    z(KQ, 2 * C * K);
    z(P, 2 * C * V);
    z(Y, C * V);
    z(Kend, C * K);
    z(Qh, C * K);
    z(Kh, C * K);
    z(Kb, C * K);
    z(A, C * C);
    z(Aqk, C * C);
    z(Tm, C * C);
    z(Vn, C * V);
    z(tmp, K);
  }
};

// Builds A (strictly lower, β-scaled rows) and Aqk (lower incl. diagonal) for one chunk of c
// tokens. q, k rows have stride ld; Gc is [c, K] contiguous.
__attribute__((target_clones("avx512f", "avx2", "default"))) void intra_scores(const float* q, const float* k, std::int64_t ld, const float* beta, std::int64_t ldb, int c, int K,
                  int sub, workspace& w) {
  const float* G = w.G.data();
  std::fill(w.A.begin(), w.A.begin() + c * c, 0.0f);
  std::fill(w.Aqk.begin(), w.Aqk.begin() + c * c, 0.0f);
  // Contiguous copies of this chunk's q and k rows (for the pairwise pass).
  std::vector<float>& kq = w.Kb; // [c, K] copy of k
  std::vector<float>& qq = w.qq;
  for (int i = 0; i < c; ++i) std::memcpy(kq.data() + i * K, k + i * ld, sizeof(float) * K);
  for (int i = 0; i < c; ++i) std::memcpy(qq.data() + i * K, q + i * ld, sizeof(float) * K);
  const int nsub = (c + sub - 1) / sub;
  // Rows of block a relative to the end of block a−1 (the chunk start for a = 0):
  // Qh = q e^(G − G_ref), Kh = k e^(G − G_ref), arguments ≤ 0.
  for (int a = 0; a < nsub; ++a) {
    const int a0 = a * sub, a1 = std::min(c, a0 + sub);
    const float* ref = a == 0 ? w.zero.data() : G + (a0 - 1) * K;
    scale_rows(qq.data(), K, G, ref, a0, a1, K, 1.0f, w.Qh.data());
    scale_rows(kq.data(), K, G, ref, a0, a1, K, 1.0f, w.Kh.data());
  }
  // Diagonal sub-blocks. If the block decays by ≤ 80 nats in every channel, e^(G_ref − G_j)
  // ≤ e^80 is finite and the block is two small products; otherwise evaluate pairwise.
  for (int a = 0; a < nsub; ++a) {
    const int a0 = a * sub, a1 = std::min(c, a0 + sub), ra = a1 - a0;
    const float* ref = a == 0 ? w.zero.data() : G + (a0 - 1) * K;
    float span = 0.0f;
    for (int d = 0; d < K; ++d) span = std::max(span, ref[d] - G[(a1 - 1) * K + d]);
    if (span <= 80.0f) {
      scale_rows(kq.data(), K, G, ref, a0, a1, K, -1.0f, w.Kinv.data()); // k e^(G_ref − G) ≤ e^80
      detail::gemm_nt(ra, ra, K, 1.0f, w.Qh.data() + a0 * K, K, w.Kinv.data() + a0 * K, K, w.Aqk.data() + a0 * c + a0,
                      c, false);
      detail::gemm_nt(ra, ra, K, 1.0f, w.Kh.data() + a0 * K, K, w.Kinv.data() + a0 * K, K, w.A.data() + a0 * c + a0, c,
                      false);
      for (int i = a0; i < a1; ++i) {
        const float bi = beta[i * ldb];
        for (int j = a0; j < i; ++j) w.A[i * c + j] *= bi;
        for (int j = i; j < a1; ++j) w.A[i * c + j] = 0.0f;
        for (int j = i + 1; j < a1; ++j) w.Aqk[i * c + j] = 0.0f;
      }
      continue;
    }
    for (int i = a0; i < a1; ++i) {
      const float bi = beta[i * ldb];
      for (int j = a0; j <= i; ++j) {
        w.Aqk[i * c + j] = decayed_dot(qq.data() + i * K, kq.data() + j * K, G + i * K, G + j * K, K);
        if (j < i) w.A[i * c + j] = bi * decayed_dot(kq.data() + i * K, kq.data() + j * K, G + i * K, G + j * K, K);
      }
    }
  }
  if (nsub == 1) return;
  std::vector<float>&kbl = w.kbl, &dq = w.dq, &dk = w.dk;
  for (int b = 0; b + 1 < nsub; ++b) {
    const int b0 = b * sub, b1 = b0 + sub;
    scale_rows(kq.data(), K, G, G + (b1 - 1) * K, b0, b1, K, -1.0f, kbl.data()); // k_j e^(G_e(b) − G_j)
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
      detail::gemm_nt(ra, sub, K, 1.0f, dq.data(), K, kbl.data() + b0 * K, K, w.Aqk.data() + a0 * c + b0, c, false);
      detail::gemm_nt(ra, sub, K, 1.0f, dk.data(), K, kbl.data() + b0 * K, K, w.A.data() + a0 * c + b0, c, false);
      for (int i = 0; i < ra; ++i) {
        const float bi = beta[(a0 + i) * ldb];
        for (int j = 0; j < sub; ++j) w.A[(a0 + i) * c + b0 + j] *= bi;
      }
    }
  }
}

// T = (I + A)⁻¹ diag(β): forward substitution on the unit lower-triangular I + A.
__attribute__((target_clones("avx512f", "avx2", "default"))) void solve_t(const float* beta, std::int64_t ldb, int c, workspace& w) {
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

// Cloned per ISA so the elementwise loops (cumsum, masks, state decay) vectorise too.
__attribute__((target_clones("avx512f", "avx2", "default"))) void chunked_head(const float* q, const float* k, const float* v, const float* g, const float* beta, std::int64_t T,
                  int H, int K, int V, int C, float* S, float* o, workspace& w) {
  const std::int64_t ldk = static_cast<std::int64_t>(H) * K, ldv = static_cast<std::int64_t>(H) * V;
  for (std::int64_t t0 = 0; t0 < T; t0 += C) {
    const int c = static_cast<int>(std::min<std::int64_t>(C, T - t0));
    const float* qc = q + t0 * ldk;
    const float* kc = k + t0 * ldk;
    const float* vc = v + t0 * ldv;
    const float* bc = beta + t0 * H;
    // Inputs are [T, H, ·]: one head's rows sit H·d floats apart, a stride the hardware
    // prefetcher does not follow. Fetch the next chunk's q, k, v, g rows while this one runs.
    if (t0 + C < T) {
      const int cn = static_cast<int>(std::min<std::int64_t>(C, T - t0 - C));
      for (int i = 0; i < cn; ++i) {
        const std::int64_t rk = (t0 + C + i) * ldk, rv = (t0 + C + i) * ldv;
        for (int b = 0; b < K; b += 16) {
          __builtin_prefetch(q + rk + b);
          __builtin_prefetch(k + rk + b);
          __builtin_prefetch(g + rk + b);
        }
        for (int b = 0; b < V; b += 16) __builtin_prefetch(v + rv + b);
      }
    }
    // 1. cumulative log-decay inside the chunk.
    for (int d = 0; d < K; ++d) w.G[d] = g[t0 * ldk + d];
    for (int i = 1; i < c; ++i)
      for (int d = 0; d < K; ++d) w.G[i * K + d] = w.G[(i - 1) * K + d] + g[(t0 + i) * ldk + d];
    const float* Glast = w.G.data() + (c - 1) * K;
    // KQ stacks e^G ⊙ K (rows 0..c−1) over e^G ⊙ Q (rows c..2c−1) so one product with S serves both.
    float* Kg = w.KQ.data();
    float* Qg = w.KQ.data() + c * K;
    // 2./3. Decayed operands and intra-chunk scores. Fast path when the whole chunk decays by
    // at most 80 nats in every channel (always true for K3's bounded gate at c ≤ 16):
    // e^(−G) ≤ e^80 is finite, so e^(G_i − G_j) = e^(G_i) · e^(−G_j) and both score matrices
    // are one product each. Otherwise every exponent argument is kept ≤ 0 (sub-block scheme).
    float span = 0.0f;
    for (int d = 0; d < K; ++d) span = std::max(span, -Glast[d]);
    for (int d = 0; d < K; ++d) w.decay[d] = fast_exp(Glast[d]); // e^G_last: the chunk's state decay
    if (span <= 80.0f) {
      fast_operands(qc, kc, ldk, w.G.data(), w.decay.data(), c, K, Kg, Qg, w.Kend.data(),
                    w.Kh.data(), w.Kinv.data());
      detail::gemm_nn(c, c, K, 1.0f, Qg, K, w.Kinv.data(), c, w.Aqk.data(), c, false);
      detail::gemm_nn(c, c, K, 1.0f, Kg, K, w.Kinv.data(), c, w.A.data(), c, false);
      for (int i = 0; i < c; ++i) {
        const float bi = bc[i * H];
        for (int j = 0; j < i; ++j) w.A[i * c + j] *= bi;
        for (int j = i; j < c; ++j) w.A[i * c + j] = 0.0f;
        for (int j = i + 1; j < c; ++j) w.Aqk[i * c + j] = 0.0f;
      }
    } else {
      const float* zero = w.zero.data();
      scale_rows(kc, ldk, w.G.data(), zero, 0, c, K, 1.0f, Kg);    // e^G ⊙ K
      scale_rows(qc, ldk, w.G.data(), zero, 0, c, K, 1.0f, Qg);    // e^G ⊙ Q
      scale_rows(kc, ldk, w.G.data(), Glast, 0, c, K, -1.0f, w.Kend.data()); // e^(G_last − G) ⊙ K
      // Sub-blocks small enough that each decays by ≤ 80 nats (largest power of two ≤ 16 for
      // the chunk's strongest per-token decay), so the diagonal blocks factor too; a block that
      // still decays more (one token below −80) is evaluated pairwise.
      float gmax = 0.0f;
      for (int i = 0; i < c; ++i)
        for (int d = 0; d < K; ++d) gmax = std::max(gmax, -g[(t0 + i) * ldk + d]);
      int sub = max_sub;
      while (sub > 1 && sub * gmax > 80.0f) sub /= 2;
      intra_scores(qc, kc, ldk, bc, H, c, K, sub, w);
    }
    // 4. T = (I + A)⁻¹ diag(β). With P = [e^G⊙K; e^G⊙Q]·S (one product):
    //    V_new = T (V − P_top)   (= U − W S without forming U = T V and W = T (e^G⊙K))
    //    O     = P_bottom + Aqk V_new
    //    S    ← diag(e^G_last) S + Kendᵀ V_new.
    solve_t(bc, H, c, w);
    detail::gemm_nn(2 * c, V, K, 1.0f, w.KQ.data(), K, S, V, w.P.data(), V, false);
    for (int i = 0; i < c; ++i)
      for (int j = 0; j < V; ++j) w.Y[i * V + j] = vc[i * ldv + j] - w.P[i * V + j];
    detail::gemm_nn(c, V, c, 1.0f, w.Tm.data(), c, w.Y.data(), V, w.Vn.data(), V, false);
    float* oc = o + t0 * ldv;
    for (int i = 0; i < c; ++i) std::memcpy(oc + i * ldv, w.P.data() + (c + i) * V, sizeof(float) * V);
    detail::gemm_nn(c, V, c, 1.0f, w.Aqk.data(), c, w.Vn.data(), V, oc, static_cast<int>(ldv), true);
    detail::gemm_tn(K, V, c, 1.0f, w.Kend.data(), K, w.Vn.data(), V, S, V, true, w.decay.data()); // decay folded in
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
