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

#include <algorithm>
#include <complex>
#include <limits>
#include <type_traits>
#include <vector>

namespace lrpe {
inline namespace v0 {

/**
 * dL/d(parameters) of an encoder, added to by `encoder::backward`: P's parameters and Λ's, each
 * in its policy's order (`parameters()`), in double; empty for a policy without parameters.
 * `encoder::make_gradient()` returns one of the right sizes, zeroed.
 */
struct encoder_gradient {
  std::vector<double> p;       ///< P's: the Householder vector as given (unnormalised), a dense P's entries
  std::vector<double> lambda;  ///< Λ's: the frequencies θ of a rotation or a complex phase
  /// Every entry to zero (the sizes stay).
  void zero() noexcept {
    std::fill(p.begin(), p.end(), 0.0);
    std::fill(lambda.begin(), lambda.end(), 0.0);
  }
};

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

  static_assert(!has_parameters<P> || differentiable_p<P>,
                "lrpe::encoder<P, L>: P has parameter_count() but no accumulate_gradient(x, gy, grad) "
                "(lrpe::differentiable_p; docs/training.md)");
  static_assert(!has_parameters<L> || differentiable_lambda<L, value_type>,
                "lrpe::encoder<P, L>: L has parameter_count() but no accumulate_gradient(s, y, gy, grad) "
                "taking the encoder's rows (lrpe::differentiable_lambda; docs/training.md)");

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

  // ------------------------------------------------------------------------------- backward

  /// How many parameters P and Λ have (0 for a policy without parameters).
  [[nodiscard]] index_t p_parameter_count() const noexcept {
    if constexpr (has_parameters<P>) return p_.parameter_count(); else return 0;
  }
  [[nodiscard]] index_t lambda_parameter_count() const noexcept {
    if constexpr (has_parameters<L>) return l_.parameter_count(); else return 0;
  }
  /// A zeroed `encoder_gradient` of this encoder's sizes.
  [[nodiscard]] encoder_gradient make_gradient() const {
    return {std::vector<double>(static_cast<std::size_t>(p_parameter_count()), 0.0),
            std::vector<double>(static_cast<std::size_t>(lambda_parameter_count()), 0.0)};
  }

  /**
   * The backward (vector-Jacobian product) of `encode_features` for one row: given x, its
   * position s and g = dL/d(features) (`feature_dim()` entries: [∂L/∂Re, ∂L/∂Im] for complex
   * encoders), writes dx = Re(Pᴴ Λ⁽ˢ⁾ᴴ g) and, when `grad` is not null, adds dL/d(parameters)
   * to it (sizes as `make_gradient()`). Λ⁽ˢ⁾ᴴ is applied as Λ⁽⁻ˢ⁾. `dx` may be `x` itself.
   */
  void backward_row(position_t s, const scalar* x, const scalar* d_features, scalar* dx,
                    encoder_gradient* grad) const {
    using PO = typename P::output_type;
    const index_t d = dim();
    detail::small_buffer<value_type> g(d), z(d);
    for (index_t i = 0; i < d; ++i) {
      if constexpr (is_complex) g[i] = value_type(d_features[i], d_features[d + i]);
      else g[i] = d_features[i];
    }
    if constexpr (has_parameters<L>) {
      if (grad != nullptr) {  // Λ's gradient needs its output y = Λ⁽ˢ⁾ P x
        detail::small_buffer<value_type> y(d);
        encode_row(s, x, y.data());
        l_.accumulate_gradient(s, y.data(), g.data(), grad->lambda.data());
      }
    }
    lambda_adjoint(s, g.data(), z.data());
    detail::small_buffer<PO> gp(d);  // dL/d(P x): Re(z) when P is real and Λ complex
    for (index_t i = 0; i < d; ++i) {
      if constexpr (is_complex_v<PO>) gp[i] = z[i];
      else gp[i] = detail::real_part(z[i]);
    }
    if constexpr (has_parameters<P>) {
      if (grad != nullptr) p_.accumulate_gradient(x, gp.data(), grad->p.data());
    }
    if constexpr (P::is_complex) {
      detail::small_buffer<PO> t(d);
      p_.apply_adjoint(gp.data(), t.data());
      for (index_t i = 0; i < d; ++i) dx[i] = t[i].real();
    } else {
      p_.apply_adjoint(gp.data(), dx);
    }
  }

  /**
   * The backward of `encode` for a block: row i of `dx` gets dL/dx_i from row i of `d_out`
   * (dL/d(features), n×feature_dim()), and dL/d(parameters) over all rows is added to `*grad`
   * when it is not null (docs/training.md).
   * @param x     the n×d rows that were encoded.
   * @param pos   their positions, as given to `encode`.
   * @param d_out n×feature_dim() gradients of the features.
   * @param dx    n×d output; may be `x` itself, must not otherwise overlap x or d_out.
   * @param grad  null, or sized as `make_gradient()`.
   * @throws shape_error on mismatched sizes (of the views or of `grad`).
   */
  void backward(matrix_view<const scalar> x, positions pos, matrix_view<const scalar> d_out,
                matrix_view<scalar> dx, encoder_gradient* grad = nullptr) const {
    check_backward(x, pos, d_out, dx, grad, "lrpe::encoder::backward");
    for (index_t i = 0; i < x.rows; ++i) backward_row(pos[i], x.row(i), d_out.row(i), dx.row(i), grad);
  }

  /// The checks of `backward` (for backends that run their own backward), naming `where`.
  void check_backward(const matrix_view<const scalar>& x, const positions& pos, const matrix_view<const scalar>& d_out,
                      const matrix_view<scalar>& dx, const encoder_gradient* grad, const char* where) const {
    validate(x, where, "x");
    validate(d_out, where, "d_out");
    validate(dx, where, "dx");
    detail::require_equal(x.cols, dim(), where, "x.cols", "dim()");
    detail::require_equal(d_out.cols, feature_dim(), where, "d_out.cols", "feature_dim()");
    detail::require_equal(d_out.rows, x.rows, where, "d_out.rows", "x.rows");
    detail::require_equal(dx.cols, dim(), where, "dx.cols", "dim()");
    detail::require_equal(dx.rows, x.rows, where, "dx.rows", "x.rows");
    pos.require_rows(x.rows, where);
    check_gradient(grad, where);
  }

  /// `grad`, when not null, is sized as `make_gradient()` (a shape_error naming `where` otherwise).
  void check_gradient(const encoder_gradient* grad, const char* where) const {
    if (grad == nullptr) return;
    detail::require_equal(static_cast<index_t>(grad->p.size()), p_parameter_count(), where, "grad->p.size()",
                          "the P parameter count (p_parameter_count())");
    detail::require_equal(static_cast<index_t>(grad->lambda.size()), lambda_parameter_count(), where,
                          "grad->lambda.size()", "the lambda parameter count (lambda_parameter_count())");
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

  /// z = Λ⁽ˢ⁾ᴴ g = Λ⁽⁻ˢ⁾ g; at s = −2^63, whose negation overflows, Λ⁽¹⁾ Λ⁽²⁶³⁻¹⁾ g.
  void lambda_adjoint(position_t s, const value_type* g, value_type* z) const {
    if (s != std::numeric_limits<position_t>::min()) {
      l_.apply(-s, g, z);
    } else {
      detail::small_buffer<value_type> t(dim());
      l_.apply(std::numeric_limits<position_t>::max(), g, t.data());
      l_.apply(1, t.data(), z);
    }
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
