// SPDX-License-Identifier: MIT
/**
 * @file linear.hpp
 * Linear attention for `backend::simd<Arch>` / `simd_policy<Arch>` (the reference kernel's
 * algorithm, backend/reference/linear.hpp, on the softmax kernel's micro-kernels):
 *
 * - non-causal: S = K̃ᵀV (blocks of 256 keys) and z = Σ k̃, then out = Q̃·S [/ max(Q̃·z, eps)]:
 *   two register-blocked GEMM-like passes (`pv_micro`);
 * - causal, by chunks of `chunk` query rows: keys at positions before the chunk's first query
 *   position are folded into the d_f×d_v state S (kept in the workspace, i.e. in cache) with
 *   weights λ^{p′−t}; the chunk's queries get λ^{s−p}·q̃·S from the state plus an intra-chunk
 *   product A = (Q̃ K̃ᵀ ⊙ mask ⊙ λ^{s−t})·V, A by the packed-K micro-kernel of softmax, formed
 *   and applied only over each row group's visible key prefix when keys are offsets. Every
 *   decay exponent is ≥ 0; chunk-local powers come from a table of λ^Δ, Δ ≥ 0;
 * - causal self-attention (keys at the queries' positions, offsets; d_f and d_v multiples of the
 *   vector width W), the common case: chunks of exactly W rows whatever `chunk` says, so that
 *   the chunk's keys are one vector (`vector_chunks`); the n mod W last rows, the general way;
 * - the same with φ then an lrpe encoder (or a vectorised φ alone): the features are computed
 *   inside the kernel, 64 rows of Q and K at a time (`linear_fused`, the backend's
 *   `linear_fused_kernel`), instead of by a pass that writes Q̃ and K̃ for the kernel to read back.
 *
 * The state leaves with every key of the call (`linear_attention_state`, as the reference).
 * Scratch: S, z, one chunk's packed K/V and tiles in a reused `simd_workspace`; the feature
 * maps 1+elu, relu, relu+ε and identity are vectorised (`linear_features_kernel`).
 */
#pragma once

#include <lrpe/attention/backend_interface.hpp>
#include <lrpe/attention/state.hpp>
#include <lrpe/backend/simd/encode.hpp>
#include <lrpe/backend/simd/parallel.hpp>
#include <lrpe/backend/simd/detail/micro_kernels.hpp>
#include <lrpe/backend/simd/workspace.hpp>
#include <lrpe/backend/simd/detail/tuning.hpp>
#include <lrpe/detail/mul_add.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <xsimd/xsimd.hpp>

namespace lrpe {
inline namespace v0 {
namespace backend {
namespace simd_detail {

template <index_t K, class T, class A>
inline void pv_remainder(index_t k, const T* p, index_t prs, index_t pcs, const T* alpha, const T* v, index_t dvp,
                         index_t nk, T* o) noexcept {
  if constexpr (K >= 1) {
    if (k == K) {
      pv_rows<K, T, A>(p, prs, pcs, alpha, v, dvp, nk, o);
    } else {
      pv_remainder<K - 1, T, A>(k, p, prs, pcs, alpha, v, dvp, nk, o);
    }
  }
}

/// O[0:rows) += P·V for any number of rows (O row stride dvp; p(r, j) = p[r·prs + j·pcs]).
template <class T, class A>
void gemm_rows(index_t rows, const T* p, index_t prs, index_t pcs, const T* v, index_t dvp, index_t nk, T* o) noexcept {
  constexpr index_t R = softmax_tiling<T, A>::R;
  T ones[R];
  std::fill(ones, ones + R, T(1));
  index_t i = 0;
  for (; i + R <= rows; i += R) pv_rows<R, T, A>(p + i * prs, prs, pcs, ones, v, dvp, nk, o + i * dvp);
  if (i < rows) pv_remainder<R - 1, T, A>(rows - i, p + i * prs, prs, pcs, ones, v, dvp, nk, o + i * dvp);
}

/// λ^Δ for Δ ≥ 0 (1 without decay), in double as the reference. Δ = 1 (every decode step)
/// returns λ itself, which is pow's exact result, without the call.
inline double decay_pow(double lambda, position_t delta) noexcept {
  if (lambda == 1.0 || delta == 0) return 1.0;
  return delta == 1 ? lambda : std::pow(lambda, static_cast<double>(delta));
}

/// A chunk's feature rows as `linear_run::vector_chunks` reads them: q̃ rows `qs` apart, k̃
/// rows `ks` apart.
template <class T>
struct feature_rows {
  const T* q;
  index_t qs;
  const T* k;
  index_t ks;
};

/// Where `linear_run::vector_chunks` gets a chunk's feature rows: `get(context, i0, m)`. A
/// plain function pointer, so that the kernel is compiled once per (T, arch), not once per
/// encoding and feature map (one call per chunk: no measurable cost).
template <class T>
struct rows_source {
  void* context;
  feature_rows<T> (*get)(void* context, index_t i0, index_t m);

  /// Calls `source(i0, m)` on an object of any type with that operator.
  template <class Source>
  static rows_source of(Source& source) noexcept {
    return {&source, [](void* c, index_t i0, index_t m) { return (*static_cast<Source*>(c))(i0, m); }};
  }
  feature_rows<T> operator()(index_t i0, index_t m) const { return get(context, i0, m); }
};

/// The features are the problem's own rows (computed before the call, or φ = identity).
template <class T>
struct stored_rows {
  const linear_problem<T>& p;
  feature_rows<T> operator()(index_t i0, index_t) const noexcept {
    return {p.qf.row(i0), p.qf.row_stride, p.kf.row(i0), p.kf.row_stride};
  }
};

template <class T, class A>
struct linear_run {
  const linear_problem<T>& p;
  simd_workspace& ws;
  double lambda;
  index_t f, dv, dvp;
  T* S;  ///< f × dvp
  T* z;  ///< f
  T* vblock;
  position_t last = 0;
  index_t count = 0;
  double carry = 1.0;  ///< the state's decay carry (lrpe::detail::carried_decay)

  static constexpr index_t key_block = linear_key_block;

  /// The factor that decays S and z by λ^Δ, Δ ≥ 0, with the rounding of the earlier ones carried.
  T rescale_factor(position_t delta) noexcept {
    return lrpe::detail::carried_decay<T>(decay_pow(lambda, delta), carry);
  }

  /// Pack V rows [a, b) (× weight w_j when `weights`) into vblock (b − a) × dvp.
  void pack_v(index_t a, index_t b, const T* weights) {
    using B = xsimd::batch<T, A>;
    constexpr index_t W = B::size;
    for (index_t j = a; j < b; ++j) {
      T* dst = vblock + (j - a) * dvp;
      const T* src = p.v.row(j);
      if (weights == nullptr && dv % W == 0) {
        // whole vectors inline: a chunk of `vector_chunks` packs 16 rows of 256 bytes, where a
        // memcpy call per row costs more than the copy (V from malloc is 16-byte aligned;
        // bench/results/tuning.md#inline-row-copy)
        for (index_t c = 0; c < dv; c += W) B::load_unaligned(src + c).store_aligned(dst + c);
        continue;
      }
      if (weights == nullptr) {
        if (dv > 0) std::memcpy(dst, src, static_cast<std::size_t>(dv) * sizeof(T));  // (src may be null then)
      } else {
        const T w = weights[j - a];
        for (index_t c = 0; c < dv; ++c) dst[c] = w * src[c];
      }
      std::fill(dst + dv, dst + dvp, T(0));
    }
  }

  /// V rows [a, b) with row stride dvp, as the micro-kernels read them (aligned loads): V itself
  /// when it already has that layout and no weights apply, else packed into vblock. In place only
  /// when d_v is whole vectors: the kernels read dvp columns, and past the last row's d_v lies
  /// memory that the view does not cover.
  const T* v_rows(index_t a, index_t b, const T* weights) {
    constexpr std::size_t align = sizeof(xsimd::batch<T, A>);
    if (weights == nullptr && dv == dvp && p.v.row_stride == dvp &&
        reinterpret_cast<std::uintptr_t>(p.v.data) % align == 0)
      return p.v.row(a);
    pack_v(a, b, weights);
    return vblock;
  }

  /// kt[c·BK + j] = k̃_{j0+j}[c] (keys as the SIMD dimension), zero for j ≥ bk: W×W
  /// in-register transposes where the arch has them (AVX-512 float, AVX/AVX2), else a scalar
  /// transpose.
  void pack_keys(index_t j0, index_t bk, T* kt) const {
    using B = xsimd::batch<T, A>;
    constexpr index_t W = static_cast<index_t>(B::size), BK = softmax_tiling<T, A>::BK;
    index_t j = 0;
    if constexpr (compat::has_fast_transpose<T, A>) {
      if (f % W == 0) {
        for (; j + W <= bk; j += W) {
          for (index_t c0 = 0; c0 < f; c0 += W) {
            B t[W];
            for (index_t r = 0; r < W; ++r) t[r] = B::load_unaligned(p.kf.row(j0 + j + r) + c0);
            compat::transpose_square(t);
            for (index_t r = 0; r < W; ++r) t[r].store_aligned(kt + (c0 + r) * BK + j);
          }
        }
      }
    }
    for (; j < bk; ++j) {
      const T* k = p.kf.row(j0 + j);
      for (index_t c = 0; c < f; ++c) kt[c * BK + j] = k[c];
    }
    for (index_t c = 0; c < f; ++c)
      for (index_t jj = bk; jj < BK; ++jj) kt[c * BK + jj] = T(0);
  }

  /// S += Σ_j w_j k̃_j v_jᵀ, z += Σ_j w_j k̃_j over keys [a, b) (w_j = λ^{p_new − t_j} when decaying).
  void accumulate_keys(index_t a, index_t b, position_t p_new) {
    T w[key_block];
    for (index_t a0 = a; a0 < b; a0 += key_block) {
      const index_t a1 = std::min(b, a0 + key_block);
      const bool decays = lambda != 1.0;
      if (decays)
        for (index_t j = a0; j < a1; ++j) w[j - a0] = static_cast<T>(decay_pow(lambda, p_new - p.k_positions[j]));
      const T* vb = v_rows(a0, a1, decays ? w : nullptr);
      gemm_rows<T, A>(f, p.kf.row(a0), 1, p.kf.row_stride, vb, dvp, a1 - a0, S);
      for (index_t j = a0; j < a1; ++j) {
        const T* k = p.kf.row(j);
        const T wj = decays ? w[j - a0] : T(1);
        for (index_t c = 0; c < f; ++c) z[c] += wj * k[c];
      }
    }
  }

  /// Folds keys [a, b) into the state (rescaling it to their last position first).
  void fold(index_t a, index_t b) {
    if (b <= a) return;
    const position_t p_new = p.k_positions[b - 1];
    if (count > 0 && p_new != last && lambda != 1.0) {
      const T s = rescale_factor(p_new - last);
      for (index_t i = 0; i < f * dvp; ++i) S[i] *= s;
      for (index_t c = 0; c < f; ++c) z[c] *= s;
    }
    accumulate_keys(a, b, p_new);
    last = p_new;
    count += b - a;
  }

  /// The output rows take non-temporal stores: a large output (`linear_stream_bytes`) of
  /// whole, aligned vectors on an arch that has such stores. Callers end with `stream_fence()`.
  [[nodiscard]] bool streams_output() const noexcept {
    using B = xsimd::batch<T, A>;
    constexpr index_t W = B::size;
    if constexpr (!compat::has_stream_store<A>) {
      return false;
    } else {
      const double bytes = static_cast<double>(p.out.rows) * static_cast<double>(dv) * sizeof(T);
      return dv % W == 0 && p.out.row_stride % W == 0 && reinterpret_cast<std::uintptr_t>(p.out.data) % sizeof(B) == 0 &&
             bytes >= static_cast<double>(linear_stream_bytes);
    }
  }

  /// out rows [i0, i0 + bq) from the accumulator (num) and den; `stream`: by non-temporal
  /// stores (`streams_output()` must hold).
  void write(index_t i0, index_t bq, const T* acc, const T* den, bool stream = false) const {
    const bool normalise = p.norm == normalisation::denominator;
    if (stream) {
      using B = xsimd::batch<T, A>;
      constexpr index_t W = B::size;
      for (index_t i = 0; i < bq; ++i) {
        T* o = p.out.row(i0 + i);
        const B inv(normalise ? T(1) / std::max(den[i], static_cast<T>(p.eps)) : T(1));
        for (index_t c = 0; c < dv; c += W) compat::store_stream(B::load_aligned(acc + i * dvp + c) * inv, o + c);
      }
      return;
    }
    for (index_t i = 0; i < bq; ++i) {
      T* o = p.out.row(i0 + i);
      const T inv = normalise ? T(1) / std::max(den[i], static_cast<T>(p.eps)) : T(1);
      for (index_t c = 0; c < dv; ++c) o[c] = acc[i * dvp + c] * inv;
    }
  }

  void non_causal() {
    std::fill(S, S + f * dvp, T(0));
    std::fill(z, z + f, T(0));
    accumulate_keys(0, p.kf.rows, 0);
    constexpr index_t QB = 64;
    T* acc = ws.get<T>(simd_workspace::o_tile, QB * dvp);
    T* den = ws.get<T>(simd_workspace::row_stats, QB);
    const index_t nq = p.qf.rows;
    const bool stream = streams_output(), normalise = p.norm == normalisation::denominator;
    for (index_t i0 = 0; i0 < nq; i0 += QB) {
      const index_t bq = std::min(QB, nq - i0);
      std::fill(acc, acc + bq * dvp, T(0));
      gemm_rows<T, A>(bq, p.qf.row(i0), p.qf.row_stride, 1, S, dvp, f, acc);
      if (normalise) {  // without it the denominators are not read: ~4 % of the pass at d = 64
        for (index_t i = 0; i < bq; ++i) den[i] = row_dot<T, A>(p.qf.row(i0 + i), z, f);
      }
      write(i0, bq, acc, den, stream);
    }
    if (stream) compat::stream_fence();
  }

  void causal() {
    using tl = softmax_tiling<T, A>;
    constexpr index_t BK = tl::BK, R = tl::R;
    const index_t nq = p.qf.rows, nk = p.kf.rows;
    index_t folded = 0, start = 0;
    if (self_offsets()) {
      if (vector_chunks_apply()) {
        stored_rows<T> stored{p};
        start = folded = vector_chunks(rows_source<T>::of(stored));
      }
      if (nq - start < step_rows_max) {  // the tail of the chunks, or a short segment
        step_rows(start, nq);
        return;
      }
    }
    // chunk is a tuning value ≥ 1 of any size: beyond the rows left it changes nothing, and the
    // scratch below is sized by it (a chunk near 2^63 overflowed the sizes).
    const index_t bc = std::clamp<index_t>(p.chunk, 1, std::max<index_t>(1, nq - start));
    const index_t bcp = round_up(bc, R);
    const bool normalise = p.norm == normalisation::denominator;
    T* acc = ws.get<T>(simd_workspace::o_tile, bcp * dvp);
    T* den = ws.get<T>(simd_workspace::row_stats, 2 * bcp + 4 * (bc + BK) + 8);
    T* qt = ws.get<T>(simd_workspace::q_tile, bcp * f);
    T* kt = ws.get<T>(simd_workspace::k_packed, f * BK);
    T* at = ws.get<T>(simd_workspace::s_tile, bcp * BK);
    const auto& qp = p.q_positions;
    const auto& kp = p.k_positions;
    // λ^Δ for Δ ∈ [0, table_size): at most 4(bc + BK) entries, and no more than the call's
    // positions span (positions are non-decreasing here), so that a short segment (one decode
    // token) does not pay for 512 pow calls.
    T* pow_table = den + 2 * bcp;
    index_t table_size = 4 * (bc + BK);
    if (nq > 0 && nk > 0) {
      // in unsigned arithmetic: positions may span more than int64 holds
      const std::uint64_t span = static_cast<std::uint64_t>(std::max(qp[nq - 1], kp[nk - 1])) -
                                 static_cast<std::uint64_t>(std::min(qp[0], kp[0]));
      if (span < static_cast<std::uint64_t>(table_size)) table_size = static_cast<index_t>(span) + 1;
    }
    if (lambda != 1.0)
      for (index_t e = 0; e < table_size; ++e) pow_table[e] = static_cast<T>(decay_pow(lambda, e));
    for (index_t i0 = start; i0 < nq; i0 += bc) {
      const index_t i1 = std::min(nq, i0 + bc), bq = i1 - i0, bqp = round_up(bq, R);
      const position_t lo = qp[i0], hi = qp[i1 - 1];
      // Keys before the chunk's first query go into the state; the rest of the visible keys
      // (positions in [lo, hi]) are the intra-chunk part. With positions as offsets and
      // keys aligned to queries, that part is exactly the chunk's own rows: whole tiles.
      index_t kq = folded;
      while (kq < nk && kp[kq] < lo) ++kq;
      fold(folded, kq);
      folded = kq;

      std::fill(acc, acc + bq * dvp, T(0));
      std::fill(den, den + bq, T(0));
      if (count > 0) {
        gemm_rows<T, A>(bq, p.qf.row(i0), p.qf.row_stride, 1, S, dvp, f, acc);
        for (index_t i = 0; i < bq; ++i) {
          const T w = static_cast<T>(decay_pow(lambda, qp[i0 + i] - last));
          if (normalise) den[i] = w * row_dot<T, A>(p.qf.row(i0 + i), z, f);
          if (w != T(1))
            for (index_t c = 0; c < dvp; ++c) acc[i * dvp + c] *= w;
        }
      }

      index_t ke = folded;
      while (ke < nk && kp[ke] <= hi) ++ke;
      if (ke > folded) intra_chunk(i0, bq, bqp, folded, ke, acc, den, qt, kt, at, pow_table, table_size);
      write(i0, bq, acc, den);
    }
    fold(folded, nk);
  }

  /// Self-attention with keys at the queries' positions, given as offsets (so strictly
  /// increasing): row i's key is the one key that row i sees and row i − 1 does not.
  [[nodiscard]] bool self_offsets() const noexcept {
    const auto& qp = p.q_positions;
    const auto& kp = p.k_positions;
    return !qp.is_array() && !kp.is_array() && qp.offset() == kp.offset() && p.qf.rows == p.kf.rows;
  }

  /// `self_offsets` with f and d_v multiples of the vector width: the case `vector_chunks` covers.
  [[nodiscard]] bool vector_chunks_apply() const noexcept {
    constexpr index_t W = xsimd::batch<T, A>::size;
    return self_offsets() && f % W == 0 && dv % W == 0;
  }

  /// Rows below which `step_rows` takes a `self_offsets` call (or the rest after the one-vector
  /// chunks): one vector of float on AVX-512.
  static constexpr index_t step_rows_max = xsimd::batch<T, A>::size;

  /**
   * Rows [a, b) of a `self_offsets` call by the state recurrence, one row at a time: with t the
   * row's position, S ← λ^{t−last}·S + k̃_t v_tᵀ, z likewise, then o_t = q̃_t·S (÷ max(q̃_t·z, ε)),
   * in one pass over S per block of 4 column vectors. What a decode step (one row per call)
   * needs: 4·d_f·d_v flops a row, no tiles, no λ^Δ table; per row it costs what a chunk row
   * costs in flops but stores all of S, so the chunks take longer runs. S may be the state's
   * own storage (`linear_simd`), hence unaligned accesses to it.
   */
  void step_rows(index_t a, index_t b) {
    using B = xsimd::batch<T, A>;
    constexpr index_t W = B::size, G = 4;
    const bool normalise = p.norm == normalisation::denominator, decays = lambda != 1.0;
    T* vrow = ws.get<T>(simd_workspace::o_tile, 2 * dvp);  // v_t padded to dvp, then o_t
    T* orow = vrow + dvp;
    for (index_t i = a; i < b; ++i) {
      const position_t t = p.k_positions[i];
      const T scale = count > 0 && decays ? rescale_factor(t - last) : T(1);
      const T* k = p.kf.row(i);
      const T* q = p.qf.row(i);
      std::copy(p.v.row(i), p.v.row(i) + dv, vrow);
      std::fill(vrow + dv, vrow + dvp, T(0));
      const B sb(scale);
      for (index_t c0 = 0; c0 < dvp; c0 += G * W) {
        const index_t g = std::min(G, (dvp - c0) / W);
        B vb[G], acc[G];
        LRPE_UNROLL
        for (index_t u = 0; u < G; ++u) {
          vb[u] = u < g ? B::load_aligned(vrow + c0 + u * W) : B(T(0));
          acc[u] = B(T(0));
        }
        for (index_t c = 0; c < f; ++c) {
          T* sr = S + c * dvp + c0;
          const B kc(k[c]), qc(q[c]);
          LRPE_UNROLL
          for (index_t u = 0; u < G; ++u) {
            if (u < g) {
              const B sv = compat::fma(kc, vb[u], B::load_unaligned(sr + u * W) * sb);
              sv.store_unaligned(sr + u * W);
              acc[u] = compat::fma(qc, sv, acc[u]);
            }
          }
        }
        LRPE_UNROLL
        for (index_t u = 0; u < G; ++u)
          if (u < g) acc[u].store_aligned(orow + c0 + u * W);
      }
      T den = 0;
      for (index_t c = 0; c < f; ++c) {
        z[c] = lrpe::detail::mul_add(scale, z[c], k[c]);
        den = lrpe::detail::mul_add(q[c], z[c], den);
      }
      const T inv = normalise ? T(1) / std::max(den, static_cast<T>(p.eps)) : T(1);
      T* o = p.out.row(i);
      for (index_t j = 0; j < dv; ++j) o[j] = orow[j] * inv;
      last = t;
      ++count;
    }
  }

  /// Prefetches into L2 the Q, K and V rows [r0, r0 + m) and, for writing, the output rows,
  /// one row per `step()`, so that the misses spread over a chunk's arithmetic: issued all at
  /// once, they stall on the L1 miss buffers. `finish()` issues what is left.
  struct row_prefetcher {
    static constexpr int streams = 4;  ///< Q, K, V, then out
    const T* base[3]{};
    T* out = nullptr;
    index_t stride[streams]{}, len[streams]{};
    index_t m = 0, next = 0, total = 0;
    index_t stream = 0, row = 0;  ///< the next prefetch: row `row` of stream `stream` (next = stream·m + row)

    row_prefetcher() = default;
    /// `out_too`: the output rows as well (not when they take non-temporal stores).
    row_prefetcher(const linear_problem<T>& p, index_t r0, index_t rows, bool out_too = true) noexcept
        : base{p.qf.row(r0), p.kf.row(r0), p.v.row(r0)},
          out(p.out.row(r0)),
          stride{p.qf.row_stride, p.kf.row_stride, p.v.row_stride, p.out.row_stride},
          len{p.qf.cols, p.kf.cols, p.v.cols, p.out.cols},
          m(rows),
          total((out_too ? streams : streams - 1) * rows) {}

    LRPE_ALWAYS_INLINE void step() noexcept {
      if (next < total) {
        if (stream < 3) prefetch_row<2>(base[stream] + row * stride[stream], len[stream]);
        else prefetch_row_for_write(out + row * stride[3], len[3]);
        ++next;
        if (++row == m) {
          row = 0;
          ++stream;
        }
      }
    }
    void finish() noexcept {
      while (next < total) step();
    }
  };

  /// Chunks ahead whose Q, K, V and output rows `vector_chunks` prefetches into L2, one row per
  /// 4 steps of the Q̃·S loop. Past L3 the hardware prefetchers alone left each chunk waiting on
  /// its first reads: a chunk's rows of one stream are one 4 KiB page at d = 64, where the
  /// hardware streamers stop. The output rows are prefetched for writing, so that the stores do
  /// not wait on reads for ownership (bench/results/tuning.md#linear-prefetch-chunks).
  static constexpr index_t prefetch_chunks = 4;

  /**
   * Causal self-attention by chunks of W = one vector of rows (`vector_chunks_apply`).
   *
   * Without decay (λ = 1) a chunk runs the state recurrence itself, `recurrent_block::rows`
   * rows per pass over S (`chunk_recurrent`): o_t = q̃_t·(S + Σ_{j≤t} k̃_j v_jᵀ) formed by
   * adding each row's k̃ v ᵀ to S just before its q̃·S, so the intra-chunk part costs nothing
   * beyond the state's 2·f·d_v FMAs a row, and each S vector loaded and stored feeds 2·rows
   * FMAs (8 on AVX-512). Faster than the A-form chunks below, and 4 rows by 2 vectors faster
   * than 8 by 1 or 2 by 4 on AVX-512 (bench/results/tuning.md#linear-chunk-recurrent).
   *
   * With a decay the keys' weights λ^{t−j} differ per row, and the chunks take the A form: the
   * chunk's keys are one vector, so the intra-chunk part costs W/(2f) of the state part
   * instead of C/(2f), and with no row-group remainder. Per chunk, rows s = i0 + t:
   *
   *     Q̃ᵀ   = one W×W transpose per W features (the chunk's rows as lanes)
   *     Aᵀ_j = (Σ_c k̃_j[c] Q̃ᵀ[c]) ⊙ D_j,   D_j[t] = λ^{t−j} for t ≥ j, else 0
   *     o_t  = λ^{s−last}·q̃_t·S + Σ_{j≤t} A[t][j]·v_j     (4 rows × 4 column vectors at once)
   *     S    = λ^{Δ}·S + Σ_j k̃_j (λ^{W−1−j} v_j)ᵀ,  z likewise (the chunk's keys fold in last)
   *
   * A is formed with the keys as rows (broadcasts from K̃'s own rows) and the fold broadcasts
   * K̃ as well, so that K̃ is never transposed. The products run in `chunk_block` register
   * blocks: a transpose and most operand loads fewer (one row by one column vector loaded 17
   * operands per 16 FMAs; bench/results/tuning.md#linear-chunk-block).
   *
   * `options.chunk` does not apply here: C = W measured faster than C = 16–64 on the general
   * path (bench/results/tuning.md#linear-chunk-width). Returns the rows done (whole chunks);
   * the caller finishes the rest on the general path.
   *
   * `rows(i0, W)` gives the chunk's feature rows (`feature_rows`): the stored features
   * (`stored_rows`), or features computed chunk by chunk from the raw q and k in `p.qf` and
   * `p.kf` (`fused_features`), which the prefetches then fetch ahead.
   */
  index_t vector_chunks(const rows_source<T>& rows) {
    constexpr index_t W = xsimd::batch<T, A>::size;
    const index_t n = p.qf.rows, full = n / W * W;
    if (full == 0) return 0;
    const bool decays = lambda != 1.0, normalise = p.norm == normalisation::denominator;
    const chunk_tables tb = make_chunk_tables();
    T* at = ws.get<T>(simd_workspace::s_tile, W * W);
    T* qt = ws.get<T>(simd_workspace::q_tile, f * W);
    const bool stream = streams_output();  // the output rows by non-temporal stores (large outputs)

    for (index_t i0 = 0; i0 < full; i0 += W) {
      const auto [q, qs, k, ks] = rows(i0, W);
      row_prefetcher pf{};
      if (const index_t ahead = i0 + prefetch_chunks * W; ahead + W <= full) pf = row_prefetcher(p, ahead, W, !stream);
      if (decays) {
        decayed_chunk(i0, q, qs, k, ks, tb, qt, at, normalise, stream, pf);
      } else {
        const T* vb = v_rows(i0, i0 + W, nullptr);
        if (stream) chunk_recurrent<true>(q, qs, k, ks, vb, normalise, p.out.row(i0), p.out.row_stride, pf);
        else chunk_recurrent<false>(q, qs, k, ks, vb, normalise, p.out.row(i0), p.out.row_stride, pf);
        pf.finish();
        last = p.q_positions[i0 + W - 1];
        count += W;
      }
    }
    if (stream) compat::stream_fence();
    return full;
  }

  /// The tables of `vector_chunks`' A form, in the workspace's chunk slot.
  struct chunk_tables {
    T* dmask;  ///< D (W×W), row j: D_j[t] = λ^{t−j} for t ≥ j, else 0
    T* pw;     ///< λ^e for e < 2W
    T* wfold;  ///< the fold's key weights λ^{W−1−j}
    T* wq;     ///< the state's row weights λ^{s−last} of the chunk in hand
    T* den;    ///< the chunk's denominators
    T* inv;    ///< 1 / max(den, ε)
  };

  chunk_tables make_chunk_tables() {
    constexpr index_t W = xsimd::batch<T, A>::size;
    chunk_tables tb{};
    tb.dmask = ws.get<T>(simd_workspace::chunk, W * W + 6 * W);
    tb.pw = tb.dmask + W * W;
    tb.wfold = tb.pw + 2 * W;
    tb.wq = tb.wfold + W;
    tb.den = tb.wq + W;
    tb.inv = tb.den + W;
    for (index_t e = 0; e < 2 * W; ++e) tb.pw[e] = static_cast<T>(decay_pow(lambda, e));
    for (index_t j = 0; j < W; ++j)
      for (index_t t = 0; t < W; ++t) tb.dmask[j * W + t] = j <= t ? tb.pw[t - j] : T(0);
    for (index_t j = 0; j < W; ++j) tb.wfold[j] = tb.pw[W - 1 - j];
    return tb;
  }

  /// One chunk [i0, i0 + W) in the A form (λ < 1): Q̃ᵀ, Aᵀ and the denominators, the outputs,
  /// then the fold of the chunk's keys into S and z.
  LRPE_ALWAYS_INLINE void decayed_chunk(index_t i0, const T* q, index_t qs, const T* k, index_t ks,
                                        const chunk_tables& tb, T* qt, T* at, bool normalise, bool stream,
                                        row_prefetcher& pf) {
    constexpr index_t W = xsimd::batch<T, A>::size;
    const auto& qp = p.q_positions;
    const bool has_state = count > 0;
    if (has_state) {
      const position_t delta0 = qp[i0] - last;  // ≥ 0; 1 after a chunk of this loop
      for (index_t t = 0; t < W; ++t)
        tb.wq[t] = delta0 + t < 2 * W ? tb.pw[delta0 + t] : static_cast<T>(decay_pow(lambda, delta0 + t));
    }
    // Q̃ᵀ: qt[c·W + t] = q̃_{i0+t}[c] (the chunk's rows as lanes). K̃ stays as it is: A's and
    // the fold's broadcasts read its rows, so that one W×W transpose per W features is all the
    // chunk shuffles (a second one, for K̃ᵀ, took ~3 % of the kernel on port 5).
    transpose_rows(q, qs, qt);
    chunk_attention(qt, k, ks, tb, at, normalise);
    if (normalise) chunk_inverse_denominators(qt, tb, has_state);
    const T* vb = v_rows(i0, i0 + W, nullptr);
    const index_t os = p.out.row_stride;
    if (stream) chunk_out<true>(qt, vb, at, has_state, tb.wq, normalise ? tb.inv : nullptr, p.out.row(i0), os, pf);
    else chunk_out<false>(qt, vb, at, has_state, tb.wq, normalise ? tb.inv : nullptr, p.out.row(i0), os, pf);
    const position_t p_new = qp[i0 + W - 1];
    fold_decayed_chunk(k, ks, vb, tb, has_state ? rescale_factor(p_new - last) : T(1), pf);
    last = p_new;
    count += W;
  }

  /// Aᵀ: at[j·W + t] = (q̃_t · k̃_j) ⊙ D_t[j], keys j as rows and the chunk's rows t as lanes;
  /// with `normalise`, den[t] = Σ_j A[t][j]. 4 keys at a time (4 row pointers: 8 spilled), the
  /// features in even and odd halves: 8 FMA chains cover the latency (f is a multiple of W, so
  /// even).
  LRPE_ALWAYS_INLINE void chunk_attention(const T* qt, const T* k, index_t ks, const chunk_tables& tb, T* at,
                                          bool normalise) const {
    using B = xsimd::batch<T, A>;
    constexpr index_t W = B::size;
    constexpr index_t JB = W < 4 ? W : 4;
    alignas(64) T lane_index[W];
    for (index_t j = 0; j < W; ++j) lane_index[j] = static_cast<T>(j);
    const B lane = B::load_aligned(lane_index);
    B den_t(T(0));
    for (index_t j0 = 0; j0 < W; j0 += JB) {
      B a[JB], a_odd[JB];
      LRPE_UNROLL
      for (index_t u = 0; u < JB; ++u) a[u] = a_odd[u] = B(T(0));
      const T* kr = k + j0 * ks;
      for (index_t c = 0; c < f; c += 2) {
        const B qc = B::load_aligned(qt + c * W), qc_odd = B::load_aligned(qt + (c + 1) * W);
        LRPE_UNROLL
        for (index_t u = 0; u < JB; ++u) {
          a[u] = compat::fma(B(kr[u * ks + c]), qc, a[u]);
          a_odd[u] = compat::fma(B(kr[u * ks + c + 1]), qc_odd, a_odd[u]);
        }
      }
      LRPE_UNROLL
      for (index_t u = 0; u < JB; ++u) a[u] += a_odd[u];
      LRPE_UNROLL
      for (index_t u = 0; u < JB; ++u) {
        const index_t j = j0 + u;
        // rows before key j cleared by a select, not only by D's zeros: 0·NaN would carry
        // a NaN key back to the rows before it
        a[u] = xsimd::select(lane >= B(static_cast<T>(j)), a[u] * B::load_aligned(tb.dmask + j * W), B(T(0)));
        a[u].store_aligned(at + j * W);
        if (normalise) den_t += a[u];
      }
    }
    if (normalise) den_t.store_aligned(tb.den);
  }

  /// den_t += λ^{s−last}·q̃_t·z with the rows as lanes, then inv = 1 / max(den, ε).
  LRPE_ALWAYS_INLINE void chunk_inverse_denominators(const T* qt, const chunk_tables& tb, bool has_state) const {
    using B = xsimd::batch<T, A>;
    constexpr index_t W = B::size;
    B dn = B::load_aligned(tb.den);
    if (has_state) {
      B dz(T(0));
      for (index_t c = 0; c < f; ++c) dz = compat::fma(B(z[c]), B::load_aligned(qt + c * W), dz);
      dn = compat::fma(B::load_aligned(tb.wq), dz, dn);
    }
    const B eps(static_cast<T>(p.eps));
    (B(T(1)) / xsimd::select(dn < eps, eps, dn)).store_aligned(tb.inv);  // a NaN den stays NaN
  }

  /// S = λ^{Δ}·S + Σ_j k̃_j (λ^{W−1−j} v_j)ᵀ, the weighted V rows behind the chunk's in vblock
  /// (which holds linear_key_block ≥ 2W rows); then z likewise.
  LRPE_ALWAYS_INLINE void fold_decayed_chunk(const T* k, index_t ks, const T* vb, const chunk_tables& tb, T rescale,
                                             row_prefetcher& pf) {
    using B = xsimd::batch<T, A>;
    constexpr index_t W = B::size;
    static_assert(linear_key_block >= 2 * W, "vblock holds a chunk's V rows and their weighted copy");
    T* vw = vblock + W * dvp;
    for (index_t j = 0; j < W; ++j) {
      const B w(tb.wfold[j]);
      for (index_t c = 0; c < dvp; c += W) (B::load_aligned(vb + j * dvp + c) * w).store_aligned(vw + j * dvp + c);
    }
    chunk_fold(k, ks, vw, rescale);
    pf.finish();
    for (index_t c = 0; c < f; c += W) {
      B zc = B::load_aligned(z + c) * B(rescale);
      for (index_t j = 0; j < W; ++j) zc = compat::fma(B(tb.wfold[j]), B::load_unaligned(k + j * ks + c), zc);
      zc.store_aligned(z + c);
    }
  }

  /// Register blocks of `chunk_recurrent`: rows that share one pass over S, and the column
  /// vectors of S a pass carries (each step: `cols` loads and stores of S, 2·rows broadcasts,
  /// 2·rows·cols FMAs; rows·cols accumulators and as many V vectors in registers).
  struct recurrent_block {
    static constexpr index_t W = xsimd::batch<T, A>::size;
    static constexpr index_t rows = wide_register_file<A> ? 4 : 2;
    static constexpr index_t cols = 2;
    static_assert(W % rows == 0, "a chunk of W rows is whole blocks");
  };

  /**
   * One chunk of W rows without decay by the state recurrence, `recurrent_block::rows` rows per
   * pass over S: per feature row c of S and row r of the block, S[c] += k̃_r[c]·v_r, then
   * o_r += q̃_r[c]·S[c], so that o_r = q̃_r·(S + Σ_{j≤r} k̃_j v_jᵀ), as causality asks, in
   * 2·f·d_v FMAs a row and no intra-chunk product. z and the denominators go row by row.
   */
  template <bool Stream>
  void chunk_recurrent(const T* q, index_t qs, const T* k, index_t ks, const T* vb, bool normalise, T* out,
                       index_t os, row_prefetcher& pf) {
    using B = xsimd::batch<T, A>;
    constexpr index_t W = B::size, RB = recurrent_block::rows, NB = recurrent_block::cols;
    alignas(64) T inv[RB];
    for (index_t t0 = 0; t0 < W; t0 += RB) {
      for (index_t r = 0; r < RB; ++r) {  // z += k̃_r, then 1 / max(q̃_r·z, ε)
        const T* kr = k + (t0 + r) * ks;
        const T* qr = q + (t0 + r) * qs;
        B dn(T(0));
        for (index_t c = 0; c < f; c += W) {
          const B zc = B::load_aligned(z + c) + B::load_unaligned(kr + c);
          zc.store_aligned(z + c);
          if (normalise) dn = compat::fma(B::load_unaligned(qr + c), zc, dn);
        }
        if (normalise) {
          const T den = compat::reduce_add(dn), eps = static_cast<T>(p.eps);
          inv[r] = T(1) / (den < eps ? eps : den);  // a NaN den stays NaN
        } else {
          inv[r] = T(1);
        }
      }
      index_t b = 0;
      for (; b + NB * W <= dv; b += NB * W)
        recurrent_pass<Stream, NB>(b, q + t0 * qs, qs, k + t0 * ks, ks, vb + t0 * dvp, inv, out + t0 * os, os, pf);
      for (; b < dv; b += W)
        recurrent_pass<Stream, 1>(b, q + t0 * qs, qs, k + t0 * ks, ks, vb + t0 * dvp, inv, out + t0 * os, os, pf);
    }
  }

  /// `chunk_recurrent`'s pass over S for one block of rows and the NB column vectors from b.
  template <bool Stream, index_t NB>
  LRPE_ALWAYS_INLINE void recurrent_pass(index_t b, const T* q, index_t qs, const T* k, index_t ks, const T* vb,
                                         const T* inv, T* out, index_t os, row_prefetcher& pf) {
    using B = xsimd::batch<T, A>;
    constexpr index_t W = B::size, RB = recurrent_block::rows;
    T* const sb = S + b;  // locals: see chunk_out_block
    const index_t dvp_ = dvp, f_ = f;
    B vr[RB][NB], acc[RB][NB];
    LRPE_UNROLL
    for (index_t r = 0; r < RB; ++r) {
      LRPE_UNROLL
      for (index_t u = 0; u < NB; ++u) {
        vr[r][u] = B::load_aligned(vb + r * dvp_ + b + u * W);
        acc[r][u] = B(T(0));
      }
    }
    for (index_t c = 0; c < f_; ++c) {
      if ((c & 7) == 0) pf.step();
      B sc[NB];
      LRPE_UNROLL
      for (index_t u = 0; u < NB; ++u) sc[u] = B::load_aligned(sb + c * dvp_ + u * W);
      LRPE_UNROLL
      for (index_t r = 0; r < RB; ++r) {
        const B kc(k[r * ks + c]), qc(q[r * qs + c]);
        LRPE_UNROLL
        for (index_t u = 0; u < NB; ++u) {
          sc[u] = compat::fma(kc, vr[r][u], sc[u]);
          acc[r][u] = compat::fma(qc, sc[u], acc[r][u]);
        }
      }
      LRPE_UNROLL
      for (index_t u = 0; u < NB; ++u) sc[u].store_aligned(sb + c * dvp_ + u * W);
    }
    LRPE_UNROLL
    for (index_t r = 0; r < RB; ++r) {
      T* o = out + r * os + b;
      LRPE_UNROLL
      for (index_t u = 0; u < NB; ++u) {
        const B x = acc[r][u] * B(inv[r]);
        if constexpr (Stream) compat::store_stream(x, o + u * W);
        else x.store_unaligned(o + u * W);
      }
    }
  }

  /// xt[c·W + j] = x_j[c] for the W rows x_j = x + j·xs (f columns): W×W transposes.
  void transpose_rows(const T* x, index_t xs, T* xt) const noexcept {
    using B = xsimd::batch<T, A>;
    constexpr index_t W = B::size;
    for (index_t c0 = 0; c0 < f; c0 += W) {
      B r[W];
      LRPE_UNROLL
      for (index_t j = 0; j < W; ++j) r[j] = B::load_unaligned(x + j * xs + c0);
      compat::transpose_square(r);
      LRPE_UNROLL
      for (index_t j = 0; j < W; ++j) r[j].store_aligned(xt + (c0 + j) * W);
    }
  }

  /// Register blocks of the one-vector chunk's products (`chunk_out`, `chunk_fold`): `rows`
  /// rows of a W×W (or f×W) operand by `cols` column vectors of V or S, so that each step of
  /// the inner dimension loads `cols` vectors and broadcasts `rows` scalars for rows·cols FMAs.
  /// One row by one column vector (what these loops did before) loads 17 operands per 16 FMAs,
  /// more than the two load ports of current x86 cores issue beside two FMAs a cycle.
  /// 4 × 4 on AVX-512 (16 accumulators of 32 registers), 4 × 2 with 16 registers.
  struct chunk_block {
    static constexpr index_t W = xsimd::batch<T, A>::size;
    static constexpr index_t rows = W < 4 ? W : 4;
    static constexpr index_t cols = W >= 16 ? 4 : 2;
  };

  /// out rows [0, W) = (λ^{s−last}·Q̃·S + A·V) [· 1/den]: blocks of `chunk_block::rows` rows
  /// by `cols` column vectors (fewer at the right edge when d_v/W is not a multiple); A is lower
  /// triangular, so row t takes only keys j ≤ t.
  template <bool Stream>
  void chunk_out(const T* qt, const T* vb, const T* at, bool has_state, const T* wq, const T* inv, T* out,
                 index_t os, row_prefetcher& pf) const {
    using B = xsimd::batch<T, A>;
    constexpr index_t W = B::size, NB = chunk_block::cols;
    index_t b = 0;
    for (; b + NB * W <= dv; b += NB * W) chunk_out_block<Stream, NB>(b, qt, vb, at, has_state, wq, inv, out, os, pf);
    for (; b < dv; b += W) chunk_out_block<Stream, 1>(b, qt, vb, at, has_state, wq, inv, out, os, pf);
  }

  /// `chunk_out` for the NB column vectors from column b.
  template <bool Stream, index_t NB>
  LRPE_ALWAYS_INLINE void chunk_out_block(index_t b, const T* qt, const T* vb, const T* at, bool has_state,
                                          const T* wq, const T* inv, T* out, index_t os, row_prefetcher& pf) const {
    using B = xsimd::batch<T, A>;
    constexpr index_t W = B::size, RB = chunk_block::rows;
    // Members into locals: the vector stores may alias anything (the intrinsics' types are
    // may_alias), which otherwise reloads S and dvp from `this` after every store.
    const T* const sb = S + b;
    const T* const vbb = vb + b;
    const index_t dvp_ = dvp, f_ = f;
    for (index_t t0 = 0; t0 < W; t0 += RB) {
      B acc[RB][NB];
      LRPE_UNROLL
      for (index_t r = 0; r < RB; ++r) {
        LRPE_UNROLL
        for (index_t k = 0; k < NB; ++k) acc[r][k] = B(T(0));
      }
      const auto state_row = [&](index_t c) LRPE_ALWAYS_INLINE_LAMBDA {
        B sc[NB];
        LRPE_UNROLL
        for (index_t k = 0; k < NB; ++k) sc[k] = B::load_aligned(sb + c * dvp_ + k * W);
        const T* qc = qt + c * W + t0;
        LRPE_UNROLL
        for (index_t r = 0; r < RB; ++r) {
          const B qr(qc[r]);
          LRPE_UNROLL
          for (index_t k = 0; k < NB; ++k) acc[r][k] = compat::fma(qr, sc[k], acc[r][k]);
        }
      };
      if (has_state) {
        index_t c = 0;
        // 4 state rows per prefetch row; the loop below takes the rest (f mod 4 is 0 for
        // W ≥ 4, but not for W = 2: SSE2 or NEON double)
        for (; c + 4 <= f_; c += 4) {
          pf.step();
          LRPE_UNROLL
          for (index_t u = 0; u < 4; ++u) state_row(c + u);
        }
        for (; c < f_; ++c) state_row(c);
        if (wq != nullptr) {
          LRPE_UNROLL
          for (index_t r = 0; r < RB; ++r) {
            const B w(wq[t0 + r]);
            LRPE_UNROLL
            for (index_t k = 0; k < NB; ++k) acc[r][k] *= w;
          }
        }
      }
      // keys before the block: every row of it sees them; then the block's diagonal triangle
      // (rows from the key's own): skipping, not multiplying by A's zeros, keeps an Inf or NaN
      // in a later value row out of earlier rows
      const auto key = [&](index_t j, index_t r_begin) LRPE_ALWAYS_INLINE_LAMBDA {
        B vj[NB];
        LRPE_UNROLL
        for (index_t k = 0; k < NB; ++k) vj[k] = B::load_aligned(vbb + j * dvp_ + k * W);
        LRPE_UNROLL
        for (index_t r = 0; r < RB; ++r) {
          if (r < r_begin) continue;
          const B a(at[j * W + t0 + r]);
          LRPE_UNROLL
          for (index_t k = 0; k < NB; ++k) acc[r][k] = compat::fma(a, vj[k], acc[r][k]);
        }
      };
      for (index_t j = 0; j < t0; ++j) key(j, 0);
      LRPE_UNROLL
      for (index_t u = 0; u < RB; ++u) key(t0 + u, u);
      LRPE_UNROLL
      for (index_t r = 0; r < RB; ++r) {
        T* o = out + (t0 + r) * os + b;
        LRPE_UNROLL
        for (index_t k = 0; k < NB; ++k) {
          B x = acc[r][k];
          if (inv != nullptr) x *= B(inv[t0 + r]);
          if constexpr (Stream) compat::store_stream(x, o + k * W);
          else x.store_unaligned(o + k * W);
        }
      }
    }
  }

  /// S = rescale·S + Σ_j k̃_j v_jᵀ over the chunk's W keys (k̃_j = k + j·ks, v_j rows of vb
  /// dvp apart), in `chunk_block` register blocks.
  void chunk_fold(const T* k, index_t ks, const T* vb, T rescale) {
    // rescale = 1 (no decay, or the first chunk) skips the product, which is exact then: the
    // same bits without 16 multiplies per 256 FMAs
    if (rescale == T(1)) chunk_fold_cols<false>(k, ks, vb, rescale);
    else chunk_fold_cols<true>(k, ks, vb, rescale);
  }

  template <bool Rescale>
  void chunk_fold_cols(const T* k, index_t ks, const T* vb, T rescale) {
    using B = xsimd::batch<T, A>;
    constexpr index_t W = B::size, NB = chunk_block::cols;
    index_t b = 0;
    for (; b + NB * W <= dv; b += NB * W) chunk_fold_block<Rescale, NB>(b, k, ks, vb, rescale);
    for (; b < dv; b += W) chunk_fold_block<Rescale, 1>(b, k, ks, vb, rescale);
  }

  /// `chunk_fold` for the NB column vectors from column b.
  template <bool Rescale, index_t NB>
  LRPE_ALWAYS_INLINE void chunk_fold_block(index_t b, const T* k, index_t ks, const T* vb, T rescale) {
    using B = xsimd::batch<T, A>;
    constexpr index_t W = B::size, RB = chunk_block::rows;
    T* const sb = S + b;  // locals: see chunk_out_block
    const T* const vbb = vb + b;
    const index_t dvp_ = dvp, f_ = f;
    for (index_t c0 = 0; c0 < f_; c0 += RB) {
      B acc[RB][NB];
      LRPE_UNROLL
      for (index_t r = 0; r < RB; ++r) {
        LRPE_UNROLL
        for (index_t u = 0; u < NB; ++u) {
          acc[r][u] = B::load_aligned(sb + (c0 + r) * dvp_ + u * W);
          if constexpr (Rescale) acc[r][u] *= B(rescale);
        }
      }
      const T* kj = k + c0;
      for (index_t j = 0; j < W; ++j, kj += ks) {
        B vj[NB];
        LRPE_UNROLL
        for (index_t u = 0; u < NB; ++u) vj[u] = B::load_aligned(vbb + j * dvp_ + u * W);
        LRPE_UNROLL
        for (index_t r = 0; r < RB; ++r) {
          const B kc(kj[r]);
          LRPE_UNROLL
          for (index_t u = 0; u < NB; ++u) acc[r][u] = compat::fma(kc, vj[u], acc[r][u]);
        }
      }
      LRPE_UNROLL
      for (index_t r = 0; r < RB; ++r) {
        LRPE_UNROLL
        for (index_t u = 0; u < NB; ++u) acc[r][u].store_aligned(sb + (c0 + r) * dvp_ + u * W);
      }
    }
  }

  /// y[0, dvp) += a·x[0, dvp) (aligned rows of whole vectors).
  void row_axpy(T a, const T* x, T* y) const noexcept {
    using B = xsimd::batch<T, A>;
    constexpr index_t W = B::size;
    const B ab(a);
    for (index_t c = 0; c < dvp; c += W)
      compat::fma(ab, B::load_aligned(x + c), B::load_aligned(y + c)).store_aligned(y + c);
  }

  /**
   * acc += A·V and den += Σ_t A over keys [k_begin, k_end) for the chunk's query rows
   * [i0, i0 + bq), A = Q̃K̃ᵀ ⊙ (t ≤ s) ⊙ λ^{s−t}. With key positions as offsets, each row sees
   * a prefix of a key tile: Q̃K̃ᵀ is formed only over whole vectors of its row group's
   * prefix, A·V only over the prefix.
   */
  void intra_chunk(index_t i0, index_t bq, index_t bqp, index_t k_begin, index_t k_end, T* acc, T* den, T* qt, T* kt,
                   T* at, const T* pow_table, index_t table_size) {
    using tl = softmax_tiling<T, A>;
    constexpr index_t BK = tl::BK, R = tl::R;
    const auto& qp = p.q_positions;
    const auto& kp = p.k_positions;
    const bool offsets = !kp.is_array();
    const bool normalise = p.norm == normalisation::denominator;
    // Full groups of R query rows are read in place; the last partial group, zero-padded.
    const index_t bq_full = bq / R * R;
    for (index_t i = bq_full; i < bqp; ++i) {
      if (i < bq) {
        std::memcpy(qt + (i - bq_full) * f, p.qf.row(i0 + i), static_cast<std::size_t>(f) * sizeof(T));
      } else {
        std::fill(qt + (i - bq_full) * f, qt + (i - bq_full + 1) * f, T(0));
      }
    }
    T ones[R];
    std::fill(ones, ones + R, T(1));
    for (index_t j0 = k_begin; j0 < k_end; j0 += BK) {
      const index_t bk = std::min(BK, k_end - j0);
      pack_keys(j0, bk, kt);
      const T* vb = v_rows(j0, j0 + bk, nullptr);
      for (index_t i = 0; i < bq; i += R) {
        const index_t rows = std::min(R, bq - i);
        // keys of the tile visible to some row of the group (a prefix for offsets)
        index_t nk_g = bk;
        if (offsets) {
          position_t g_max = qp[i0 + i];
          for (index_t r = 1; r < rows; ++r) g_max = std::max(g_max, qp[i0 + i + r]);
          nk_g = visible_prefix(g_max, kp[j0], bk);
          if (nk_g == 0) continue;
        }
        T* ag = at + i * BK;
        const T* qg = i < bq_full ? p.qf.row(i0 + i) : qt;
        const index_t qs = i < bq_full ? p.qf.row_stride : f;
        qk_micro_prefix<R, T, A>(nk_g, qg, qs, kt, f, ag, BK);
        // mask t ≤ s and weight λ^{s−t}; row r sees the prefix of vis_row[r] keys (positions
        // are non-decreasing)
        index_t vis_row[R];
        for (index_t r = 0; r < rows; ++r) {
          const position_t s = qp[i0 + i + r];
          T* arow = ag + r * BK;
          if (offsets) {
            const index_t vis = vis_row[r] = visible_prefix(s, kp[j0], nk_g);
            std::fill(arow + vis, arow + nk_g, T(0));
            if (lambda != 1.0) {
              const position_t delta0 = s - kp[j0];  // Δ of key j is delta0 − j ≥ 0 for j < vis
              for (index_t j = 0; j < vis; ++j) {
                const position_t delta = delta0 - j;
                arow[j] *= delta < table_size ? pow_table[delta] : static_cast<T>(decay_pow(lambda, delta));
              }
            }
          } else {
            vis_row[r] = 0;
            for (index_t j = 0; j < bk; ++j) {
              const position_t delta = s - kp[j0 + j];
              if (delta >= 0) vis_row[r] = j + 1;
              T a = delta < 0 ? T(0) : arow[j];
              if (delta > 0 && lambda != 1.0)
                a *= delta < table_size ? pow_table[delta] : static_cast<T>(decay_pow(lambda, delta));
              arow[j] = a;
            }
          }
          if (normalise) den[i + r] += row_sum<T, A>(arow, nk_g);
        }
        // the keys every row of the group sees as one product, then each row's own: masked
        // weights are never multiplied, so that an Inf or NaN in a later key's value does not
        // reach the rows before it (0·Inf = NaN)
        const index_t common = *std::min_element(vis_row, vis_row + rows);
        if (common > 0) {
          if (rows == R) pv_rows<R, T, A>(ag, BK, 1, ones, vb, dvp, common, acc + i * dvp);
          else pv_remainder<R - 1, T, A>(rows, ag, BK, 1, ones, vb, dvp, common, acc + i * dvp);
        }
        for (index_t r = 0; r < rows; ++r) {
          for (index_t j = common; j < vis_row[r]; ++j) row_axpy(ag[r * BK + j], vb + j * dvp, acc + (i + r) * dvp);
        }
      }
    }
  }
};

/// The state in the workspace: S (f × dvp, columns padded with zeros) then z (f).
template <class T, class A>
struct state_buffers {
  index_t f, dv, dvp;
  T* S;
  T* z;
  T* vblock;

  state_buffers(simd_workspace& ws, index_t f_, index_t dv_) : f(f_), dv(dv_) {
    using tl = softmax_tiling<T, A>;
    dvp = round_up(std::max<index_t>(dv, 1), tl::W);
    S = ws.get<T>(simd_workspace::state, f * dvp + round_up(f, tl::W));
    z = S + f * dvp;
    vblock = ws.get<T>(simd_workspace::v_packed, std::max<index_t>(linear_key_block, tl::BK) * dvp);
  }

  linear_run<T, A> runner(const linear_problem<T>& p, simd_workspace& ws, double lambda) const {
    return linear_run<T, A>{p, ws, lambda, f, dv, dvp, S, z, vblock};
  }

  /// S, z, last position and count from `state` into the workspace and `run`.
  void load(const linear_attention_state<T>& state, linear_run<T, A>& run) const {
    const auto& kv = state.kv();
    for (index_t c = 0; c < f; ++c) {
      std::copy(kv.row(c).data(), kv.row(c).data() + dv, S + c * dvp);
      std::fill(S + c * dvp + dv, S + (c + 1) * dvp, T(0));
      z[c] = state.k_sum()[c];
    }
    run.last = state.last_position();
    run.count = state.count();
    run.carry = state.decay_carry();
  }

  /// Back into `state` when keys were added.
  void store(const linear_run<T, A>& run, linear_attention_state<T>& state) const {
    if (run.count == state.count()) return;
    state.assign(S, dvp, z, run.last, run.count, run.carry);
  }
};

template <class T, class A>
void linear_simd(const linear_problem<T>& p, linear_attention_state<T>* state, simd_workspace& ws) {
  const state_buffers<T, A> sb(ws, p.qf.cols, p.v.cols);
  auto run = sb.runner(p, ws, state != nullptr ? state->decay() : 1.0);
  if (!p.causal) {
    run.non_causal();
    return;
  }
  if (run.self_offsets() && p.qf.rows < run.step_rows_max && sb.dvp == sb.dv) {
    // A short segment (a decode step): the recurrence on the state's own S and z, which have
    // the workspace layout when d_v is a multiple of the vector width; no copy in or out.
    linear_run<T, A> direct{p, ws, state->decay(), sb.f, sb.dv, sb.dv, lrpe::detail::state_access::kv(*state),
                            lrpe::detail::state_access::k_sum(*state), sb.vblock};
    direct.last = state->last_position();
    direct.count = state->count();
    direct.carry = state->decay_carry();
    direct.step_rows(0, p.qf.rows);
    lrpe::detail::state_access::advance(*state, direct.last, direct.count, direct.carry);
    return;
  }
  sb.load(*state, run);
  run.causal();
  sb.store(run, *state);
}

/// y = φ(x) for rows of known elementwise maps, vectorised; false if φ is not one of them.
template <class T, class A, class Phi>
bool vector_feature_map(const Phi& phi, const T* x, T* y, index_t d) {
  using B = xsimd::batch<T, A>;
  constexpr index_t W = B::size;
  auto run = [&](auto&& vec, auto&& scalar) {
    const index_t full = d - d % W;
    for (index_t c = 0; c < full; c += W) vec(B::load_unaligned(x + c)).store_unaligned(y + c);
    for (index_t c = full; c < d; ++c) y[c] = scalar(x[c]);
    return true;
  };
  if constexpr (std::is_same_v<Phi, feature_maps::elu_plus_one>) {
    // xsimd 8's exp converts its argument's multiple of ln 2 to an integer, a scalar cast on
    // AVX-512 without DQ: undefined for NaN and ±∞. So exp sees a finite argument (exp(lo)
    // underflows to 0, as exp(−∞) is), and a NaN feature is the input's NaN.
    const B lo(std::is_same_v<T, float> ? T(-200) : T(-1000));
    return run(
        [lo](B v) {
          const B e = xsimd::exp(xsimd::select(v > lo, xsimd::select(v < B(T(0)), v, B(T(0))), lo));
          return xsimd::select(v > B(T(0)), v + B(T(1)), xsimd::select(v == v, e, v));
        },
        phi);
  } else if constexpr (std::is_same_v<Phi, feature_maps::relu>) {
    return run([](B v) { return xsimd::select(v < B(T(0)), B(T(0)), v); }, phi);  // NaN stays NaN
  } else if constexpr (std::is_same_v<Phi, feature_maps::relu_eps>) {
    const B e(static_cast<T>(phi.eps));
    return run([e](B v) { return xsimd::select(v < B(T(0)), B(T(0)), v) + e; }, phi);
  } else if constexpr (std::is_same_v<Phi, feature_maps::identity>) {
    // An inline vector copy: a libc memcpy call per (short) row costs more than the copy
    // (bench/results/tuning.md#inline-row-copy).
    if (x == y) return true;
    return run([](B v) { return v; }, [](T v) { return v; });
  } else {
    return false;
  }
}

/// P = I and a rotation or complex-phase Λ: a `simd_encoder` with `position_tables::direct`
/// builds nothing (RoPE, LRPE cosine).
template <class Encoding>
inline constexpr bool few_rows_simd_v = [] {
  if constexpr (lrpe_encoder<Encoding>) {
    using T = typename Encoding::scalar;
    using L = typename Encoding::lambda_type;
    return std::is_same_v<typename Encoding::p_type, p::identity<T>> &&
           (std::is_same_v<L, lambda::rotation<T>> || std::is_same_v<L, lambda::complex_phase<T>>);
  } else {
    return false;
  }
}();

/// `features` for an lrpe encoder through the SIMD encoder.
template <class A, class T, class Encoding, class Phi>
void encoded_features(const Encoding& encoding, const Phi& phi, const matrix_view<const T>& x, const positions& pos,
                      const matrix_view<T>& out, position_tables tables = position_tables::stepped) {
  const index_t d = x.cols;
  // φ on a block of rows (in L1), then the SIMD encoder on the block: one pass over memory,
  // cos/sin (or π^s) tables shared by the block. Identity φ encodes x directly.
  const simd_encoder<Encoding, A> enc(encoding, tables);
  if constexpr (std::is_same_v<Phi, feature_maps::identity>) {
    enc.encode(x, pos, out);
  } else {
    constexpr index_t block = 64;
    lrpe::detail::small_buffer<T, 64 * 64> tmp(std::min(block, x.rows) * d);
    for (index_t i0 = 0; i0 < x.rows; i0 += block) {
      const index_t rows = std::min(block, x.rows - i0);
      for (index_t i = 0; i < rows; ++i) {
        T* row = tmp.data() + i * d;
        if (!vector_feature_map<T, A>(phi, x.row(i0 + i), row, d)) lrpe::detail::apply_feature_map(phi, x.row(i0 + i), row, d);
      }
      enc.encode(matrix_view<const T>(tmp.data(), rows, d, d), pos.slice(i0, rows),
                 matrix_view<T>(out.row(i0), rows, out.cols, out.row_stride));
    }
  }
}

template <class A, class T, class Encoding, class Phi>
void features(const Encoding& encoding, const Phi& phi, const matrix_view<const T>& x, const positions& pos,
              canonical::side which, const matrix_view<T>& out) {
  const index_t d = x.cols;
  if constexpr (lrpe_encoder<Encoding>) {
    if (x.rows >= simd_encoder_min_rows) return encoded_features<A>(encoding, phi, x, pos, out);
    if constexpr (few_rows_simd_v<Encoding>) {
      if (simd_encoder<Encoding, A>::path == simd_path::vectorised)
        return encoded_features<A>(encoding, phi, x, pos, out, position_tables::direct);
    }
  }
  if constexpr (std::is_same_v<Encoding, no_encoding>) {
    for (index_t i = 0; i < x.rows; ++i)
      if (!vector_feature_map<T, A>(phi, x.row(i), out.row(i), d)) lrpe::detail::apply_feature_map(phi, x.row(i), out.row(i), d);
  } else {
    lrpe::detail::small_buffer<T> tmp(d);
    for (index_t i = 0; i < x.rows; ++i) {
      if (!vector_feature_map<T, A>(phi, x.row(i), tmp.data(), d)) lrpe::detail::apply_feature_map(phi, x.row(i), tmp.data(), d);
      lrpe::detail::encoding_features(encoding, which, tmp.data(), pos[i], out.row(i));
    }
  }
}

/// φ is one of the maps `vector_feature_map` vectorises (identity aside).
template <class Phi>
inline constexpr bool vectorised_map_v =
    std::is_same_v<Phi, feature_maps::elu_plus_one> || std::is_same_v<Phi, feature_maps::relu> ||
    std::is_same_v<Phi, feature_maps::relu_eps>;

/// The (encoding, φ) pairs whose features `linear_fused` computes chunk by chunk: φ then any
/// lrpe encoder (its SIMD encoder), or a vectorised φ alone.
template <class Encoding, class Phi>
inline constexpr bool fusable_features_v =
    lrpe_encoder<Encoding> || (std::is_same_v<Encoding, no_encoding> && vectorised_map_v<Phi>);

/**
 * The features of a chunk's rows computed on demand from the raw q and k rows (in `p.qf` and
 * `p.kf`): φ on the rows, then the SIMD encoder on Q and K in one call (one per-position table
 * for both), into L1-sized buffers of the workspace. Rows are those of positions offsets with
 * Q and K at the same positions (`linear_fused` checks), at most `max_rows` per call.
 */
template <class T, class A, class Encoding, class Phi>
class fused_features {
  static constexpr bool encodes = lrpe_encoder<Encoding>;
  static constexpr bool maps = !std::is_same_v<Phi, feature_maps::identity>;
  struct none {
    explicit none(const Encoding&) {}
  };
  template <class E, bool = lrpe_encoder<E>>
  struct encoder_of {
    using type = none;
  };
  template <class E>
  struct encoder_of<E, true> {
    using type = simd_encoder<E, A>;
  };

 public:
  /// Features are computed `block` rows at a time (the calls then take at most `block` rows).
  fused_features(const Encoding& encoding, const Phi& phi, const linear_problem<T>& p, simd_workspace& ws,
                 index_t block)
      : enc_(encoding), phi_(phi), p_(p), d_(p.qf.cols), f_(feature_dim(encoding, d_)), block_(block) {
    const index_t per_side = block * ((maps ? d_ : 0) + (encodes ? f_ : 0));
    qbuf_ = ws.get<T>(simd_workspace::q_features, per_side);
    kbuf_ = ws.get<T>(simd_workspace::k_features, per_side);
  }

  /// Feature columns: the encoder's `feature_dim()`, or d without one.
  static index_t feature_dim(const Encoding& encoding, index_t d) noexcept {
    if constexpr (encodes) return encoding.feature_dim();
    else return d;
  }

  /// Features of rows [i0, i0 + m), m ≤ block.
  feature_rows<T> operator()(index_t i0, index_t m) {
    if (i0 < lo_ || i0 + m > hi_) fill(i0, std::min(block_, p_.qf.rows - i0));
    const index_t r = i0 - lo_;
    const index_t off = encodes ? (maps ? block_ * d_ : 0) : 0, w = encodes ? f_ : d_;
    return {qbuf_ + off + r * w, w, kbuf_ + off + r * w, w};
  }

 private:
  /// Rows [i0, i0 + m) into the buffers: φ(x) (block × d) then, with an encoder, the features
  /// (block × f).
  void fill(index_t i0, index_t m) {
    const T* q = p_.qf.row(i0);
    const T* k = p_.kf.row(i0);
    index_t qs = p_.qf.row_stride, ks = p_.kf.row_stride;
    if constexpr (maps) {
      map_rows(q, qs, qbuf_, m);
      map_rows(k, ks, kbuf_, m);
      q = qbuf_;
      k = kbuf_;
      qs = ks = d_;
    }
    if constexpr (encodes) {
      T* fq = qbuf_ + (maps ? block_ * d_ : 0);
      T* fk = kbuf_ + (maps ? block_ * d_ : 0);
      const positions pos = p_.q_positions.slice(i0, m);
      enc_.encode_qk(heads_view<const T>{q, 1, 1, m, d_, 0, 0, qs}, pos, heads_view<const T>{k, 1, 1, m, d_, 0, 0, ks},
                     pos, heads_view<T>{fq, 1, 1, m, f_, 0, 0, f_}, heads_view<T>{fk, 1, 1, m, f_, 0, 0, f_});
    }
    lo_ = i0;
    hi_ = i0 + m;
  }

  void map_rows(const T* x, index_t xs, T* y, index_t m) const {
    for (index_t i = 0; i < m; ++i)
      if (!vector_feature_map<T, A>(phi_, x + i * xs, y + i * d_, d_))
        lrpe::detail::apply_feature_map(phi_, x + i * xs, y + i * d_, d_);
  }

  typename encoder_of<Encoding>::type enc_;
  const Phi& phi_;
  const linear_problem<T>& p_;
  index_t d_, f_, block_;
  index_t lo_ = 0, hi_ = 0;  ///< the rows in the buffers
  T* qbuf_ = nullptr;
  T* kbuf_ = nullptr;
};

/**
 * Causal self-attention with the features computed inside the kernel, chunk by chunk
 * (`fused_features`), instead of a pass that writes Q̃ and K̃ to scratch for the kernel to read
 * back: `p` holds the raw q and k in `qf` and `kf`. Covers what `vector_chunks` covers (keys at
 * the queries' positions, offsets; d_f and d_v multiples of W) for `fusable_features_v`; the
 * n mod W last rows run on the general path from their features. Returns false, having done
 * nothing, for any other case.
 */

template <class T, class A, class Encoding, class Phi>
bool linear_fused(const Encoding& encoding, const Phi& phi, const linear_problem<T>& p,
                  linear_attention_state<T>* state, simd_workspace& ws) {
  if constexpr (!fusable_features_v<Encoding, Phi>) {
    return false;
  } else {
    constexpr index_t W = xsimd::batch<T, A>::size;
    using rows_type = fused_features<T, A, Encoding, Phi>;
    const index_t n = p.qf.rows, f = rows_type::feature_dim(encoding, p.qf.cols), dv = p.v.cols;
    const auto& qp = p.q_positions;
    const auto& kp = p.k_positions;
    if (!p.causal || state == nullptr || n < W || p.kf.rows != n || f % W != 0 || dv % W != 0 || qp.is_array() ||
        kp.is_array() || qp.offset() != kp.offset())
      return false;
    rows_type rows(encoding, phi, p, ws, fused_block);
    const state_buffers<T, A> sb(ws, f, dv);
    auto run = sb.runner(p, ws, state->decay());
    sb.load(*state, run);
    const index_t full = run.vector_chunks(rows_source<T>::of(rows));
    if (const index_t m = n - full; m > 0) {
      const auto [q, qs, k, ks] = rows(full, m);
      const linear_problem<T> tail{matrix_view<const T>(q, m, f, qs),
                                   matrix_view<const T>(k, m, f, ks),
                                   matrix_view<const T>(p.v.row(full), m, p.v.cols, p.v.row_stride),
                                   matrix_view<T>(p.out.row(full), m, p.out.cols, p.out.row_stride),
                                   qp.slice(full, m),
                                   kp.slice(full, m),
                                   true,
                                   p.norm,
                                   p.eps,
                                   p.chunk};
      auto rest = sb.runner(tail, ws, state->decay());
      rest.last = run.last;
      rest.count = run.count;
      rest.carry = run.carry;
      rest.causal();
      run.last = rest.last;
      run.count = rest.count;
      run.carry = rest.carry;
    }
    sb.store(run, *state);
    return true;
  }
}

}  // namespace simd_detail

/// SIMD linear-attention kernel (non-causal, causal by chunks with decay; state as the reference).
template <simd_backend B, class T>
void linear_kernel(const B& b, const linear_problem<T>& p, linear_attention_state<T>* state) {
  simd_detail::linear_simd<T, typename B::arch_type>(p, state, *simd_detail::resolve(b).ws);
}

/// Causal linear attention with the features computed chunk by chunk inside the kernel (see
/// `simd_detail::linear_fused`); false for the cases it does not cover.
template <simd_backend B, class T, class Encoding, class Phi>
bool linear_fused_kernel(const B& b, const Encoding& encoding, const Phi& phi, const linear_problem<T>& p,
                         linear_attention_state<T>* state) {
  return simd_detail::linear_fused<T, typename B::arch_type>(simd_detail::kernel_encoding(encoding), phi, p, state,
                                                             *simd_detail::resolve(b).ws);
}

/// Vectorised feature maps (1+elu, relu, relu+ε, identity), then the encoding's features.
template <simd_backend B, class T, class Encoding, class Phi>
void linear_features_kernel(const B&, const Encoding& encoding, const Phi& phi, const matrix_view<const T>& x,
                            const positions& pos, canonical::side which, const matrix_view<T>& out) {
  simd_detail::features<typename B::arch_type>(simd_detail::kernel_encoding(encoding), phi, x, pos, which, out);
}

/// Encoded Q or K for softmax attention: the SIMD encoder for every `lrpe::encoder`.
template <simd_backend B, class T, class Encoding>
void encode_features_kernel(const B&, const Encoding& encoding, canonical::side which, const matrix_view<const T>& x,
                            const positions& pos, const matrix_view<T>& out) {
  simd_detail::features<typename B::arch_type>(simd_detail::kernel_encoding(encoding), feature_maps::identity{}, x, pos,
                                               which, out);
}

}  // namespace backend
}  // namespace v0
}  // namespace lrpe
