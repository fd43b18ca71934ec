/**
 * @file dense.hpp
 * A user-supplied dense unitary matrix as P (real orthogonal or complex unitary).
 */
#pragma once

#include <lrpe/detail/validate.hpp>

#include <cmath>
#include <limits>

namespace lrpe {
inline namespace v0 {
namespace p {

/**
 * Any dense unitary P, validated at construction: square, finite, ‖PᴴP − I‖_max ≤ tol.
 * @tparam S float, double, `std::complex<float>` or `std::complex<double>`.
 */
template <class S>
  requires real_scalar<real_t<S>>
class dense {
 public:
  using scalar = real_t<S>;
  using output_type = S;
  static constexpr bool is_complex = is_complex_v<S>;
  static constexpr bool is_real_orthogonal = !is_complex;

  /// Default tolerance: 10 d ε(T), the rounding of a unitary matrix stored in T.
  static double default_tolerance(index_t d) {
    return 10.0 * static_cast<double>(d) * std::numeric_limits<scalar>::epsilon();
  }

  /**
   * @param m the matrix (d×d).
   * @param tol unitarity tolerance on max |(PᴴP − I)_ij|; negative means `default_tolerance(d)`.
   * @throws shape_error if not square or empty; domain_error if m is not finite or tol is NaN;
   *         parameter_error if tol is infinite or m is not unitary within tol.
   */
  explicit dense(dense_matrix<S> m, double tol = -1) : m_(std::move(m)) {
    constexpr const char* where = "lrpe::p::dense";
    detail::require_dim(m_.rows(), where, "m.rows()");
    detail::require_shape(m_.rows() == m_.cols(), where, "m", "must be square",
                          detail::lazy_concat(m_.rows(), "x", m_.cols()));
    for (index_t j = 0; j < m_.cols(); ++j)
      for (index_t i = 0; i < m_.rows(); ++i)
        if (!std::isfinite(std::abs(m_(i, j))))
          throw domain_error(detail::concat(where, ": argument 'm' must be finite; got ", m_(i, j), " at (", i, ", ", j, ")"));
    if (std::isnan(tol)) detail::fail<domain_error>(where, "tol", "must be a number (negative: the default tolerance)", tol);
    detail::require_parameter(std::isfinite(tol), where, "tol",
                              "must be finite (an infinite tolerance would accept any matrix as unitary)", tol);
    if (tol < 0) tol = default_tolerance(m_.rows());
    const double err = static_cast<double>(
        (m_.adjoint() * m_ - dense_matrix<S>::Identity(m_.rows(), m_.cols())).cwiseAbs().maxCoeff());
    detail::require_parameter(err <= tol, where, "m",
                              detail::lazy_concat("must be unitary (max |PᴴP - I| <= ", tol, ")"), err);
  }

  [[nodiscard]] index_t dim() const noexcept { return m_.rows(); }

  /// y = P x for a real row x.
  void apply(const scalar* x, S* y) const {
    const index_t d = dim();
    for (index_t i = 0; i < d; ++i) {
      S acc{};
      for (index_t j = 0; j < d; ++j) acc += m_(i, j) * x[j];
      y[i] = acc;
    }
  }
  /// x = Pᴴ y.
  void apply_adjoint(const S* y, S* x) const {
    const index_t d = dim();
    for (index_t j = 0; j < d; ++j) {
      S acc{};
      for (index_t i = 0; i < d; ++i) acc += detail::conj(m_(i, j)) * y[i];
      x[j] = acc;
    }
  }

  [[nodiscard]] const dense_matrix<S>& matrix() const noexcept { return m_; }

 private:
  dense_matrix<S> m_;
};

}  // namespace p
}  // namespace v0
}  // namespace lrpe
