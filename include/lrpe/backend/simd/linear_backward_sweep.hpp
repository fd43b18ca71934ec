// SPDX-License-Identifier: MIT
/**
 * @file linear_backward_sweep.hpp
 * The backwards-in-time half of causal linear attention's backward in one sweep over the rows,
 * for the common case: self-attention at offsets (keys at the queries' positions), no decay, no
 * normalisation, d_f and d_v multiples of the vector width W. With g_t = dL/do_t and dS the
 * gradient of the state (d_f × d_v, dS_f at the end), going back from the last row:
 *
 *     dS ← dS + q̃_t g_tᵀ,    dv_t = dSᵀ k̃_t,    dk̃_t = dS v_t + dz_f
 *
 * dv and dS by the recurrence itself, `RB` rows per pass over dS (2·d_f·d_v FMAs a row, as the
 * forward's `chunk_recurrent`). dk̃ needs dS·v_t, a sum along dS's rows (one horizontal sum per
 * feature and row by the recurrence), so it goes by chunks of W rows with the rows as lanes,
 * from dS as it is before the chunk's rows enter it (the A form):
 *
 *     dk̃_tᵀ = dS v_t + Σ_{s ≥ t in the chunk} (v_t·g_s) q̃_s
 *
 * in d_f·d_v + W·(d_f + d_v) FMAs a row. The n mod W last rows, first, one at a time. dq̃ is a
 * forward pass of the SIMD kernel (linear_backward.hpp). The sweep reads the rows in place:
 * none of the reversed copies the general passes take.
 */
#pragma once

#include <lrpe/backend/simd/detail/micro_kernels.hpp>
#include <lrpe/backend/simd/detail/prefetch.hpp>
#include <lrpe/backend/simd/detail/tuning.hpp>
#include <lrpe/backend/simd/xsimd_compat.hpp>
#include <lrpe/core/view.hpp>

#include <algorithm>
#include <cstdint>

namespace lrpe {
inline namespace v0 {
namespace backend {
namespace simd_detail {

/// The sweep's operands and scratch (see the file comment); `run` writes dk̃ and dv and leaves
/// dS₀ in `dS`.
template <class T, class A>
struct backward_sweep {
  using B = xsimd::batch<T, A>;
  static constexpr index_t W = B::size;
  /// Feature rows of dk̃ᵀ formed at once: each step one vector load and CB broadcasts for CB
  /// FMAs, CB independent chains.
  static constexpr index_t CB = W < 8 ? W : 8;
  /// The recurrence's register block: RB rows by NB column vectors of dS (as `recurrent_block`).
  static constexpr index_t RB = wide_register_file<A> ? 4 : 2;
  static constexpr index_t NB = 2;
  static_assert(W % RB == 0 && W % CB == 0, "a chunk of W rows is whole blocks");

  matrix_view<const T> q, k, v, g;  ///< q̃, k̃, v and dL/dO: n rows each
  matrix_view<T> dk, dv;            ///< dk̃ and dv (written)
  const T* dz;                      ///< dz_f (d_f), or null
  index_t f, d;                     ///< d_f, d_v
  T* dS;                            ///< f × d, aligned rows; holds dS_f on entry (or zeros)
  T* vt;                            ///< d × W: the chunk's values, rows as lanes
  T* mt;                            ///< W × W: row s holds m_s[t] = v_t·g_s for t ≤ s, else 0
  T* dkt;                           ///< f × W: the chunk's dk̃, rows as lanes
  bool stream = false;              ///< dk̃ and dv by non-temporal stores (`set_streaming`)

  /// Large outputs of whole aligned vectors take non-temporal stores, as the forward's
  /// (`linear_run::streams_output`): they are not read again here, and the stores then skip
  /// the reads for ownership.
  void set_streaming() noexcept {
    if constexpr (compat::has_stream_store<A>) {
      const auto whole = [](const matrix_view<T>& x) {
        return x.row_stride % W == 0 && reinterpret_cast<std::uintptr_t>(x.data) % sizeof(B) == 0;
      };
      const double bytes = static_cast<double>(dk.rows) * static_cast<double>(f + d) * sizeof(T);
      stream = whole(dk) && whole(dv) && bytes >= static_cast<double>(linear_stream_bytes);
    }
  }

  /// Stores x at p (aligned when `stream`).
  LRPE_ALWAYS_INLINE void put(const B& x, T* p) const noexcept {
    if (stream) compat::store_stream(x, p);
    else x.store_unaligned(p);
  }

  /// Scratch elements of a sweep (dS, then the chunk's tiles).
  static index_t scratch(index_t f, index_t d) noexcept { return f * d + (d + W + f) * W; }

  /// Chunks ahead (in the sweep's order) whose rows a chunk prefetches into L2, spread over its
  /// recurrence: as the forward's `prefetch_chunks`, rows of one stream a page or more apart
  /// are what the hardware streamers stop at.
  static constexpr index_t prefetch_chunks = 4;

  /// Prefetches rows [r0, r0 + W) of q̃, k̃, v, g (for reading), dk̃ and dv (for writing), one row
  /// per `step()`; `finish()` issues what is left.
  struct prefetcher {
    static constexpr int streams = 6;  ///< 4 read, then 2 written
    const T* in[4]{};
    T* out[2]{};
    index_t stride[streams]{}, len[streams]{};
    index_t next = 0, total = 0;
    index_t every = 1, countdown = 1;  ///< `tick()`s per `step()`

    prefetcher() = default;
    prefetcher(const backward_sweep& w, index_t r0) noexcept
        : in{w.q.row(r0), w.k.row(r0), w.v.row(r0), w.g.row(r0)},
          out{w.dk.row(r0), w.dv.row(r0)},
          stride{w.q.row_stride, w.k.row_stride, w.v.row_stride, w.g.row_stride, w.dk.row_stride, w.dv.row_stride},
          len{w.f, w.f, w.d, w.d, w.f, w.d},
          total((w.stream ? 4 : streams) * W) {
      // spread over the recurrence's f steps per (block of RB rows, column block) of the chunk
      const index_t passes = w.d / (NB * W) + w.d % (NB * W) / W;  // column blocks of NB, then of 1
      const index_t ticks = (W / RB) * passes * w.f;
      every = countdown = std::max<index_t>(1, ticks / total);
    }

    /// One of `every` ticks issues a step.
    LRPE_ALWAYS_INLINE void tick() noexcept {
      if (--countdown == 0) {
        countdown = every;
        step();
      }
    }

    LRPE_ALWAYS_INLINE void step() noexcept {
      if (next == total) return;
      const index_t s = next / W, r = next % W;
      if (s < 4) prefetch_row<2>(in[s] + r * stride[s], len[s]);
      else prefetch_row_for_write(out[s - 4] + r * stride[s], len[s]);
      ++next;
    }
    void finish() noexcept {
      while (next < total) step();
    }
  };

  void run() {
    set_streaming();
    const index_t n = q.rows, full = n / W * W;
    for (index_t t = n; t-- > full;) row(t);
    for (index_t i0 = full; i0 > 0;) {
      i0 -= W;
      const index_t ahead = i0 - prefetch_chunks * W;
      prefetcher pf = ahead >= 0 ? prefetcher(*this, ahead) : prefetcher();
      chunk(i0, pf);
      pf.finish();
    }
    if (stream) compat::stream_fence();
  }

  /// One row past the last whole chunk: the recurrence, dk̃_t by horizontal sums.
  void row(index_t t) {
    const T* qr = q.row(t);
    const T* kr = k.row(t);
    const T* vr = v.row(t);
    const T* gr = g.row(t);
    T* dvr = dv.row(t);
    T* dkr = dk.row(t);
    std::fill(dvr, dvr + d, T(0));
    for (index_t c = 0; c < f; ++c) {
      const B qc(qr[c]), kc(kr[c]);
      T* s = dS + c * d;
      B part(T(0));
      for (index_t b = 0; b < d; b += W) {
        const B sc = compat::fma(qc, B::load_unaligned(gr + b), B::load_aligned(s + b));
        sc.store_aligned(s + b);
        compat::fma(kc, sc, B::load_unaligned(dvr + b)).store_unaligned(dvr + b);
        part = compat::fma(sc, B::load_unaligned(vr + b), part);
      }
      dkr[c] = compat::reduce_add(part) + (dz != nullptr ? dz[c] : T(0));
    }
  }

  /// The chunk of rows [i0, i0 + W): dk̃ from dS before the rows enter it, then the recurrence.
  void chunk(index_t i0, prefetcher& pf) {
    transpose_values(i0);
    chunk_scores(i0);
    chunk_dk(i0, finite_queries(i0));
    chunk_recurrence(i0, pf);
  }

  /// vt[j·W + t] = v_{i0+t}[j].
  void transpose_values(index_t i0) {
    for (index_t j0 = 0; j0 < d; j0 += W) {
      B r[W];
      LRPE_UNROLL
      for (index_t t = 0; t < W; ++t) r[t] = B::load_unaligned(v.row(i0 + t) + j0);
      compat::transpose_square(r);
      LRPE_UNROLL
      for (index_t t = 0; t < W; ++t) r[t].store_aligned(vt + (j0 + t) * W);
    }
  }

  static B lane_indices() noexcept {
    alignas(64) T idx[W];
    for (index_t t = 0; t < W; ++t) idx[t] = static_cast<T>(t);
    return B::load_aligned(idx);
  }

  /// mt's rows: m_s = Σ_j g_s[j]·vt[j], lanes t > s cleared by a select (a non-finite value in
  /// a later row of V stays out of the rows before it). 4 rows s at a time, the values' columns
  /// in even and odd halves: 8 FMA chains (d is a multiple of W, so even).
  void chunk_scores(index_t i0) {
    constexpr index_t SB = W < 4 ? W : 4;
    const B lane = lane_indices();
    const index_t gs = g.row_stride;
    for (index_t s0 = 0; s0 < W; s0 += SB) {
      B a[SB], a_odd[SB];
      LRPE_UNROLL
      for (index_t u = 0; u < SB; ++u) a[u] = a_odd[u] = B(T(0));
      const T* gr = g.row(i0 + s0);
      for (index_t j = 0; j < d; j += 2) {
        const B vj = B::load_aligned(vt + j * W), vj_odd = B::load_aligned(vt + (j + 1) * W);
        LRPE_UNROLL
        for (index_t u = 0; u < SB; ++u) {
          a[u] = compat::fma(B(gr[u * gs + j]), vj, a[u]);
          a_odd[u] = compat::fma(B(gr[u * gs + j + 1]), vj_odd, a_odd[u]);
        }
      }
      LRPE_UNROLL
      for (index_t u = 0; u < SB; ++u)
        xsimd::select(lane <= B(static_cast<T>(s0 + u)), a[u] + a_odd[u], B(T(0))).store_aligned(mt + (s0 + u) * W);
    }
  }

  /// Whether the chunk's q̃ rows are all finite (then `chunk_dk` multiplies by m's zeros instead
  /// of selecting: Inf·0 would carry an earlier row's non-finite q̃ into later rows' dk̃).
  bool finite_queries(index_t i0) const {
    B probe[4] = {B(T(0)), B(T(0)), B(T(0)), B(T(0))};  // 4 chains: the adds' latency, not their count
    for (index_t t = 0; t < W; ++t)
      for (index_t c = 0; c < f; c += W) probe[t & 3] += B::load_unaligned(q.row(i0 + t) + c) * B(T(0));
    return xsimd::all((probe[0] + probe[1]) + (probe[2] + probe[3]) == B(T(0)));
  }

  /// dkt[c·W + t] = dS[c]·v_t + Σ_s q̃_s[c]·m_s[t], CB features at a time; then transposed into
  /// the rows of dk̃, with dz_f.
  void chunk_dk(index_t i0, bool finite) {
    const B lane = lane_indices();
    const T* q0 = q.row(i0);
    const index_t qs = q.row_stride, d_ = d;
    for (index_t c0 = 0; c0 < f; c0 += CB) {
      B acc[CB];
      LRPE_UNROLL
      for (index_t r = 0; r < CB; ++r) acc[r] = B(T(0));
      const T* s = dS + c0 * d_;
      for (index_t j = 0; j < d_; ++j) {
        const B vj = B::load_aligned(vt + j * W);
        LRPE_UNROLL
        for (index_t r = 0; r < CB; ++r) acc[r] = compat::fma(B(s[r * d_ + j]), vj, acc[r]);
      }
      for (index_t t = 0; t < W; ++t) {
        const B ms = B::load_aligned(mt + t * W);
        const T* qr = q0 + t * qs + c0;
        if (finite) {
          LRPE_UNROLL
          for (index_t r = 0; r < CB; ++r) acc[r] = compat::fma(B(qr[r]), ms, acc[r]);
        } else {
          const auto seen = lane <= B(static_cast<T>(t));
          LRPE_UNROLL
          for (index_t r = 0; r < CB; ++r) acc[r] = compat::fma(xsimd::select(seen, B(qr[r]), B(T(0))), ms, acc[r]);
        }
      }
      LRPE_UNROLL
      for (index_t r = 0; r < CB; ++r) acc[r].store_aligned(dkt + (c0 + r) * W);
    }
    for (index_t c0 = 0; c0 < f; c0 += W) {
      B r[W];
      LRPE_UNROLL
      for (index_t j = 0; j < W; ++j) r[j] = B::load_aligned(dkt + (c0 + j) * W);
      compat::transpose_square(r);
      const B z = dz != nullptr ? B::load_unaligned(dz + c0) : B(T(0));
      LRPE_UNROLL
      for (index_t t = 0; t < W; ++t) put(r[t] + z, dk.row(i0 + t) + c0);
    }
  }

  /// dS ← dS + q̃_t g_tᵀ and dv_t = dSᵀ k̃_t over the chunk's rows, the last first: RB rows per
  /// pass over dS, NB column vectors at a time.
  void chunk_recurrence(index_t i0, prefetcher& pf) {
    for (index_t t0 = W - RB; t0 >= 0; t0 -= RB) {
      index_t b = 0;
      for (; b + NB * W <= d; b += NB * W) recurrence_pass<NB>(i0 + t0, b, pf);
      for (; b < d; b += W) recurrence_pass<1>(i0 + t0, b, pf);
    }
  }

  /// `chunk_recurrence` for rows [t0, t0 + RB) and the N column vectors from column b.
  template <index_t N>
  LRPE_ALWAYS_INLINE void recurrence_pass(index_t t0, index_t b, prefetcher& pf) {
    // Members into locals: the vector stores may alias anything (see linear.hpp's chunk_out_block)
    T* const sb = dS + b;
    const T* const q0 = q.row(t0);
    const T* const k0 = k.row(t0);
    const index_t qs = q.row_stride, ks = k.row_stride, d_ = d, f_ = f;
    B gr[RB][N], acc[RB][N];
    LRPE_UNROLL
    for (index_t r = 0; r < RB; ++r) {
      LRPE_UNROLL
      for (index_t u = 0; u < N; ++u) {
        gr[r][u] = B::load_unaligned(g.row(t0 + r) + b + u * W);
        acc[r][u] = B(T(0));
      }
    }
    for (index_t c = 0; c < f_; ++c) {
      pf.tick();
      B sc[N];
      LRPE_UNROLL
      for (index_t u = 0; u < N; ++u) sc[u] = B::load_aligned(sb + c * d_ + u * W);
      LRPE_UNROLL
      for (index_t i = 0; i < RB; ++i) {
        const index_t r = RB - 1 - i;
        const B qc(q0[r * qs + c]), kc(k0[r * ks + c]);
        LRPE_UNROLL
        for (index_t u = 0; u < N; ++u) {
          sc[u] = compat::fma(qc, gr[r][u], sc[u]);
          acc[r][u] = compat::fma(kc, sc[u], acc[r][u]);
        }
      }
      LRPE_UNROLL
      for (index_t u = 0; u < N; ++u) sc[u].store_aligned(sb + c * d_ + u * W);
    }
    LRPE_UNROLL
    for (index_t r = 0; r < RB; ++r) {
      LRPE_UNROLL
      for (index_t u = 0; u < N; ++u) put(acc[r][u], dv.row(t0 + r) + b + u * W);
    }
  }
};

}  // namespace simd_detail
}  // namespace backend
}  // namespace v0
}  // namespace lrpe
