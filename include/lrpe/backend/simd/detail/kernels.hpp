/**
 * @file kernels.hpp
 * Internal: the SIMD kernels of each P and Λ policy, one row at a time (docs/backends.md).
 *
 * A P kernel maps a real row to a real row (y = P x). A Λ kernel splits Λ⁽ˢ⁾ into a per-position
 * table (`fill`: cos/sin of s·θ in double, or the gather indices of π^s) and a per-row `apply`
 * that reads one table row; the driver (encode.hpp) fills the table once per position and
 * reuses it for every head, batch entry, and for Q and K. Tables are laid out so that `apply`
 * is a straight-line pass of full vectors over the row plus a scalar tail:
 *
 * | Λ | table row (T unless noted) | apply |
 * |---|---|---|
 * | rotation, interleaved | C₂[e] = (c₀,c₀,c₁,c₁,…), S₂[e] = (−s₀,s₀,−s₁,s₁,…) | y = x·C₂ + swap_pairs(x)·S₂ |
 * | rotation, split-half  | C[e/2], S[e/2] | y_a = a·C − b·S, y_b = b·C + a·S (two contiguous halves) |
 * | complex phase, real P | C[e], S[e] | Re = x·C, Im = x·S |
 * | permutation power     | idx[d] (int32 / int64) = π^s(j) | y = gather(x, idx) |
 * | identity              | none | copy |
 *
 * Primary templates are the fallbacks: a P without a kernel is applied by its own (scalar)
 * `apply`; a Λ without a kernel makes the whole encoder take the reference path.
 */
#pragma once

#include <lrpe/backend/simd/sincos.hpp>
#include <lrpe/backend/simd/xsimd_compat.hpp>
#include <lrpe/lambda/complex_phase.hpp>
#include <lrpe/lambda/identity.hpp>
#include <lrpe/lambda/permutation_power.hpp>
#include <lrpe/lambda/rotation.hpp>
#include <lrpe/p/dct.hpp>
#include <lrpe/p/dense.hpp>
#include <lrpe/p/householder.hpp>
#include <lrpe/p/identity.hpp>
#include <lrpe/p/permutation.hpp>

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

/// T has xsimd batches (float, double).
template <class T>
inline constexpr bool simd_scalar_v = std::is_same_v<T, float> || std::is_same_v<T, double>;

/// The signed integer of T's width: gather indices (int32 for float, int64 for double).
template <class T>
using index_of_t = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;

template <class T>
inline void copy_row(const T* x, T* y, index_t n) noexcept {
  if (n > 0) std::memcpy(y, x, static_cast<std::size_t>(n) * sizeof(T));
}

/// Generator of the pair-swap shuffle (0,1,2,3,…) → (1,0,3,2,…).
struct swap_pairs_mask {
  static constexpr unsigned get(unsigned i, unsigned) { return i ^ 1u; }
};

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
    b acc0(T(0)), acc1(T(0));
    index_t i = 0;
    for (; i + 2 * w <= d_; i += 2 * w) {
      acc0 = xsimd::fma(b::load_unaligned(x + i), b::load_unaligned(v_ + i), acc0);
      acc1 = xsimd::fma(b::load_unaligned(x + i + w), b::load_unaligned(v_ + i + w), acc1);
    }
    for (; i + w <= d_; i += w) acc0 = xsimd::fma(b::load_unaligned(x + i), b::load_unaligned(v_ + i), acc0);
    T dot = compat::reduce_add(acc0 + acc1);
    for (; i < d_; ++i) dot += x[i] * v_[i];
    const T m2 = T(-2) * dot;
    const b vm2(m2);
    i = 0;
    for (; i + w <= d_; i += w)
      xsimd::fma(vm2, b::load_unaligned(v_ + i), b::load_unaligned(x + i)).store_unaligned(y + i);
    for (; i < d_; ++i) y[i] = x[i] + m2 * v_[i];
  }
  const T* v_;
  index_t d_;
};

/// y[j] = x[π(j)] by vector gathers (p::permutation and p::odd_even).
template <class Arch, class T>
struct permutation_gather {
  using b = xsimd::batch<T, Arch>;
  using ib = xsimd::batch<index_of_t<T>, Arch>;
  static constexpr index_t w = static_cast<index_t>(b::size);
  static constexpr bool vectorised = true;
  static constexpr bool is_identity = false;
  explicit permutation_gather(std::span<const index_t> pi) : idx_(pi.begin(), pi.end()) {}
  void apply(const T* x, T* y) const noexcept {
    const index_t d = static_cast<index_t>(idx_.size());
    const index_of_t<T>* idx = idx_.data();
    index_t j = 0;
    for (; j + w <= d; j += w) compat::gather(x, ib::load_unaligned(idx + j)).store_unaligned(y + j);
    for (; j < d; ++j) y[j] = x[idx[j]];
  }
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
        a0 = xsimd::fma(xn, b::load_unaligned(col + n * d + i), a0);
        a1 = xsimd::fma(xn, b::load_unaligned(col + n * d + i + w), a1);
      }
      a0.store_unaligned(y + i);
      a1.store_unaligned(y + i + w);
    }
    for (; i + w <= d; i += w) {
      b a0(T(0));
      for (index_t n = 0; n < d; ++n) a0 = xsimd::fma(b(x[n]), b::load_unaligned(col + n * d + i), a0);
      a0.store_unaligned(y + i);
    }
    for (; i < d; ++i) {
      T acc = 0;
      for (index_t n = 0; n < d; ++n) acc += col[n * d + i] * x[n];
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

/// Fallback marker: no SIMD kernel for this Λ; the encoder takes the reference path.
template <class Arch, class L>
struct l_kernel {
  static constexpr bool vectorised = false;
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
  void fill(position_t, entry*, double*, double*) const noexcept {}
  void apply(const entry*, const T* x, T* y) const noexcept { copy_row(x, y, d_); }
  index_t d_;
};

/// Rotation blocks in either pairing.
template <class Arch, class T>
struct l_kernel<Arch, lambda::rotation<T>> {
  using b = xsimd::batch<T, Arch>;
  static constexpr index_t w = static_cast<index_t>(b::size);
  static constexpr bool vectorised = true;
  static constexpr bool is_identity = false;
  using entry = T;

  explicit l_kernel(const lambda::rotation<T>& l)
      : theta_(l.frequencies().data()),
        half_(static_cast<index_t>(l.frequencies().size())),
        d_(l.dim()),
        interleaved_(l.pair_mode() == pairing::interleaved) {}

  [[nodiscard]] index_t table_width() const noexcept { return interleaved_ ? 4 * half_ : 2 * half_; }
  [[nodiscard]] index_t angle_count() const noexcept { return half_; }

  /// The table row of position s (scratch c, sn: angle_count() doubles each).
  void fill(position_t s, entry* row, double* c, double* sn) const noexcept {
    angle_cos_sin<Arch>(s, theta_, half_, c, sn);
    if (interleaved_) {
      const index_t e = 2 * half_;
      for (index_t k = 0; k < half_; ++k) {
        const T ck = static_cast<T>(c[k]), sk = static_cast<T>(sn[k]);
        row[2 * k] = ck;
        row[2 * k + 1] = ck;
        row[e + 2 * k] = -sk;
        row[e + 2 * k + 1] = sk;
      }
    } else {
      for (index_t k = 0; k < half_; ++k) {
        row[k] = static_cast<T>(c[k]);
        row[half_ + k] = static_cast<T>(sn[k]);
      }
    }
  }

  void apply(const entry* row, const T* x, T* y) const noexcept {
    const index_t e = 2 * half_;
    if (interleaved_) {
      const T* c2 = row;
      const T* s2 = row + e;
      index_t i = 0;
      for (; i + w <= e; i += w) {  // w is even: a vector never splits a pair
        const b xv = b::load_unaligned(x + i);
        const b xs = xsimd::swizzle(xv, xsimd::make_batch_constant<xsimd::batch<as_unsigned_t, Arch>, swap_pairs_mask>());
        xsimd::fma(xv, b::load_unaligned(c2 + i), xs * b::load_unaligned(s2 + i)).store_unaligned(y + i);
      }
      for (; i < e; ++i) y[i] = x[i] * c2[i] + x[i ^ 1] * s2[i];
    } else {
      const T* c = row;
      const T* s = row + half_;
      const T* xa = x;
      const T* xb = x + half_;
      T* ya = y;
      T* yb = y + half_;
      index_t k = 0;
      for (; k + w <= half_; k += w) {
        const b a = b::load_unaligned(xa + k), bb = b::load_unaligned(xb + k);
        const b cv = b::load_unaligned(c + k), sv = b::load_unaligned(s + k);
        xsimd::fms(a, cv, bb * sv).store_unaligned(ya + k);
        xsimd::fma(bb, cv, a * sv).store_unaligned(yb + k);
      }
      for (; k < half_; ++k) {
        const T a = xa[k], bb = xb[k];
        ya[k] = a * c[k] - bb * s[k];
        yb[k] = bb * c[k] + a * s[k];
      }
    }
    copy_row(x + e, y + e, d_ - e);
  }

  using as_unsigned_t = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  const double* theta_;
  index_t half_, d_;
  bool interleaved_;
};

/// Complex phases after a real P ("LRPE cosine" when P = I): Re = x·cos, Im = x·sin.
template <class Arch, class T>
struct l_kernel<Arch, lambda::complex_phase<T>> {
  using b = xsimd::batch<T, Arch>;
  static constexpr index_t w = static_cast<index_t>(b::size);
  static constexpr bool vectorised = true;
  static constexpr bool is_identity = false;
  using entry = T;

  explicit l_kernel(const lambda::complex_phase<T>& l)
      : theta_(l.frequencies().data()), e_(static_cast<index_t>(l.frequencies().size())), d_(l.dim()) {}

  [[nodiscard]] index_t table_width() const noexcept { return 2 * e_; }
  [[nodiscard]] index_t angle_count() const noexcept { return e_; }

  void fill(position_t s, entry* row, double* c, double* sn) const noexcept {
    angle_cos_sin<Arch>(s, theta_, e_, c, sn);
    for (index_t k = 0; k < e_; ++k) {
      row[k] = static_cast<T>(c[k]);
      row[e_ + k] = static_cast<T>(sn[k]);
    }
  }

  /// x: d real features; y: 2d features [Re, Im].
  void apply(const entry* row, const T* x, T* y) const noexcept {
    const T* c = row;
    const T* s = row + e_;
    T* re = y;
    T* im = y + d_;
    index_t k = 0;
    for (; k + w <= e_; k += w) {
      const b xv = b::load_unaligned(x + k);
      (xv * b::load_unaligned(c + k)).store_unaligned(re + k);
      (xv * b::load_unaligned(s + k)).store_unaligned(im + k);
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

  const double* theta_;
  index_t e_, d_;
};

/// Powers of a permutation: per position the index row π^s(·), per row one gather pass.
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
  }

  [[nodiscard]] index_t table_width() const noexcept { return d_; }
  [[nodiscard]] index_t angle_count() const noexcept { return 0; }

  void fill(position_t s, entry* row, double*, double*) const noexcept {
    const index_t cycles = static_cast<index_t>(starts_.size()) - 1;
    for (index_t c = 0; c < cycles; ++c) {
      const index_t start = starts_[static_cast<std::size_t>(c)];
      const index_t len = starts_[static_cast<std::size_t>(c) + 1] - start;
      const entry* cyc = elems_.data() + start;
      auto src = static_cast<index_t>(s % static_cast<position_t>(len));
      if (src < 0) src += len;
      for (index_t p = 0; p < len; ++p) {
        row[cyc[p]] = cyc[src];
        if (++src == len) src = 0;
      }
    }
  }

  void apply(const entry* row, const T* x, T* y) const noexcept {
    index_t j = 0;
    for (; j + w <= d_; j += w) compat::gather(x, ib::load_unaligned(row + j)).store_unaligned(y + j);
    for (; j < d_; ++j) y[j] = x[row[j]];
  }

  index_t d_;
  std::vector<entry> elems_;
  std::vector<index_t> starts_;
};

}  // namespace simd_detail
}  // namespace backend
}  // namespace v0
}  // namespace lrpe
