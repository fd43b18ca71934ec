// SPDX-License-Identifier: MIT
/**
 * @file primitives.hpp
 * The pieces a canonical term is built from: q̂ / k̂ maps and W_{t−s} operators.
 *
 * A canonical term (canonical_form.hpp) scores a pair as Re(q̂(q_s)ᴴ W_{t−s} k̂(k_t)). Positions
 * enter only through W, which depends on the offset δ = t − s alone (a Toeplitz operator);
 * the maps are position-free. W is an operator: `apply(δ, k̂, out)` computes W_δ k̂ without
 * forming W, and `dense(δ)` materialises it for inspection and tests.
 *
 * | map | q̂ or k̂ | width |
 * |---|---|---|
 * | `identity_map` | x | d |
 * | `shift_map` | x + u (Transformer-XL's u, v) | d |
 * | `one_map` | 1 (the constant side of a bias or rank-one term) | 1 |
 *
 * | operator | W_δ | shape |
 * |---|---|---|
 * | `identity_op` | I | d×d |
 * | `scalar_op` | w(δ)·I (Toeplitz scalar: cosFormer) | d×d |
 * | `column_op` | a(δ), a column (Shaw a^K, DeBERTa c2p, XL W_R R) | d×1 |
 * | `row_op` | a(δ)ᵀ, a row (DeBERTa p2c) | 1×d |
 * | `bias_op` | b(δ) (T5, ALiBi, learned table) | 1×1 |
 * | `lrpe_op` | Pᴴ Λ⁽δ⁾ P of any `lrpe::encoder` (complex for complex encoders) | d×d |
 */
#pragma once

#include <lrpe/core/concepts.hpp>
#include <lrpe/core/error.hpp>
#include <lrpe/core/traits.hpp>
#include <lrpe/detail/small_buffer.hpp>

#include <algorithm>
#include <complex>
#include <concepts>
#include <utility>

namespace lrpe {
inline namespace v0 {
namespace canonical {

/**
 * A q̂ or k̂ map: a position-free map from a real row of width `in_dim()` to a real row of
 * width `out_dim()`: `apply(x, y)` (no aliasing).
 */
template <class M>
concept qk_map = real_scalar<typename M::scalar> &&
                 requires(const M& m, const typename M::scalar* x, typename M::scalar* y) {
                   { m.in_dim() } -> std::convertible_to<index_t>;
                   { m.out_dim() } -> std::convertible_to<index_t>;
                   m.apply(x, y);
                 };

/**
 * A W_{t−s} operator of shape `rows()`×`cols()` with entries `value_type` (real or complex):
 * `apply(δ, k̂, out)` writes W_δ k̂ (rows() elements, no aliasing); `dense(δ)` returns W_δ.
 */
template <class W>
concept w_operator =
    real_scalar<typename W::scalar> &&
    requires(const W& w, position_t delta, const typename W::scalar* k, typename W::value_type* out) {
      { w.rows() } -> std::convertible_to<index_t>;
      { w.cols() } -> std::convertible_to<index_t>;
      w.apply(delta, k, out);
      { w.dense(delta) } -> std::convertible_to<dense_matrix<typename W::value_type>>;
    };

// ------------------------------------------------------------------------------------ maps

/// q̂ = x (width d).
template <real_scalar T>
class identity_map {
 public:
  using scalar = T;
  explicit identity_map(index_t d) : d_(d) {
    detail::require_shape(d >= 1, "lrpe::canonical::identity_map", "d", "must be >= 1", d);
  }
  [[nodiscard]] index_t in_dim() const noexcept { return d_; }
  [[nodiscard]] index_t out_dim() const noexcept { return d_; }
  void apply(const T* x, T* y) const noexcept { std::copy(x, x + d_, y); }

 private:
  index_t d_;
};

/// q̂ = x + u (Transformer-XL's global content bias u and position bias v).
template <real_scalar T>
class shift_map {
 public:
  using scalar = T;
  explicit shift_map(dense_vector<T> u) : u_(std::move(u)) {
    detail::require_shape(u_.size() >= 1, "lrpe::canonical::shift_map", "u.size()", "must be >= 1", u_.size());
  }
  [[nodiscard]] index_t in_dim() const noexcept { return u_.size(); }
  [[nodiscard]] index_t out_dim() const noexcept { return u_.size(); }
  [[nodiscard]] const dense_vector<T>& shift() const noexcept { return u_; }
  void apply(const T* x, T* y) const noexcept {
    for (index_t i = 0; i < u_.size(); ++i) y[i] = x[i] + u_[i];
  }

 private:
  dense_vector<T> u_;
};

/// q̂ = 1 (width 1): the constant side of a bias or rank-one term.
template <real_scalar T>
class one_map {
 public:
  using scalar = T;
  explicit one_map(index_t d) : d_(d) {
    detail::require_shape(d >= 1, "lrpe::canonical::one_map", "d", "must be >= 1", d);
  }
  [[nodiscard]] index_t in_dim() const noexcept { return d_; }
  [[nodiscard]] static constexpr index_t out_dim() noexcept { return 1; }
  void apply(const T*, T* y) const noexcept { y[0] = T(1); }

 private:
  index_t d_;
};

// ------------------------------------------------------------------------------- operators

/// W_δ = I (d×d): the content term q·k.
template <real_scalar T>
class identity_op {
 public:
  using scalar = T;
  using value_type = T;
  explicit identity_op(index_t d) : d_(d) {
    detail::require_shape(d >= 1, "lrpe::canonical::identity_op", "d", "must be >= 1", d);
  }
  [[nodiscard]] index_t rows() const noexcept { return d_; }
  [[nodiscard]] index_t cols() const noexcept { return d_; }
  void apply(position_t, const T* k, T* out) const noexcept { std::copy(k, k + d_, out); }
  [[nodiscard]] dense_matrix<T> dense(position_t) const { return dense_matrix<T>::Identity(d_, d_); }

 private:
  index_t d_;
};

/**
 * W_δ = w(δ)·I (d×d), a Toeplitz scalar times the identity (cosFormer's cos(πδ/(2M))).
 * @tparam F callable `double(position_t δ)`.
 */
template <real_scalar T, class F>
class scalar_op {
 public:
  using scalar = T;
  using value_type = T;
  scalar_op(index_t d, F w) : d_(d), w_(std::move(w)) {
    detail::require_shape(d >= 1, "lrpe::canonical::scalar_op", "d", "must be >= 1", d);
  }
  [[nodiscard]] index_t rows() const noexcept { return d_; }
  [[nodiscard]] index_t cols() const noexcept { return d_; }
  [[nodiscard]] double weight(position_t delta) const { return w_(delta); }
  void apply(position_t delta, const T* k, T* out) const {
    const auto w = static_cast<T>(w_(delta));
    for (index_t i = 0; i < d_; ++i) out[i] = w * k[i];
  }
  [[nodiscard]] dense_matrix<T> dense(position_t delta) const {
    return dense_matrix<T>::Identity(d_, d_) * static_cast<T>(w_(delta));
  }

 private:
  index_t d_;
  F w_;
};

/**
 * W_δ = a(δ), a d×1 column: paired with q̂ = q and k̂ = 1 it scores q·a(δ) (Shaw's key term,
 * DeBERTa's c2p, Transformer-XL's position term).
 * @tparam F callable `void(position_t δ, T* a)` writing the d entries of a(δ).
 */
template <real_scalar T, class F>
class column_op {
 public:
  using scalar = T;
  using value_type = T;
  column_op(index_t d, F a) : d_(d), a_(std::move(a)) {
    detail::require_shape(d >= 1, "lrpe::canonical::column_op", "d", "must be >= 1", d);
  }
  [[nodiscard]] index_t rows() const noexcept { return d_; }
  [[nodiscard]] static constexpr index_t cols() noexcept { return 1; }
  void apply(position_t delta, const T* k, T* out) const {
    a_(delta, out);
    for (index_t i = 0; i < d_; ++i) out[i] *= k[0];
  }
  [[nodiscard]] dense_matrix<T> dense(position_t delta) const {
    dense_matrix<T> m(d_, 1);
    a_(delta, m.data());
    return m;
  }

 private:
  index_t d_;
  F a_;
};

/**
 * W_δ = diag(a(δ)), d×d: paired with q̂ = q and k̂ = k it scores Σ_i q_i a_i(δ) k_i, the
 * three-vector "sum-product" of Huang et al. 2020.
 * @tparam F callable `void(position_t δ, T* a)` writing the d entries of a(δ).
 */
template <real_scalar T, class F>
class diag_op {
 public:
  using scalar = T;
  using value_type = T;
  diag_op(index_t d, F a) : d_(d), a_(std::move(a)) {
    detail::require_shape(d >= 1, "lrpe::canonical::diag_op", "d", "must be >= 1", d);
  }
  [[nodiscard]] index_t rows() const noexcept { return d_; }
  [[nodiscard]] index_t cols() const noexcept { return d_; }
  void apply(position_t delta, const T* k, T* out) const {
    a_(delta, out);
    for (index_t i = 0; i < d_; ++i) out[i] *= k[i];
  }
  [[nodiscard]] dense_matrix<T> dense(position_t delta) const {
    detail::small_buffer<T> a(d_);
    a_(delta, a.data());
    dense_matrix<T> m = dense_matrix<T>::Zero(d_, d_);
    for (index_t i = 0; i < d_; ++i) m(i, i) = a[i];
    return m;
  }

 private:
  index_t d_;
  F a_;
};

/**
 * W_δ = a(δ)ᵀ, a 1×d row: paired with q̂ = 1 and k̂ = k it scores a(δ)·k (DeBERTa's p2c).
 * @tparam F callable `void(position_t δ, T* a)` writing the d entries of a(δ).
 */
template <real_scalar T, class F>
class row_op {
 public:
  using scalar = T;
  using value_type = T;
  row_op(index_t d, F a) : d_(d), a_(std::move(a)) {
    detail::require_shape(d >= 1, "lrpe::canonical::row_op", "d", "must be >= 1", d);
  }
  [[nodiscard]] static constexpr index_t rows() noexcept { return 1; }
  [[nodiscard]] index_t cols() const noexcept { return d_; }
  void apply(position_t delta, const T* k, T* out) const {
    detail::small_buffer<T> a(d_);
    a_(delta, a.data());
    double acc = 0;
    for (index_t i = 0; i < d_; ++i) acc += static_cast<double>(a[i]) * static_cast<double>(k[i]);
    out[0] = static_cast<T>(acc);
  }
  [[nodiscard]] dense_matrix<T> dense(position_t delta) const {
    dense_matrix<T> m(1, d_);
    detail::small_buffer<T> a(d_);
    a_(delta, a.data());
    for (index_t i = 0; i < d_; ++i) m(0, i) = a[i];
    return m;
  }

 private:
  index_t d_;
  F a_;
};

/**
 * W_δ = b(δ), 1×1: paired with q̂ = k̂ = 1 it is an additive scalar bias (T5, ALiBi, tables).
 * @tparam F callable `double(position_t δ)`.
 */
template <real_scalar T, class F>
class bias_op {
 public:
  using scalar = T;
  using value_type = T;
  explicit bias_op(F b) : b_(std::move(b)) {}
  [[nodiscard]] static constexpr index_t rows() noexcept { return 1; }
  [[nodiscard]] static constexpr index_t cols() noexcept { return 1; }
  [[nodiscard]] double bias(position_t delta) const { return b_(delta); }
  void apply(position_t delta, const T* k, T* out) const { out[0] = static_cast<T>(b_(delta)) * k[0]; }
  [[nodiscard]] dense_matrix<T> dense(position_t delta) const {
    return dense_matrix<T>::Constant(1, 1, static_cast<T>(b_(delta)));
  }

 private:
  F b_;
};

/**
 * W_δ = Pᴴ Λ⁽δ⁾ P, the relative matrix of an LRPE encoder, applied as three factors (P, Λ⁽δ⁾,
 * Pᴴ) without forming it. `value_type` is complex for complex encoders (Type 8, complex phase).
 * @tparam E an `lrpe::encoder<P, L>` or a preset derived from one.
 */
template <class E>
class lrpe_op {
 public:
  using encoder_type = E;
  using scalar = typename E::scalar;
  using value_type = typename E::value_type;

  explicit lrpe_op(E e) : e_(std::move(e)) {}
  [[nodiscard]] const E& encoder() const noexcept { return e_; }
  [[nodiscard]] index_t rows() const noexcept { return e_.dim(); }
  [[nodiscard]] index_t cols() const noexcept { return e_.dim(); }

  void apply(position_t delta, const scalar* k, value_type* out) const {
    using P = typename E::p_type;
    using L = typename E::lambda_type;
    using PO = typename P::output_type;
    const index_t d = e_.dim();
    detail::small_buffer<PO> pk(d);
    e_.p().apply(k, pk.data());
    detail::small_buffer<value_type> lk(d);
    if constexpr (L::is_complex && !P::is_complex) {  // real P, complex Λ: lift to complex
      detail::small_buffer<value_type> lifted(d);
      for (index_t i = 0; i < d; ++i) lifted[i] = value_type(pk[i], scalar(0));
      e_.lambda().apply(delta, lifted.data(), lk.data());
    } else {
      e_.lambda().apply(delta, pk.data(), lk.data());
    }
    if constexpr (std::is_same_v<PO, value_type>) {
      e_.p().apply_adjoint(lk.data(), out);
    } else if constexpr (requires(const P& p, const value_type* y, value_type* x) { p.apply_adjoint(y, x); }) {
      e_.p().apply_adjoint(lk.data(), out);
    } else {  // real P, complex rows: Pᴴ acts on the real and imaginary parts separately
      detail::small_buffer<scalar> re(d), im(d), re_out(d), im_out(d);
      for (index_t i = 0; i < d; ++i) { re[i] = lk[i].real(); im[i] = lk[i].imag(); }
      e_.p().apply_adjoint(re.data(), re_out.data());
      e_.p().apply_adjoint(im.data(), im_out.data());
      for (index_t i = 0; i < d; ++i) out[i] = value_type(re_out[i], im_out[i]);
    }
  }

  [[nodiscard]] dense_matrix<value_type> dense(position_t delta) const { return e_.relative_matrix(delta); }

 private:
  E e_;
};

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
