// SPDX-License-Identifier: MIT
/**
 * @file dense.hpp
 * A user-supplied dense unitary matrix as P (real orthogonal or complex unitary).
 */
#pragma once

#include <lrpe/detail/validate.hpp>

#include <Eigen/LU>
#include <Eigen/SVD>

#include <cmath>
#include <limits>
#include <type_traits>

namespace lrpe {
inline namespace v0 {
namespace p {

/**
 * Any dense unitary P, validated at construction: square, finite, ‖mᴴm − I‖_max ≤ tol, and then
 * made unitary to the rounding of S: P is the unitary polar factor of m (the unitary matrix
 * nearest to m), computed in double for float and in S's precision otherwise, and rounded to S.
 *
 * Why: an m accepted at the tolerance still breaks the relative property by about that much
 * (W_sᴴW_s − I ≈ (PᴴP − I) + Pᴴ(PPᴴ − I)P), so an encoder built on it could fail
 * `lrpe::check`'s default tolerance (16·d·ε) although p::dense accepted it (m with ‖mᴴm − I‖ = 9dε
 * gave 18dε in W_sᴴW_s). P differs from m by about ‖mᴴm − I‖/2, within the rounding of a
 * d-term product at the default tolerance; `input_unitarity_error()` keeps what m had.
 *
 * The polar factor, in the working precision: while ‖XᴴX − I‖_F ≥ 1/2 (a large user tolerance,
 * or a large d), scaled Newton steps X ← (μX + X⁻ᴴ/μ)/2 (an SVD's UVᴴ for a singular m); then
 * Newton–Schulz steps X ← X − X(XᴴX − I)/2 while they halve ‖XᴴX − I‖_F. Construction costs a
 * few d×d products (and inverses when far): O(d³), once.
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
    dense_matrix<work> x = m_.template cast<work>();
    dense_matrix<work> e = residual(x);
    input_error_ = static_cast<double>(e.cwiseAbs().maxCoeff());
    detail::require_parameter(input_error_ <= tol, where, "m",
                              detail::lazy_concat("must be unitary (max |PᴴP - I| <= ", tol, ")"), input_error_);
    m_ = polar(std::move(x), std::move(e)).template cast<S>();
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

  /// P (the polar factor of the m given, rounded to S).
  [[nodiscard]] const dense_matrix<S>& matrix() const noexcept { return m_; }

  /// The entries of P are its parameters (docs/training.md: d² real ones, or d² complex ones as
  /// (re, im) pairs), differentiated without the unitary constraint: keep P unitary by
  /// parametrising it (Cayley map or matrix exponential of a skew matrix) and chaining.
  [[nodiscard]] index_t parameter_count() const noexcept { return (is_complex ? 2 : 1) * dim() * dim(); }

  /**
   * Adds dL/dP = gy·xᵀ of one row to `grad`, row-major, given x and gy = dL/d(Px); for a complex
   * P entry (i, j) is the pair (dL/dRe P_ij, dL/dIm P_ij) = (Re gy_i, Im gy_i)·x_j.
   */
  void accumulate_gradient(const scalar* x, const S* gy, double* grad) const noexcept {
    const index_t d = dim();
    for (index_t i = 0; i < d; ++i) {
      for (index_t j = 0; j < d; ++j) {
        const auto xj = static_cast<double>(x[j]);
        if constexpr (is_complex) {
          grad[2 * (i * d + j)] += static_cast<double>(gy[i].real()) * xj;
          grad[2 * (i * d + j) + 1] += static_cast<double>(gy[i].imag()) * xj;
        } else {
          grad[i * d + j] += static_cast<double>(gy[i]) * xj;
        }
      }
    }
  }

  /// max |(mᴴm − I)_ij| of the m given (computed in the working precision: double for float).
  [[nodiscard]] double input_unitarity_error() const noexcept { return input_error_; }

 private:
  using work_real = std::conditional_t<(sizeof(scalar) < sizeof(double)), double, scalar>;
  using work = std::conditional_t<is_complex, std::complex<work_real>, work_real>;

  static dense_matrix<work> residual(const dense_matrix<work>& x) {
    return x.adjoint() * x - dense_matrix<work>::Identity(x.rows(), x.cols());
  }

  /// The unitary polar factor of x, given e = xᴴx − I (see the class comment).
  static dense_matrix<work> polar(dense_matrix<work> x, dense_matrix<work> e) {
    double ef = static_cast<double>(e.norm());  // ‖e‖_F ≥ ‖e‖_2
    // Far from unitary: scaled Newton steps X ← (μX + X⁻ᴴ/μ)/2, μ = (‖X⁻¹‖_F/‖X‖_F)^½, which
    // converge to the polar factor from any nonsingular X (every singular value stays > 0).
    for (int step = 0; !(ef < 0.5) && step < 64; ++step) {
      const dense_matrix<work> inv = Eigen::PartialPivLU<dense_matrix<work>>(x).inverse();
      const work_real ratio = inv.norm() / x.norm();
      if (!inv.allFinite() || !(ratio > 0) || !std::isfinite(ratio)) {  // singular (a tolerance ≥ 1 accepts such m): UVᴴ of an SVD
        // JacobiSVD (the most accurate of Eigen's SVDs): BDCSVD's divide and conquer pays only
        // for large d, and its instantiation doubled the compile time of any TU with a p::dense.
        const Eigen::JacobiSVD<dense_matrix<work>> svd(x, Eigen::ComputeFullU | Eigen::ComputeFullV);
        x = svd.matrixU() * svd.matrixV().adjoint();
      } else {
        const work_real mu = std::sqrt(ratio);
        x = (x * work(mu) + inv.adjoint() * work(1 / mu)) * work(work_real(0.5));
      }
      e = residual(x);
      ef = static_cast<double>(e.norm());
    }
    // Near (‖e‖_2 ≤ ‖e‖_F < 1/2): Newton–Schulz steps X ← X − X(XᴴX − I)/2, which take every
    // eigenvalue λ of e to −¾λ² + ¼λ³, at most 0.44·|λ|. They stop at the rounding of the
    // residual itself, d^1.5·ε (a double m already unitary to rounding is kept as it is), or
    // when ‖e‖_F no longer halves (a step there would only trade one rounding for another).
    const double noise = static_cast<double>(x.rows()) * std::sqrt(static_cast<double>(x.rows())) *
                         static_cast<double>(std::numeric_limits<work_real>::epsilon());
    for (int step = 0; step < 64 && ef > noise; ++step) {
      dense_matrix<work> next = x - (x * e) * work(work_real(0.5));
      dense_matrix<work> next_e = residual(next);
      const double next_ef = static_cast<double>(next_e.norm());
      if (!(next_ef <= 0.5 * ef)) break;
      x.swap(next);
      e.swap(next_e);
      ef = next_ef;
    }
    return x;
  }

  dense_matrix<S> m_;
  double input_error_ = 0;
};

}  // namespace p
}  // namespace v0
}  // namespace lrpe
