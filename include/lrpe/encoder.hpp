// SPDX-License-Identifier: MIT
/**
 * @file encoder.hpp
 * `lrpe::encoder<P, L>`: an LRPE encoder composed at compile time from a P policy and a Λ policy.
 *
 * Math contract (docs/math.md):
 * - a row x at position s is encoded as x̃_s = M_s x with M_s = Λ⁽ˢ⁾ P (Pᴴ is never applied);
 * - the relative matrix is W_s = Pᴴ Λ⁽ˢ⁾ P, and Re(q̃_sᴴ k̃_t) = Re(q_sᴴ W_{t−s} k_t);
 * - W_0 = I, W_sᴴ W_s = I, W_sᴴ W_t = W_{t−s}; scores are shift invariant.
 *
 * A complex encoder (complex P or complex Λ) produces d complex features; its real view has
 * 2d features laid out [Re(x̃_0..x̃_{d−1}), Im(x̃_0..x̃_{d−1})], so that the plain dot product of
 * two real views is Re(q̃ᴴ k̃) and any real attention kernel computes the LRPE score exactly.
 */
#pragma once

#include <lrpe/core/concepts.hpp>
#include <lrpe/core/view.hpp>
#include <lrpe/detail/small_buffer.hpp>

#include <complex>
#include <type_traits>

namespace lrpe {
inline namespace v0 {

/**
 * An LRPE encoder M_s = Λ⁽ˢ⁾ P.
 * @tparam P a `p_policy`.
 * @tparam L a `lambda_policy` with the same scalar.
 */
template <p_policy P, lambda_policy L>
class encoder {
  static_assert(std::is_same_v<typename P::scalar, typename L::scalar>,
                "lrpe::encoder<P, L>: P and L must have the same scalar type (both float or both double)");

 public:
  using p_type = P;
  using lambda_type = L;
  using scalar = typename P::scalar;
  /// True when the features are complex (complex P or complex Λ).
  static constexpr bool is_complex = P::is_complex || L::is_complex;
  /// The element type of M_s x: `scalar` or `std::complex<scalar>`.
  using value_type = maybe_complex_t<scalar, is_complex>;

  static_assert(!P::is_complex || L::is_complex ||
                    requires(const L& l, position_t s, const std::complex<scalar>* x, std::complex<scalar>* y) {
                      l.apply(s, x, y);
                    },
                "lrpe::encoder<P, L>: P is complex, so L::apply must accept std::complex rows "
                "(make L::apply a template over the element type)");

  /// @throws shape_error if P and Λ have different widths.
  encoder(P p, L l) : p_(std::move(p)), l_(std::move(l)) {
    detail::require_shape(p_.dim() == l_.dim(), "lrpe::encoder", "lambda.dim()",
                          detail::lazy_concat("must equal p.dim() = ", p_.dim()), l_.dim());
  }

  [[nodiscard]] const P& p() const noexcept { return p_; }
  [[nodiscard]] const L& lambda() const noexcept { return l_; }

  /// d, the width of an input row.
  [[nodiscard]] index_t dim() const noexcept { return p_.dim(); }
  /// Width of the real features: d for real encoders, 2d for complex ones ([Re, Im]).
  [[nodiscard]] index_t feature_dim() const noexcept { return is_complex ? 2 * dim() : dim(); }

  /**
   * x̃ = M_s x for one row, in the native element type (complex for complex encoders).
   * @param s   the position.
   * @param x   d real inputs.
   * @param out d outputs; must not alias x.
   */
  void encode_row(position_t s, const scalar* x, value_type* out) const {
    const index_t d = dim();
    if constexpr (P::is_complex || !L::is_complex) {
      detail::small_buffer<typename P::output_type> tmp(d);
      p_.apply(x, tmp.data());
      l_.apply(s, tmp.data(), out);
    } else {  // real P, complex Λ: lift P x to complex first
      detail::small_buffer<scalar> tmp(d);
      p_.apply(x, tmp.data());
      detail::small_buffer<value_type> ctmp(d);
      for (index_t i = 0; i < d; ++i) ctmp[i] = value_type(tmp[i], scalar(0));
      l_.apply(s, ctmp.data(), out);
    }
  }

  /**
   * The real features of one row: M_s x itself for real encoders; [Re, Im] of M_s x for complex
   * ones. `out` has `feature_dim()` elements and must not alias x.
   */
  void encode_features(position_t s, const scalar* x, scalar* out) const {
    if constexpr (!is_complex) {
      encode_row(s, x, out);
    } else {
      const index_t d = dim();
      detail::small_buffer<value_type> y(d);
      encode_row(s, x, y.data());
      for (index_t i = 0; i < d; ++i) {
        out[i] = y[i].real();
        out[d + i] = y[i].imag();
      }
    }
  }

  /**
   * Encodes a block: row i of `out` gets the real features of row i of `x` at position `pos[i]`.
   * @param x   n×d rows (any row stride).
   * @param pos an offset (row i at offset + i) or an array of n positions.
   * @param out n×feature_dim() rows; must not overlap x.
   * @throws shape_error on mismatched sizes.
   */
  void encode(matrix_view<const scalar> x, positions pos, matrix_view<scalar> out) const {
    constexpr const char* where = "lrpe::encoder::encode";
    validate(x, where, "x");
    validate(out, where, "out");
    detail::require_equal(x.cols, dim(), where, "x.cols", "dim()");
    detail::require_equal(out.cols, feature_dim(), where, "out.cols", "feature_dim()");
    detail::require_equal(out.rows, x.rows, where, "out.rows", "x.rows");
    pos.require_rows(x.rows, where);
    for (index_t i = 0; i < x.rows; ++i) encode_features(pos[i], x.row(i), out.row(i));
  }

  /**
   * Encodes an Eigen block of rows and returns the n×feature_dim() real features (row-major).
   * Any Eigen expression is accepted; non-row-major inputs are evaluated into a row-major copy.
   */
  template <class Derived>
  [[nodiscard]] row_matrix<scalar> encode(const Eigen::MatrixBase<Derived>& x, positions pos) const {
    static_assert(std::is_same_v<typename Derived::Scalar, scalar>,
                  "lrpe::encoder::encode: the rows must have the encoder's scalar type");
    const row_matrix<scalar> rows = x;  // evaluates expressions; a copy for column-major input
    row_matrix<scalar> out(rows.rows(), feature_dim());
    encode(view(rows), pos, view(out));
    return out;
  }

  /// The native (complex for complex encoders) features of an n×d block, row-major.
  template <class Derived>
  [[nodiscard]] row_matrix<value_type> encode_native(const Eigen::MatrixBase<Derived>& x,
                                                     positions pos) const {
    constexpr const char* where = "lrpe::encoder::encode_native";
    const row_matrix<scalar> rows = x;
    detail::require_equal(rows.cols(), dim(), where, "x.cols", "dim()");
    pos.require_rows(rows.rows(), where);
    row_matrix<value_type> out(rows.rows(), dim());
    for (index_t i = 0; i < rows.rows(); ++i) encode_row(pos[i], rows.row(i).data(), out.row(i).data());
    return out;
  }

  /// The score Re(q̃_sᴴ k̃_t) = Re(q_sᴴ W_{t−s} k_t) of one pair (accumulated in double).
  [[nodiscard]] double score(const scalar* q, position_t s, const scalar* k, position_t t) const {
    const index_t f = feature_dim();
    detail::small_buffer<scalar> qf(f), kf(f);
    encode_features(s, q, qf.data());
    encode_features(t, k, kf.data());
    double acc = 0;
    for (index_t i = 0; i < f; ++i) acc += static_cast<double>(qf[i]) * static_cast<double>(kf[i]);
    return acc;
  }

  /// M_s = Λ⁽ˢ⁾ P as a dense d×d matrix.
  [[nodiscard]] dense_matrix<value_type> transform_matrix(position_t s) const {
    return lambda_dense(s) * p_dense();
  }

  /// W_s = Pᴴ Λ⁽ˢ⁾ P as a dense d×d matrix; W_{t−s} is `relative_matrix(t - s)`.
  [[nodiscard]] dense_matrix<value_type> relative_matrix(position_t s) const {
    const dense_matrix<value_type> p = p_dense();
    return p.adjoint() * lambda_dense(s) * p;
  }

 private:
  dense_matrix<value_type> p_dense() const { return p_.matrix().template cast<value_type>(); }
  dense_matrix<value_type> lambda_dense(position_t s) const {
    return l_.matrix(s).template cast<value_type>();
  }

  P p_;
  L l_;
};

/// Any `lrpe::encoder<P, L>`, presets included (what the backends' `encode` hooks take).
template <class E>
concept lrpe_encoder = requires {
  typename E::p_type;
  typename E::lambda_type;
  typename E::scalar;
} && std::is_base_of_v<encoder<typename E::p_type, typename E::lambda_type>, E>;

}  // namespace v0
}  // namespace lrpe
