// SPDX-License-Identifier: MIT
/**
 * @file kernels.hpp
 * Internal: the SIMD kernels of each P and Λ policy, one row at a time (docs/backends.md).
 *
 * A P kernel maps a real row to a real row (y = P x). A Λ kernel splits Λ⁽ˢ⁾ into a per-position
 * table (`fill`/`fill_run`: cos/sin of s·θ in double, or the indices of π^s) and a per-row
 * `apply<Stream>` that reads one table row (`apply_rows` where a kernel has a block loop); the
 * driver (encode.hpp) fills the table once per position and reuses it for every head, batch
 * entry, and for Q and K. `Stream` = full vectors stored non-temporally (the driver checks
 * alignment through `stream_layout_ok`). Tables are laid out so that `apply` is a straight-line
 * pass of full vectors over the row plus a scalar tail:
 *
 * | Λ | table row (T unless noted) | apply |
 * |---|---|---|
 * | rotation, interleaved | C[e/2], S[e/2] (+ w − 1 pad) | y = fmaddsub(x, dup(C), swap_pairs(x)·dup(S)) |
 * | rotation, split-half  | C[e/2], S[e/2] (+ w − 1 pad) | y_a = a·C − b·S, y_b = b·C + a·S (two contiguous halves) |
 * | complex phase, real P | C[e], S[e] | Re = x·C, Im = x·S |
 * | permutation power     | idx[d] (int32 / int64) = π^s(j); on AVX2 (d ≤ 256) bytes, widened where read as entries | y = permute_row(x, idx); on AVX/AVX2 the rows of one position in w matrices by one permute_tile; AVX2, a matrix at a time: permute_row_bytes |
 * | identity              | none | copy |
 *
 * Primary templates are the fallbacks: a P without a kernel is applied by its own (scalar)
 * `apply`; a Λ without a kernel makes the whole encoder take the reference path.
 *
 * The kernels here are written with xsimd for every arch. Where an ISA has a faster way (a row
 * permuted in AVX-512 registers, AVX2 inserts instead of gathers, in-lane rotation shuffles),
 * a kernel calls a hook with its arch tag, and overload resolution picks the ISA's version in
 * isa/avx512.hpp or isa/avx2.hpp, or the do-nothing one of isa/generic.hpp. No intrinsics and
 * no `#if` on the instruction set in this file.
 */
#pragma once

#include <lrpe/backend/simd/detail/isa/avx2.hpp>
#include <lrpe/backend/simd/detail/isa/avx512.hpp>
#include <lrpe/backend/simd/detail/isa/generic.hpp>
#include <lrpe/backend/simd/detail/prefetch.hpp>
#include <lrpe/backend/simd/detail/row_basics.hpp>
#include <lrpe/backend/simd/detail/stored.hpp>
#include <lrpe/backend/simd/lambda_kernel.hpp>
#include <lrpe/backend/simd/sincos.hpp>
#include <lrpe/backend/simd/xsimd_compat.hpp>
#include <lrpe/backend/simd/detail/tuning.hpp>
#include <lrpe/detail/mul_add.hpp>
#include <lrpe/lambda/complex_phase.hpp>
#include <lrpe/lambda/identity.hpp>
#include <lrpe/lambda/permutation_power.hpp>
#include <lrpe/lambda/rotation.hpp>
#include <lrpe/p/dct.hpp>
#include <lrpe/p/dense.hpp>
#include <lrpe/p/householder.hpp>
#include <lrpe/p/identity.hpp>
#include <lrpe/p/permutation.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

namespace lrpe {
inline namespace v0 {
namespace backend {
namespace simd_detail {


/**
 * y[j] = x[idx[j]] for j < d (0 ≤ idx[j] < d): the row permutation of permutation P and of
 * permutation powers.
 *
 * AVX-512 with d ≤ 8 vectors (128 float / 64 double): the row is held in registers and every
 * output vector is a two-source lane permute (`vpermt2ps`/`pd`) per pair of input vectors,
 * merged by a mask on the index's range — 2 permutes and a blend per output vector at d = 64
 * float, against 16 element loads for a `vgatherdps`, which measured slower
 * (bench/results/tuning.md#avx512-register-permute). Elsewhere (and for wider rows) vector
 * gathers. Stream: full output vectors are stored non-temporally (y aligned to the vector).
 */

template <bool Stream, class Arch, class T, class Map = identity_map<Arch, T>>
LRPE_ALWAYS_INLINE void permute_row(const T* x, const index_of_t<T>* idx, T* y, index_t d, const Map& map = {},
                                    typename Map::row_state st = {}) noexcept {
  if (permute_in_registers_avx512<Stream, Arch>(Arch{}, x, idx, y, d, map, st)) return;
  using b = xsimd::batch<T, Arch>;
  using ib = xsimd::batch<index_of_t<T>, Arch>;
  constexpr index_t w = static_cast<index_t>(b::size);
  if constexpr (!Map::trivial) {
    // AVX2: the mapped row formed by vectors on the stack, then permuted by lane loads (below)
    constexpr index_t max_row = 256;
    if constexpr (avx2_kernels && std::is_base_of_v<xsimd::avx2, Arch>) {
      if (d <= max_row) {
        alignas(64) T row[max_row];
        index_t c = 0;
        for (; c + w <= d; c += w) map.map(st, c, b::load_unaligned(x + c)).store_aligned(row + c);
        for (; c < d; ++c) row[c] = map.map1(st, c, x[c]);
        return permute_row<Stream, Arch>(row, idx, y, d);
      }
    }
    for (index_t j = 0; j < d; ++j) y[j] = map.map1(st, idx[j], x[idx[j]]);  // feature by feature
    return;
  }
  index_t j = permute_by_inserts_avx2<Stream, Arch>(Arch{}, x, idx, y, 0, d);
  for (; j + w <= d; j += w) store<Stream>(compat::gather(x, ib::load_unaligned(idx + j)), y + j);
  for (; j < d; ++j) y[j] = x[idx[j]];
}

/// Whether `permute_row_bytes` serves Arch: AVX2 without AVX-512 (AVX-512 keeps its register
/// permute, which no scalar loop approaches).
template <class Arch>
inline constexpr bool byte_permute_v =
    avx2_kernels && std::is_base_of_v<xsimd::avx2, Arch> && !std::is_base_of_v<xsimd::avx512f, Arch>;

/// dst[j] = src[j]: byte table rows widened to the entries the other permute kernels read.
template <class Entry>
LRPE_ALWAYS_INLINE void widen_indices(const std::uint8_t* src, Entry* dst, index_t count) noexcept {
  for (index_t j = 0; j < count; ++j) dst[j] = static_cast<Entry>(src[j]);
}

/**
 * out[j] = lut[in[j]] for j < d, bytes (every in[j] < lut_size ≤ `byte_permute_max_d`; `lut`
 * readable up to lut_size rounded up to 16, `in` and `out` may be the same row): the
 * permutation powers' table step π^{s+1} = π ∘ π^s and a permutation P composed into it. On
 * AVX2, 32 entries at a time: one `vpshufb` per 16 entries of the lut (on the low 4 bits of
 * the index), the results merged by a tree of byte blends on index bits 4, 5, … — at d = 64,
 * 4 shuffles, 3 blends and 2 shifts per 32 entries, against a load, a load and a store for
 * each entry.
 */
template <class Arch>
LRPE_ALWAYS_INLINE void lookup_bytes(const std::uint8_t* lut, index_t lut_size, const std::uint8_t* in,
                                     std::uint8_t* out, index_t d) noexcept {
  index_t j = 0;
  if constexpr (byte_permute_v<Arch>) j = lookup_bytes_avx2(Arch{}, lut, lut_size, in, out, d);
  for (; j < d; ++j) out[j] = lut[in[j]];
}

/**
 * y[j] = x[idx[j]] with byte indices (d ≤ `byte_permute_max_d`; AVX2): the permutation powers'
 * rows that run a matrix at a time. 8 indices are read as one 64-bit word and taken apart by
 * shifts; each element is one scalar load and one scalar store. Streamed (BNSH from DRAM), the
 * elements go through general-purpose registers into a row staged on the stack, which is then
 * stored by whole vectors, non-temporally: faster from DRAM than `permute_row`'s inserts (their
 * shuffles share two ports, and the byte table is 16 KiB in L1 where the int32 one is 64 KiB in
 * L2). Cached, the elements are stored straight into y (the vector reload of a staged row waits
 * for its 8 scalar stores; bench/results/tuning.md#permute-row-bytes). The stores are volatile:
 * otherwise GCC turns the scalar moves back into vectors built by inserts or gathers.
 */
template <bool Stream, class Arch, class T>
LRPE_ALWAYS_INLINE void permute_row_bytes(const T* x, const std::uint8_t* idx, T* y, index_t d) noexcept {
  // f(j, idx[j]) for j < d, the indices read 8 at a time as one 64-bit word
  const auto each_index = [idx, d](auto&& f) LRPE_ALWAYS_INLINE_LAMBDA {
    index_t j = 0;
    for (; j + 8 <= d; j += 8) {
      std::uint64_t word;
      std::memcpy(&word, idx + j, sizeof(word));
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) f(j + k, static_cast<index_t>((word >> (8 * k)) & 0xFF));
    }
    for (; j < d; ++j) f(j, static_cast<index_t>(idx[j]));
  };
  if constexpr (!Stream) {
    volatile T* out = y;
    each_index([&](index_t j, index_t i) LRPE_ALWAYS_INLINE_LAMBDA { out[j] = x[i]; });
  } else {
    using b = xsimd::batch<T, Arch>;
    using bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
    static_assert(sizeof(bits) == sizeof(T));
    constexpr index_t w = static_cast<index_t>(b::size);
    // The vector loads below read the staged row through the intrinsics' may_alias types.
    alignas(64) bits row[byte_permute_max_d];
    volatile bits* staged = row;
    each_index([&](index_t j, index_t i) LRPE_ALWAYS_INLINE_LAMBDA {
      bits v;
      std::memcpy(&v, x + i, sizeof(v));
      staged[j] = v;
    });
    const T* out = reinterpret_cast<const T*>(row);
    index_t c = 0;
    for (; c + w <= d; c += w) store<Stream>(b::load_aligned(out + c), y + c);
    for (; c < d; ++c) std::memcpy(y + c, row + c, sizeof(T));
  }
}

/**
 * Permutes by tiles (AVX and AVX2, float and double): w rows at once instead of one. The w
 * rows are transposed by w×w tiles (`compat::transpose_square`, in registers) into a column
 * block in L1, column j = feature j of the w rows; the permute is then a choice of whole
 * column vectors, and the tiles are transposed back. At d = 64 float that is 6 shuffles and
 * 3 loads per output vector, against 8 element loads, 8 index loads and 7 inserts for the
 * row-at-a-time `permute_row` on AVX2. A Householder map x − 2(v·x)v rides along: v·x of
 * the w rows is one broadcast FMA per column (no horizontal sum) and each chosen column takes
 * one more FMA. AVX-512 keeps its register permute (a row in registers, `vpermt2ps`/`pd`).
 */
template <class T, class Arch>
inline constexpr bool tile_permute_v =
    compat::has_fast_transpose<T, Arch> && !std::is_base_of_v<xsimd::avx512f, Arch>;

/// The tile permute serves rows of width d on Arch.
template <class T, class Arch>
constexpr bool tile_permute_ok(index_t d) noexcept {
  if constexpr (tile_permute_v<T, Arch>) {
    constexpr index_t w = static_cast<index_t>(xsimd::batch<T, Arch>::size);
    return d > 0 && d % w == 0 && d <= tile_permute_max_d;
  } else {
    return false;
  }
}

/// Σ_k acc[k] lane by lane, in the order of xsimd's AVX `haddp` (a pairwise tree: ((a0 + a1) +
/// (a2 + a3)) + ((a4 + a5) + (a6 + a7)) for 8 lanes), for `permute_tile`'s μ. The w vectors
/// are summed in place.
template <class B>
LRPE_ALWAYS_INLINE B haddp_tree(B* acc) noexcept {
  constexpr std::size_t w = B::size;
  for (std::size_t s = 1; s < w; s *= 2)
    for (std::size_t k = 0; k < w; k += 2 * s) acc[k] = acc[k] + acc[k + s];
  return acc[0];
}

/**
 * y_i[j] = x'_i[idx[j]] for the w rows x_0 … x_{w−1} (any addresses, same permutation), where
 * x' = x, or with `Reflect` x' = x − 2(v·x)v. Requires `tile_permute_ok<T, Arch>(d)`.
 * Stream: non-temporal stores (every y_i aligned to the vector).
 */
template <bool Stream, bool Reflect, class Arch, class T>
LRPE_ALWAYS_INLINE void permute_tile(const T* const* x, T* const* y, const index_of_t<T>* idx, index_t d,
                                     [[maybe_unused]] const T* v) noexcept {
  using b = xsimd::batch<T, Arch>;
  constexpr index_t w = static_cast<index_t>(b::size);
  alignas(64) T cols[tile_permute_max_d * w];
  for (index_t c = 0; c < d; c += w) {
    b t[w];
#pragma GCC unroll 8
    for (index_t i = 0; i < w; ++i) t[i] = b::load_unaligned(x[i] + c);
    compat::transpose_square(t);
#pragma GCC unroll 8
    for (index_t i = 0; i < w; ++i) t[i].store_aligned(cols + (c + i) * w);
  }
  [[maybe_unused]] b mu;
  if constexpr (Reflect) {
    // μ in the order of the row map's `begin_rows` (lane k of its accumulator = features
    // ≡ k mod w, summed by xsimd's haddp tree), so that a row gets the same bits on either
    // path: which path runs depends on the layout and the call's size.
    b acc[w];
#pragma GCC unroll 8
    for (index_t k = 0; k < w; ++k) acc[k] = b(T(0));
    for (index_t c = 0; c < d; c += w) {
#pragma GCC unroll 8
      for (index_t k = 0; k < w; ++k) acc[k] = compat::fma(b::load_aligned(cols + (c + k) * w), b(v[c + k]), acc[k]);
    }
    mu = b(T(-2)) * (haddp_tree(acc) + b(T(0)));
  }
  // Streamed, the rows are staged in L1 and written one after the other, each a run of whole
  // lines: w rows written a vector at a time each would keep w partial lines in the
  // write-combining buffers, and rows of different heads alias in them.
  [[maybe_unused]] alignas(64) T rows[Stream ? tile_permute_max_d * w : 1];
  for (index_t c = 0; c < d; c += w) {
    b t[w];
#pragma GCC unroll 8
    for (index_t i = 0; i < w; ++i) {
      const auto j = static_cast<index_t>(idx[c + i]);
      t[i] = b::load_aligned(cols + j * w);
      if constexpr (Reflect) t[i] = compat::fma(mu, b(v[j]), t[i]);
    }
    compat::transpose_square(t);
#pragma GCC unroll 8
    for (index_t i = 0; i < w; ++i) {
      if constexpr (Stream) t[i].store_aligned(rows + i * d + c);
      else t[i].store_unaligned(y[i] + c);
    }
  }
  if constexpr (Stream)
    for (index_t i = 0; i < w; ++i)
      for (index_t c = 0; c < d; c += w) store<true>(b::load_aligned(rows + i * d + c), y[i] + c);
}

/// Σ_c a[c]·b[c] with vector FMAs (two accumulators) and one horizontal sum: a scalar loop is
/// one serial chain of n FMA latencies (float sums are not reassociated by the compiler).
template <class T, class A>
inline T row_dot(const T* a, const T* b, index_t n) noexcept {
  using B = xsimd::batch<T, A>;
  constexpr index_t W = static_cast<index_t>(B::size);
  B s0(T(0)), s1(T(0));
  index_t c = 0;
  for (; c + 2 * W <= n; c += 2 * W) {
    s0 = compat::fma(B::load_unaligned(a + c), B::load_unaligned(b + c), s0);
    s1 = compat::fma(B::load_unaligned(a + c + W), B::load_unaligned(b + c + W), s1);
  }
  for (; c + W <= n; c += W) s0 = compat::fma(B::load_unaligned(a + c), B::load_unaligned(b + c), s0);
  T s = compat::reduce_add(s0 + s1);
  for (; c < n; ++c) s = lrpe::detail::mul_add(a[c], b[c], s);
  return s;
}

/// Σ_c a[c], vectorised as `row_dot`.
template <class T, class A>
inline T row_sum(const T* a, index_t n) noexcept {
  using B = xsimd::batch<T, A>;
  constexpr index_t W = static_cast<index_t>(B::size);
  B s0(T(0));
  index_t c = 0;
  for (; c + W <= n; c += W) s0 += B::load_unaligned(a + c);
  T s = compat::reduce_add(s0);
  for (; c < n; ++c) s += a[c];
  return s;
}

// ============================================================================ P kernels

/// Fallback: P's own `apply` (scalar). Only real P reaches here (complex P: reference path).
template <class Arch, class P>
struct p_kernel {
  using T = typename P::scalar;
  static constexpr bool vectorised = false;
  static constexpr bool is_identity = false;
  explicit p_kernel(const P& p) : p_(&p) {}
  void apply(const T* x, T* y) const { p_->apply(x, y); }
  const P* p_;
};

template <class Arch, class T>
struct p_kernel<Arch, p::identity<T>> {
  static constexpr bool vectorised = true;
  static constexpr bool is_identity = true;
  explicit p_kernel(const p::identity<T>& p) : d_(p.dim()) {}
  void apply(const T* x, T* y) const noexcept { copy_row(x, y, d_); }
  index_t d_;
};

/// y = x − 2 (v·x) v: one FMA pass for the dot product, one for the update.
template <class Arch, class T>
struct p_kernel<Arch, p::householder<T>> {
  using b = xsimd::batch<T, Arch>;
  static constexpr index_t w = static_cast<index_t>(b::size);
  static constexpr bool vectorised = true;
  static constexpr bool is_identity = false;
  explicit p_kernel(const p::householder<T>& p) : v_(p.vector().data()), d_(p.dim()) {}
  void apply(const T* x, T* y) const noexcept {
    const T m2 = T(-2) * row_dot<T, Arch>(x, v_, d_);
    const b vm2(m2);
    index_t i = 0;
    for (; i + w <= d_; i += w)
      compat::fma(vm2, b::load_unaligned(v_ + i), b::load_unaligned(x + i)).store_unaligned(y + i);
    for (; i < d_; ++i) y[i] = lrpe::detail::mul_add(m2, v_[i], x[i]);
  }

  /// As a row map (μ = −2 v·x): Λ applies P while it loads the row.
  static constexpr bool row_map = true;
  static constexpr bool trivial = false;
  static constexpr index_t rows_per_begin = w;
  struct row_state {
    T mu;
  };
  /// μ of `cnt` ≤ w rows. A whole group of w accumulates its w dot products side by side and
  /// sums them with one `compat::haddp` (a transpose-and-add tree: about 2 shuffles per row,
  /// against 6–7 for a horizontal sum and broadcast per row: the shuffle port is what the
  /// rotation kernels already saturate).
  /// A short group (cnt < w) takes the same order, its missing rows zero, so that a row's μ
  /// does not depend on where a block of rows starts (`permute_tile` reproduces it too).
  LRPE_ALWAYS_INLINE void begin_rows(const T* x, index_t xs, index_t cnt, row_state* st) const noexcept {
    b acc[w];
#pragma GCC unroll 16
    for (index_t r = 0; r < w; ++r) acc[r] = b(T(0));
    index_t i = 0;
    if (cnt == w) {
      for (; i + w <= d_; i += w) {
        const b vv = b::load_unaligned(v_ + i);
#pragma GCC unroll 16
        for (index_t r = 0; r < w; ++r) acc[r] = compat::fma(b::load_unaligned(x + r * xs + i), vv, acc[r]);
      }
    } else {
      for (; i + w <= d_; i += w) {
        const b vv = b::load_unaligned(v_ + i);
        for (index_t r = 0; r < cnt; ++r) acc[r] = compat::fma(b::load_unaligned(x + r * xs + i), vv, acc[r]);
      }
    }
    alignas(sizeof(b)) T dots[w];
    compat::haddp(acc).store_aligned(dots);
    for (index_t r = 0; r < cnt; ++r) {
      T tail = 0;
      for (index_t c = i; c < d_; ++c) tail = lrpe::detail::mul_add(x[r * xs + c], v_[c], tail);
      st[r].mu = T(-2) * (dots[r] + tail);
    }
  }
  LRPE_ALWAYS_INLINE b map(const row_state& st, index_t j, b x) const noexcept {
    return compat::fma(b(st.mu), b::load_unaligned(v_ + j), x);
  }
  LRPE_ALWAYS_INLINE T map1(const row_state& st, index_t j, T x) const noexcept {
    return lrpe::detail::mul_add(st.mu, v_[j], x);
  }
  /// The unit vector v of P = I − 2vvᵀ (for Λ kernels that specialise on a reflection).
  [[nodiscard]] const T* reflector() const noexcept { return v_; }

  const T* v_;
  index_t d_;
};

/// y[j] = x[π(j)] by `permute_row` (p::permutation and p::odd_even); `apply_rows`, P alone,
/// by `permute_tile` over w rows at a time where it can.
template <class Arch, class T>
struct permutation_gather {
  static constexpr bool vectorised = true;
  static constexpr bool is_identity = false;
  explicit permutation_gather(std::span<const index_t> pi) : idx_(pi.begin(), pi.end()) {}
  /// Stream: non-temporal stores of the full output vectors (y aligned to the vector).
  template <bool Stream = false>
  void apply(const T* x, T* y) const noexcept {
    permute_row<Stream, Arch>(x, idx_.data(), y, static_cast<index_t>(idx_.size()));
  }
  /// `apply` on m rows (x, y rows `xs`, `ys` apart), inputs prefetched `prefetch_ahead` rows
  /// ahead: by tiles of w rows where `tile_permute_ok`, the rest a row at a time.
  template <bool Stream = false>
  void apply_rows(const T* x, index_t xs, T* y, index_t ys, index_t m) const noexcept {
    const auto d = static_cast<index_t>(idx_.size());
    const auto ahead = [&](index_t r) LRPE_ALWAYS_INLINE_LAMBDA {
      if (r + prefetch_ahead < m) prefetch_row(x + (r + prefetch_ahead) * xs, d);
    };
    index_t r = 0;
    if constexpr (tile_permute_v<T, Arch>) {
      constexpr index_t w = static_cast<index_t>(xsimd::batch<T, Arch>::size);
      if (tile_permute_ok<T, Arch>(d)) {
        for (; r + w <= m; r += w) {
          const T* xr[w];
          T* yr[w];
          for (index_t i = 0; i < w; ++i) {
            ahead(r + i);
            xr[i] = x + (r + i) * xs;
            yr[i] = y + (r + i) * ys;
          }
          permute_tile<Stream, false, Arch>(xr, yr, idx_.data(), d, static_cast<const T*>(nullptr));
        }
      }
    }
    for (; r < m; ++r) {
      ahead(r);
      apply<Stream>(x + r * xs, y + r * ys);
    }
  }
  /// Rows ahead whose input `apply_rows` prefetches (the driver's P-into-scratch distance).
  static constexpr index_t prefetch_ahead = p_prefetch_rows;
  std::vector<index_of_t<T>> idx_;
};

template <class Arch, class T>
struct p_kernel<Arch, p::permutation<T>> : permutation_gather<Arch, T> {
  explicit p_kernel(const p::permutation<T>& p) : permutation_gather<Arch, T>(p.indices()) {}
};
template <class Arch, class T>
struct p_kernel<Arch, p::odd_even<T>> : permutation_gather<Arch, T> {
  explicit p_kernel(const p::odd_even<T>& p) : permutation_gather<Arch, T>(p.indices()) {}
};

/// y = Σ_n x_n · P[:, n] on a column-major copy of P (built once per kernel: d² elements).
template <class Arch, class T>
struct dense_real_p {
  using b = xsimd::batch<T, Arch>;
  static constexpr index_t w = static_cast<index_t>(b::size);
  static constexpr bool vectorised = true;
  static constexpr bool is_identity = false;
  explicit dense_real_p(dense_matrix<T> m) : m_(std::move(m)) {}
  void apply(const T* x, T* y) const noexcept {
    const index_t d = m_.rows();
    const T* col = m_.data();
    index_t i = 0;
    for (; i + 2 * w <= d; i += 2 * w) {
      b a0(T(0)), a1(T(0));
      for (index_t n = 0; n < d; ++n) {
        const b xn(x[n]);
        a0 = compat::fma(xn, b::load_unaligned(col + n * d + i), a0);
        a1 = compat::fma(xn, b::load_unaligned(col + n * d + i + w), a1);
      }
      a0.store_unaligned(y + i);
      a1.store_unaligned(y + i + w);
    }
    for (; i + w <= d; i += w) {
      b a0(T(0));
      for (index_t n = 0; n < d; ++n) a0 = compat::fma(b(x[n]), b::load_unaligned(col + n * d + i), a0);
      a0.store_unaligned(y + i);
    }
    for (; i < d; ++i) {
      T acc = 0;
      for (index_t n = 0; n < d; ++n) acc = lrpe::detail::mul_add(col[n * d + i], x[n], acc);
      y[i] = acc;
    }
  }
  dense_matrix<T> m_;  // column-major
};

template <class Arch, class T>
struct p_kernel<Arch, p::dct<T>> : dense_real_p<Arch, T> {
  explicit p_kernel(const p::dct<T>& p) : dense_real_p<Arch, T>(p.matrix()) {}
};
template <class Arch, class T>
  requires simd_scalar_v<T>
struct p_kernel<Arch, p::dense<T>> : dense_real_p<Arch, T> {
  explicit p_kernel(const p::dense<T>& p) : dense_real_p<Arch, T>(p.matrix()) {}
};

// ============================================================================ Λ kernels

/// No kernel in lrpe for this Λ: the user's `backend::simd_lambda_kernel<Arch, L>` where they
/// wrote one (lambda_kernel.hpp), else its primary template, the marker for the reference path.
template <class Arch, class L>
struct l_kernel : backend::simd_lambda_kernel<Arch, L> {
  using backend::simd_lambda_kernel<Arch, L>::simd_lambda_kernel;
};

/// Λ = I: no table; the row is copied (or P writes straight into the output).
template <class Arch, class T>
struct l_kernel<Arch, lambda::identity<T>> {
  static constexpr bool vectorised = true;
  static constexpr bool is_identity = true;
  using entry = T;
  explicit l_kernel(const lambda::identity<T>& l) : d_(l.dim()) {}
  [[nodiscard]] index_t table_width() const noexcept { return 0; }
  [[nodiscard]] index_t angle_count() const noexcept { return 0; }
  [[nodiscard]] bool stream_layout_ok() const noexcept { return true; }
  void fill(position_t, entry*, double*, double*) const noexcept {}
  /// (The driver streams Λ = I only where P writes the output, a permutation: `Stream` is
  /// accepted and ignored here.)
  template <bool Stream = false>
  void apply(const entry*, const T* x, T* y) const noexcept {
    copy_row(x, y, d_);
  }
  index_t d_;
};

/// Rotation blocks in either pairing. Table row: C[half] | S[half] | w − 1 pad (both pairings;
/// on AVX2 float, interleaved, C and S by blocks of 8 in lane order: `lane_ordered`).
template <class Arch, class T>
struct l_kernel<Arch, lambda::rotation<T>> {
  using b = xsimd::batch<T, Arch>;
  static constexpr index_t w = static_cast<index_t>(b::size);
  static constexpr bool vectorised = true;
  static constexpr bool is_identity = false;
  using entry = T;

  /// `stepped`: see `cos_sin_rows`.
  explicit l_kernel(const lambda::rotation<T>& l, bool stepped = true)
      : rows_(l.frequencies().data(), static_cast<index_t>(l.frequencies().size()), stepped),
        half_(static_cast<index_t>(l.frequencies().size())),
        d_(l.dim()),
        interleaved_(l.pair_mode() == pairing::interleaved),
        lane_order_(lane_ordered && interleaved_) {}

  /// AVX2 float (not AVX-512), interleaved pairing: each full block of 8 cos (and 8 sin)
  /// entries of a table row is stored as (c0, c1, c4, c5, c2, c3, c6, c7), so that one load
  /// and an in-lane `unpacklo`/`unpackhi` with itself give the duplicated c of two
  /// consecutive vectors of x — (c0, c0, …, c3, c3) and (c4, c4, …, c7, c7) — where the
  /// natural order took a 128-bit broadcast load and a `vpermilps` per vector.
  static constexpr bool lane_ordered = lane_ordered_rotation_v<Arch, T>;
  /// Keeps table rows in natural order (a caller that reads C | S as contiguous vectors: the
  /// odd-even fold of Types 5/6).
  void natural_order() noexcept { lane_order_ = false; }

  /// The interleaved apply loads w table entries from C + i/2 and S + i/2 (using w/2): pad.
  /// Lane-ordered rows are padded to whole 64-byte lines, so that their 32-byte blocks (table
  /// rows 64-byte aligned, in the workspace) never split a line.
  [[nodiscard]] index_t table_width() const noexcept {
    const index_t tw = 2 * half_ + w - 1;
    return lane_order_ ? (tw + 15) / 16 * 16 : tw;
  }
  [[nodiscard]] index_t angle_count() const noexcept { return half_; }
  /// Every full-vector store of `apply` is aligned when y is (split-half: when half is a multiple of w).
  [[nodiscard]] bool stream_layout_ok() const noexcept { return interleaved_ || half_ % w == 0; }

  /// The table row of position s (scratch c, sn: angle_count() doubles each).
  void fill(position_t s, entry* row, double* c, double* sn) const noexcept {
    rows_.fill(s, row, c, sn);
    pad(row);
  }
  /// Rows of the m consecutive positions s0, s0 + 1, … (m ≤ cos_sin_rows::run).
  void fill_run(position_t s0, index_t m, entry* table, index_t stride, double* c, double* sn) const noexcept {
    rows_.fill_run(s0, m, table, stride, c, sn);
    for (index_t j = 0; j < m; ++j) pad(table + j * stride);
  }

  template <bool Stream = false>
  void apply(const entry* row, const T* x, T* y) const noexcept {
    const identity_map<Arch, T> map;
    if (interleaved_) rotate_interleaved<Stream>(row, x, y, map, {});
    else rotate_split<Stream>(row, x, y, map, {});
    copy_row(x + 2 * half_, y + 2 * half_, d_ - 2 * half_);
  }

  /// `apply` on m rows (x, y rows `xs`, `ys` apart; table rows `tw` apart): the pairing is
  /// decided once per block, not per row. With a row `map`, Λ(P x) for P = the map's P.
  template <bool Stream = false, class Map = identity_map<Arch, T>>
  void apply_rows(const entry* table, index_t tw, const T* x, index_t xs, T* y, index_t ys, index_t m,
                  const Map& map = {}) const noexcept {
    const index_t e = 2 * half_;
    if constexpr (Map::trivial) {
      if (interleaved_) {
        for (index_t r = 0; r < m; ++r) rotate_interleaved<Stream>(table + r * tw, x + r * xs, y + r * ys, map, {});
      } else {
        for (index_t r = 0; r < m; ++r) rotate_split<Stream>(table + r * tw, x + r * xs, y + r * ys, map, {});
      }
      if (e < d_)
        for (index_t r = 0; r < m; ++r) copy_row(x + r * xs + e, y + r * ys + e, d_ - e);
    } else {
      if (interleaved_) {
        if (rotate_rows_reflected_avx512<Stream, Arch>(Arch{}, map, shape(), table, tw, x, xs, y, ys, m)) return;
        if (rotate_rows_mapped_avx2<Stream, Arch>(Arch{}, map, shape(), table, tw, x, xs, y, ys, m)) return;
      }
      for_each_mapped_row(map, x, xs, d_, m, [&](index_t r, const typename Map::row_state& st) LRPE_ALWAYS_INLINE_LAMBDA {
        const T* xr = x + r * xs;
        T* yr = y + r * ys;
        if (interleaved_) rotate_interleaved<Stream>(table + r * tw, xr, yr, map, st);
        else rotate_split<Stream>(table + r * tw, xr, yr, map, st);
        map_copy(map, st, xr, yr, e, d_);
      });
    }
  }

  /**
   * `apply_rows` on rows stored as S (`lrpe::half`, `lrpe::bfloat16`; T = float): each vector
   * widened as it is loaded and rounded once as it is stored, in one pass. The arithmetic is
   * the float rows' (the portable loops), so each output is the float call's on the widened
   * row, rounded. Table rows in natural order (`natural_order()`).
   */
  template <half_precision S>
    requires std::same_as<T, float>
  void apply_rows_stored(const entry* table, index_t tw, const S* x, index_t xs, S* y, index_t ys,
                         index_t m) const noexcept {
    const identity_map<Arch, T> map;
    const index_t e = 2 * half_;
    for (index_t r = 0; r < m; ++r) {
      const S* xr = x + r * xs;
      S* yr = y + r * ys;
      if (interleaved_) rotate_interleaved_loop<false>(table + r * tw, xr, yr, map, {}, 0);
      else rotate_split<false>(table + r * tw, xr, yr, map, {});
      std::copy(xr + e, xr + d_, yr + e);  // the pass-through features: the same bits
    }
  }

  /// True when `apply_rows_odd_even` runs for width d: interleaved pairs, d even, AVX-512 float
  /// or AVX2.
  [[nodiscard]] bool folds_odd_even(index_t d) const noexcept {
    constexpr bool folds = (avx512_kernels && std::is_same_v<T, float> && std::is_base_of_v<xsimd::avx512f, Arch>) ||
                           (avx2_fma_kernels && std::is_base_of_v<xsimd::avx2, Arch>);
    return folds && interleaved_ && d == d_ && d % 2 == 0;
  }

  /**
   * Λ(Px) for P = the odd-even permutation (out[2k] = x[k], out[2k+1] = x[h+k], h = d/2) in one
   * pass, without forming Px: interleaved rotation of (x[k], x[h+k]) is split-half rotation of
   * the two halves with its outputs interleaved (one two-source permute per output vector,
   * instead of the gather of P plus the three shuffles of the interleaved kernel). Only where
   * `folds_odd_even(d)`.
   */
  template <bool Stream = false>
  void apply_rows_odd_even(const entry* table, index_t tw, const T* x, index_t xs, T* y, index_t ys,
                           index_t m) const noexcept {
    const index_t h = d_ / 2, e = 2 * half_;
    for (index_t r = 0; r < m; ++r) {
      const T* c = table + r * tw;
      const T* s = c + half_;
      const T* xa = x + r * xs;
      const T* xb = xa + h;
      T* out = y + r * ys;
      index_t k = rotate_odd_even_avx512<Stream, Arch>(Arch{}, c, s, xa, xb, out, 0, half_);
      k = rotate_odd_even_avx2<Stream, Arch>(Arch{}, c, s, xa, xb, out, k, half_);
      for (; k < half_; ++k) {
        const T a = xa[k], bb = xb[k];
        out[2 * k] = lrpe::detail::mul_add(a, c[k], -(bb * s[k]));
        out[2 * k + 1] = lrpe::detail::mul_add(bb, c[k], a * s[k]);
      }
      for (index_t j = e; j < d_; ++j) out[j] = (j % 2 == 0) ? xa[j / 2] : xb[j / 2];  // pass-through of Px
    }
  }

 private:
  template <bool Stream, class Map>
  LRPE_ALWAYS_INLINE void rotate_interleaved(const entry* row, const T* x, T* y, const Map& map,
                                             const typename Map::row_state& st) const noexcept {
    const index_t e = 2 * half_;
    const T* c = row;
    const T* s = row + half_;
    index_t i = rotate_interleaved_avx512<Stream, Arch>(Arch{}, c, s, x, y, 0, e, map, st);
    i = rotate_interleaved_avx2<Stream, Arch>(Arch{}, c, s, x, y, i, e, shape(), map, st);
    rotate_interleaved_loop<Stream>(row, x, y, map, st, i);
  }

  /// The portable loop of `rotate_interleaved` from feature i on (natural-order table row), on
  /// rows stored as X and Y (T, or 16 bits widened on load and rounded on store).
  template <bool Stream, class Map, class X, class Y>
  LRPE_ALWAYS_INLINE void rotate_interleaved_loop(const entry* row, const X* x, Y* y, const Map& map,
                                                  const typename Map::row_state& st, index_t i) const noexcept {
    const index_t e = 2 * half_;
    const T* c = row;
    const T* s = row + half_;
    // y_2k = x_2k c_k − x_2k+1 s_k, y_2k+1 = x_2k+1 c_k + x_2k s_k: the pair swap and the
    // duplication of c_k, s_k are in-register shuffles; the sign is one xor on the even lanes.
    const auto swap = xsimd::make_batch_constant<xsimd::batch<as_unsigned_t, Arch>, swap_pairs_mask>();
    const auto dup = xsimd::make_batch_constant<xsimd::batch<as_unsigned_t, Arch>, dup_lo_mask>();
    const xsimd::batch<as_unsigned_t, Arch> sign_bits =
        xsimd::make_batch_constant<xsimd::batch<as_unsigned_t, Arch>, even_sign_mask>();
    const b neg_even = xsimd::bitwise_cast<b>(sign_bits);
    for (; i + w <= e; i += w) {  // w is even: a vector never splits a pair
      const b xv = map.map(st, i, load_stored<Arch>(x + i));
      const b xs = xsimd::swizzle(xv, swap);
      const b cv = xsimd::swizzle(b::load_unaligned(c + i / 2), dup);
      const b sv = xsimd::swizzle(b::load_unaligned(s + i / 2), dup);
      const b out = compat::fma(xv, cv, (xs * sv) ^ neg_even);
      if constexpr (std::is_same_v<Y, T>) store<Stream>(out, y + i);
      else store_stored<Arch>(y + i, out);
    }
    for (; i < e; i += 2) {
      const T a = map.map1(st, i, widen(x[i])), bb = map.map1(st, i + 1, widen(x[i + 1])), ck = c[i / 2], sk = s[i / 2];
      y[i] = narrow<Y>(lrpe::detail::mul_add(a, ck, -(bb * sk)));
      y[i + 1] = narrow<Y>(lrpe::detail::mul_add(bb, ck, a * sk));
    }
  }

  /// Split-half rotation of one row stored as X into Y (T, or 16 bits widened on load and
  /// rounded on store).
  template <bool Stream, class Map, class X, class Y>
  LRPE_ALWAYS_INLINE void rotate_split(const entry* row, const X* x, Y* y, const Map& map,
                                       const typename Map::row_state& st) const noexcept {
    const T* c = row;
    const T* s = row + half_;
    const X* xa = x;
    const X* xb = x + half_;
    Y* ya = y;
    Y* yb = y + half_;
    index_t k = 0;
    for (; k + w <= half_; k += w) {
      const b a = map.map(st, k, load_stored<Arch>(xa + k)), bb = map.map(st, half_ + k, load_stored<Arch>(xb + k));
      const b cv = b::load_unaligned(c + k), sv = b::load_unaligned(s + k);
      if constexpr (std::is_same_v<Y, T>) {
        store<Stream>(compat::fms(a, cv, bb * sv), ya + k);
        store<Stream>(compat::fma(bb, cv, a * sv), yb + k);
      } else {
        store_stored<Arch>(ya + k, compat::fms(a, cv, bb * sv));
        store_stored<Arch>(yb + k, compat::fma(bb, cv, a * sv));
      }
    }
    for (; k < half_; ++k) {
      const T a = map.map1(st, k, widen(xa[k])), bb = map.map1(st, half_ + k, widen(xb[k]));
      ya[k] = narrow<Y>(lrpe::detail::mul_add(a, c[k], -(bb * s[k])));
      yb[k] = narrow<Y>(lrpe::detail::mul_add(bb, c[k], a * s[k]));
    }
  }

 public:
  using as_unsigned_t = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  /// Sign bit set on even lanes.
  struct even_sign_mask {
    static constexpr as_unsigned_t get(unsigned i, unsigned) {
      return (i % 2 == 0) ? as_unsigned_t{1} << (8 * sizeof(T) - 1) : as_unsigned_t{0};
    }
  };

 private:
  void pad(entry* row) const noexcept {
    for (index_t k = 2 * half_; k < table_width(); ++k) row[k] = T(0);
    if constexpr (lane_ordered) {
      if (lane_order_) lane_order_row(Arch{}, row, half_);
    }
  }
  [[nodiscard]] rotation_shape shape() const noexcept { return {half_, d_, lane_order_}; }

  cos_sin_rows<Arch, T> rows_;
  index_t half_, d_;
  bool interleaved_;
  bool lane_order_;  ///< `lane_ordered` and interleaved, unless `natural_order()`
};

/// Complex phases after a real P ("LRPE cosine" when P = I): Re = x·cos, Im = x·sin.
/// Table row: C[e] | S[e] (the layout encode_dft.hpp's phase step reads too).
template <class Arch, class T>
struct l_kernel<Arch, lambda::complex_phase<T>> {
  using b = xsimd::batch<T, Arch>;
  static constexpr index_t w = static_cast<index_t>(b::size);
  static constexpr bool vectorised = true;
  static constexpr bool is_identity = false;
  using entry = T;

  /// `stepped`: see `cos_sin_rows`.
  explicit l_kernel(const lambda::complex_phase<T>& l, bool stepped = true)
      : rows_(l.frequencies().data(), static_cast<index_t>(l.frequencies().size()), stepped),
        e_(static_cast<index_t>(l.frequencies().size())),
        d_(l.dim()) {}

  [[nodiscard]] index_t table_width() const noexcept { return 2 * e_; }
  [[nodiscard]] index_t angle_count() const noexcept { return e_; }
  [[nodiscard]] bool stream_layout_ok() const noexcept { return d_ % w == 0; }

  void fill(position_t s, entry* row, double* c, double* sn) const noexcept { rows_.fill(s, row, c, sn); }
  void fill_run(position_t s0, index_t m, entry* table, index_t stride, double* c, double* sn) const noexcept {
    rows_.fill_run(s0, m, table, stride, c, sn);
  }

  /// x: d real features; y: 2d features [Re, Im].
  template <bool Stream = false>
  void apply(const entry* row, const T* x, T* y) const noexcept {
    const T* c = row;
    const T* s = row + e_;
    T* re = y;
    T* im = y + d_;
    index_t k = 0;
    for (; k + w <= e_; k += w) {
      const b xv = b::load_unaligned(x + k);
      store<Stream>(xv * b::load_unaligned(c + k), re + k);
      store<Stream>(xv * b::load_unaligned(s + k), im + k);
    }
    for (; k < e_; ++k) {
      re[k] = x[k] * c[k];
      im[k] = x[k] * s[k];
    }
    for (k = e_; k < d_; ++k) {
      re[k] = x[k];
      im[k] = T(0);
    }
  }

  cos_sin_rows<Arch, T> rows_;
  index_t e_, d_;
};

/// Powers of a permutation: per position the index row π^s(·), per row one `permute_row`, or
/// on AVX/AVX2 the rows of one position in w matrices by one `permute_tile` (`apply_tiles`).
template <class Arch, class T>
struct l_kernel<Arch, lambda::permutation_power<T>> {
  using b = xsimd::batch<T, Arch>;
  using entry = index_of_t<T>;
  using ib = xsimd::batch<entry, Arch>;
  static constexpr index_t w = static_cast<index_t>(b::size);
  static constexpr bool vectorised = true;
  static constexpr bool is_identity = false;

  explicit l_kernel(const lambda::permutation_power<T>& l) : d_(l.dim()) {
    // Cycles of π, listed j0, π(j0), π²(j0), … so that π^s(cyc[p]) = cyc[(p + s) mod len].
    const auto pi = l.indices();
    std::vector<char> seen(static_cast<std::size_t>(d_), 0);
    elems_.reserve(static_cast<std::size_t>(d_));
    for (index_t j0 = 0; j0 < d_; ++j0) {
      if (seen[static_cast<std::size_t>(j0)]) continue;
      starts_.push_back(static_cast<index_t>(elems_.size()));
      index_t j = j0;
      do {
        seen[static_cast<std::size_t>(j)] = 1;
        elems_.push_back(static_cast<entry>(j));
        j = pi[static_cast<std::size_t>(j)];
      } while (j != j0);
    }
    starts_.push_back(static_cast<index_t>(elems_.size()));
    pi_.assign(pi.begin(), pi.end());
    if (d_ <= byte_permute_max_d) {  // π in bytes for `lookup_bytes`, padded to whole 16s
      pi_bytes_.assign(static_cast<std::size_t>((d_ + 15) / 16 * 16), 0);
      for (index_t j = 0; j < d_; ++j) pi_bytes_[static_cast<std::size_t>(j)] = static_cast<std::uint8_t>(pi[static_cast<std::size_t>(j)]);
    }
  }

  [[nodiscard]] index_t table_width() const noexcept { return d_; }
  [[nodiscard]] index_t angle_count() const noexcept { return 0; }

  /// Rows of π^s for the consecutive positions s0, s0 + 1, …: the first from the cycles, each
  /// next one as π^{s+1}(j) = π(π^s(j)), a register permute of π's entries by the row before
  /// (exact: integers moved, never computed).
  /// Entries are `entry`, or bytes where `bytes_ok()` (the next rows by `lookup_bytes`).
  template <class E>
  void fill_run(position_t s0, index_t count, E* table, index_t tw, double* c, double* s) const noexcept {
    fill(s0, table, c, s);
    for (index_t r = 1; r < count; ++r) next_power(table + (r - 1) * tw, table + r * tw);
  }

  /// next[j] = π(prev[j]) in bytes.
  void next_power(const std::uint8_t* prev, std::uint8_t* next) const noexcept {
    lookup_bytes<Arch>(pi_bytes_.data(), d_, prev, next, d_);
  }

  /// next[j] = π(prev[j]).
  void next_power(const entry* prev, entry* next) const noexcept {
    if (next_power_avx512<T>(Arch{}, pi_.data(), prev, next, d_)) return;
    for (index_t j = 0; j < d_; ++j) next[j] = pi_[static_cast<std::size_t>(prev[j])];
  }

  template <class E>
  void fill(position_t s, E* row, double*, double*) const noexcept {
    const index_t cycles = static_cast<index_t>(starts_.size()) - 1;
    for (index_t c = 0; c < cycles; ++c) {
      const index_t start = starts_[static_cast<std::size_t>(c)];
      const index_t len = starts_[static_cast<std::size_t>(c) + 1] - start;
      const entry* cyc = elems_.data() + start;
      auto src = static_cast<index_t>(s % static_cast<position_t>(len));
      if (src < 0) src += len;
      // row[cyc[p]] = cyc[(p + src) mod len] as two straight runs: a wrap test per element
      // mispredicts at a position-dependent point (bench/results/tuning.md#cycle-fill-runs).
      const index_t head = len - src;
      for (index_t p = 0; p < head; ++p) row[cyc[p]] = static_cast<E>(cyc[src + p]);
      for (index_t p = head; p < len; ++p) row[cyc[p]] = static_cast<E>(cyc[p - head]);
    }
  }

  [[nodiscard]] bool stream_layout_ok() const noexcept { return true; }

  template <bool Stream = false>
  void apply(const entry* row, const T* x, T* y) const noexcept {
    permute_row<Stream, Arch>(x, row, y, d_);
  }
  /// `apply` on m rows (x, y rows `xs`, `ys` apart; table rows `tw` apart); with a row `map`,
  /// Λ(P x) for P = the map's P.
  template <bool Stream = false, class Map = identity_map<Arch, T>>
  void apply_rows(const entry* table, index_t tw, const T* x, index_t xs, T* y, index_t ys, index_t m,
                  const Map& map = {}) const noexcept {
    if constexpr (Map::trivial) {
      for (index_t r = 0; r < m; ++r) permute_row<Stream, Arch>(x + r * xs, table + r * tw, y + r * ys, d_);
    } else {
      if (permute_rows_reflected_avx512<Stream, Arch, T>(Arch{}, map, table, tw, x, xs, y, ys, m, d_)) return;
      for_each_mapped_row(map, x, xs, d_, m, [&](index_t r, const typename Map::row_state& st) LRPE_ALWAYS_INLINE_LAMBDA {
        permute_row<Stream, Arch>(x + r * xs, table + r * tw, y + r * ys, d_, map, st);
      });
    }
  }

  /// `apply_rows` with the table rows in bytes (requires `bytes_ok()`): each row by
  /// `permute_row_bytes`, inputs prefetched `byte_prefetch_rows` ahead. No row map: Type 4's
  /// mapped rows measured slower this way than by `permute_row`, and keep it
  /// (bench/results/tuning.md#byte-permute-no-row-map).
  template <bool Stream = false>
  void apply_rows(const std::uint8_t* table, index_t tw, const T* x, index_t xs, T* y, index_t ys,
                  index_t m) const noexcept {
    for (index_t r = 0; r < m; ++r) {
      if (r + byte_prefetch_rows < m) prefetch_row(x + (r + byte_prefetch_rows) * xs, d_);
      permute_row_bytes<Stream, Arch>(x + r * xs, table + r * tw, y + r * ys, d_);
    }
  }
  /// The byte-index `apply_rows` serves this width on Arch.
  [[nodiscard]] bool bytes_ok() const noexcept { return byte_permute_v<Arch> && d_ <= byte_permute_max_d; }
  /// Rows ahead whose input the byte-index `apply_rows` prefetches.
  static constexpr index_t byte_prefetch_rows = 8;

  /**
   * Rows [0, m) of w matrices at the same positions, by `permute_tile` (AVX/AVX2): matrix i's
   * row r (x[i] + r·xs[i] → y[i] + r·ys[i]) takes table row r, so the w rows of one position
   * share a permutation and are permuted together. With a Householder `map`, Λ(P x). Requires
   * `tiles_ok()`. Inputs are prefetched `tile_prefetch_rows` positions ahead. Stream: the
   * driver streams through here only when the w matrices' input rows lie close (encode.hpp,
   * `inputs_close`).
   */
  template <bool Stream = false, class Map = identity_map<Arch, T>>
  void apply_tiles(const entry* table, index_t tw, const T* const* x, const index_t* xs, T* const* y,
                   const index_t* ys, index_t m, const Map& map = {}) const noexcept {
    if constexpr (tile_permute_v<T, Arch>) {
      const T* v = nullptr;
      if constexpr (!Map::trivial) v = map.reflector();
      const T* xr[w];
      T* yr[w];
      for (index_t r = 0; r < m; ++r) {
        for (index_t i = 0; i < w; ++i) {
          xr[i] = x[i] + r * xs[i];
          yr[i] = y[i] + r * ys[i];
          if (r + tile_prefetch_rows < m) prefetch_row(xr[i] + tile_prefetch_rows * xs[i], d_);
        }
        permute_tile<Stream, !Map::trivial, Arch>(xr, yr, table + r * tw, d_, v);
      }
    }
  }
  /// `apply_tiles` serves this width.
  [[nodiscard]] bool tiles_ok() const noexcept { return tile_permute_ok<T, Arch>(d_); }
  /// Positions ahead whose rows `apply_tiles` prefetches (4 positions of w matrices: 32 rows
  /// in float, 16 in double).
  static constexpr index_t tile_prefetch_rows = 4;

  index_t d_;
  std::vector<entry> elems_;
  std::vector<index_t> starts_;
  std::vector<entry> pi_;  ///< π itself, for `next_power`
  std::vector<std::uint8_t> pi_bytes_;  ///< π in bytes, zero-padded to whole 16s (d ≤ 256)
};

}  // namespace simd_detail
}  // namespace backend
}  // namespace v0
}  // namespace lrpe
