// SPDX-License-Identifier: MIT
/**
 * @file check.hpp
 * Property checks for any encoder, in-library or user-written: `lrpe::check::unitarity`,
 * `relative`, `identity_at_zero`, `shift_invariance`. Downstream projects call them from their
 * own tests on their own policies.
 *
 * Each returns a `report` (passed, the largest error, the tolerance, and where the largest
 * error was). Residuals are formed in long double from the encoder's dense matrices, so the
 * reported error is the encoder's own, not the check's rounding. An encoder with `encode_row`
 * (every `lrpe::encoder`) is also checked as it runs: `unitarity`, `relative` and
 * `identity_at_zero` compare the map `encode_row` applies at each position they visit with
 * `transform_matrix` (a policy whose `apply` disagrees with its `matrix()` fails them).
 *
 * Default tolerance on max-abs entry errors: 16·d·ε(T), the rounding of a d-term product of
 * matrices stored in T (about 1.2e-4 for float at d = 64, 2.3e-13 for double), at every
 * position: lrpe's angles are exact (docs/math.md §Angles). An encoder whose angle is one
 * rounded double fl(s·θ) loses the relative property as |s| grows (its error is ~|s|·ε(double));
 * the checks report that. `default_tolerance(e, s, t)` adds 8·(|s| + |t|)·ε(double) for a caller
 * who accepts such angles, passed explicitly (from |s| + |t| ≈ 2^50 it exceeds any error two
 * unitary matrices can have, and the check can no longer fail).
 */
#pragma once

#include <lrpe/core/random.hpp>
#include <lrpe/core/view.hpp>

#include <cmath>
#include <complex>
#include <concepts>
#include <cstdlib>
#include <limits>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace check {

/// What an encoder must offer to be checked (every `lrpe::encoder` does).
template <class E>
concept checkable_encoder = requires(const E& e, position_t s) {
  typename E::scalar;
  typename E::value_type;
  { e.dim() } -> std::convertible_to<index_t>;
  { e.transform_matrix(s) } -> std::convertible_to<dense_matrix<typename E::value_type>>;
  { e.relative_matrix(s) } -> std::convertible_to<dense_matrix<typename E::value_type>>;
};

/// The outcome of one property check.
struct report {
  std::string property;    ///< what was checked, e.g. "W_s^H W_t = W_{t-s}"
  bool passed = true;      ///< max_error <= tolerance (and no non-finite value)
  double max_error = 0;    ///< largest absolute entry error seen
  double tolerance = 0;    ///< the tolerance used
  position_t s = 0;        ///< position(s) where the largest error was seen
  position_t t = 0;
  index_t row = -1;        ///< entry (row, col) of the largest error, -1 if not an entry (col -1: entry `row` of a vector)
  index_t col = -1;

  explicit operator bool() const noexcept { return passed; }

  /// One line: "W_s^H W_t = W_{t-s}: passed, max error 3.1e-07 <= 6.1e-05 at s=-3 t=1000000 (2, 5)".
  [[nodiscard]] std::string to_string() const {
    std::ostringstream os;
    os.precision(3);
    os << property << ": " << (passed ? "passed" : "FAILED") << ", max error " << max_error
       << (passed ? " <= " : " > ") << tolerance << " at s=" << s << " t=" << t;
    if (row >= 0 && col >= 0) os << " (" << row << ", " << col << ")";
    else if (row >= 0) os << " (entry " << row << ")";
    return os.str();
  }
};

namespace detail {
/// |s| in double (exact to a rounding, and defined for INT64_MIN, whose std::abs is not).
inline double abs_position(position_t s) noexcept { return s < 0 ? -static_cast<double>(s) : static_cast<double>(s); }

/// a + b, or a `parameter_error` naming `arg` when it does not fit in position_t.
inline position_t add_positions(position_t a, position_t b, const char* where, const char* arg, const char* expr) {
  position_t r;
  if (__builtin_add_overflow(a, b, &r))
    ::lrpe::detail::fail<parameter_error>(where, arg,
                                          ::lrpe::detail::lazy_concat("must keep ", expr, " within int64 [-2^63, 2^63 - 1]"), b);
  return r;
}
}  // namespace detail

/// 16·d·ε(T) + 8·(|s| + |t|)·ε(double). `default_tolerance(e)` (16·d·ε(T)) is every check's
/// default. The position term is for an explicit call on a user encoder that forms the angle as
/// one rounded double fl(s·θ) (lrpe's own encoders meet `default_tolerance(e)` at every position).
template <class E>
double default_tolerance(const E& e, position_t s = 0, position_t t = 0) {
  const auto mag = detail::abs_position(s) + detail::abs_position(t);
  return 16.0 * static_cast<double>(e.dim()) *
             static_cast<double>(std::numeric_limits<typename E::scalar>::epsilon()) +
         8.0 * mag * std::numeric_limits<double>::epsilon();
}

namespace detail {
template <class S>
using ld_t = std::conditional_t<is_complex_v<S>, std::complex<long double>, long double>;

template <class S>
dense_matrix<ld_t<S>> to_ld(const dense_matrix<S>& m) {
  return m.template cast<ld_t<S>>();
}

/// Folds max |a − b| entrywise into `r` (NaN counts as failure).
template <class M>
void fold_max(report& r, const M& diff, position_t s, position_t t) {
  for (index_t j = 0; j < diff.cols(); ++j) {
    for (index_t i = 0; i < diff.rows(); ++i) {
      const auto err = static_cast<double>(std::abs(diff(i, j)));
      if (!(err <= r.max_error)) {  // also true for NaN
        r.max_error = std::isnan(err) ? std::numeric_limits<double>::infinity() : err;
        r.s = s;
        r.t = t;
        r.row = i;
        r.col = j;
      }
    }
  }
}

/// The map `encode_row(s, ·)` applies, column j its image of e_j (`encode_row` is what `encode`,
/// `score` and attention run; `transform_matrix` is built from the policies' `matrix()`).
template <class E>
concept applies_rows = requires(const E& e, position_t s, const typename E::scalar* x, typename E::value_type* y) {
  e.encode_row(s, x, y);
};

template <class E>
dense_matrix<typename E::value_type> applied_matrix(const E& e, position_t s) {
  using T = typename E::scalar;
  const index_t d = e.dim();
  dense_matrix<typename E::value_type> m(d, d);
  std::vector<T> unit(static_cast<std::size_t>(d), T(0));
  std::vector<typename E::value_type> col(static_cast<std::size_t>(d));
  for (index_t j = 0; j < d; ++j) {
    unit[static_cast<std::size_t>(j)] = T(1);
    e.encode_row(s, unit.data(), col.data());
    unit[static_cast<std::size_t>(j)] = T(0);
    for (index_t i = 0; i < d; ++i) m(i, j) = col[static_cast<std::size_t>(i)];
  }
  return m;
}

/// Folds max |encode_row(s) − M_s| into `r` when the encoder has `encode_row`.
template <class E>
void fold_applied(report& r, const E& e, position_t s, position_t at_s, position_t at_t) {
  if constexpr (applies_rows<E>) {
    using V = typename E::value_type;
    const auto applied = to_ld(applied_matrix(e, s));
    const auto m = to_ld(dense_matrix<V>(e.transform_matrix(s)));
    fold_max(r, (applied - m).eval(), at_s, at_t);
  }
}

/// `tol`, or `fallback` when negative; a NaN tolerance is a `domain_error` (every comparison with
/// it would fail, or pass, silently) and an infinite one a `parameter_error` (every check would
/// pass).
inline double resolve(double tol, double fallback, const char* where) {
  if (std::isnan(tol))
    ::lrpe::detail::fail<domain_error>(where, "tol", "must be a number (negative: the default tolerance)", tol);
  if (std::isinf(tol))
    ::lrpe::detail::fail<parameter_error>(where, "tol", "must be finite (an infinite tolerance passes every check)",
                                          tol);
  return tol < 0 ? fallback : tol;
}
}  // namespace detail

/**
 * W_sᴴ W_s = I and M_sᴴ M_s = I at every position in `positions`, and (with `encode_row`) the
 * map encode applies there equals M_s.
 * @param tol negative means `default_tolerance(e)`.
 */
template <checkable_encoder E>
report unitarity(const E& e, std::span<const position_t> positions, double tol = -1) {
  using V = typename E::value_type;
  report r{detail::applies_rows<E> ? "W_s^H W_s = I, M_s^H M_s = I and encode_row(s) = M_s"
                                   : "W_s^H W_s = I and M_s^H M_s = I",
           true, 0,
           detail::resolve(tol, default_tolerance(e), "lrpe::check::unitarity")};
  const auto id = dense_matrix<detail::ld_t<V>>::Identity(e.dim(), e.dim());
  for (position_t s : positions) {
    const auto w = detail::to_ld(dense_matrix<V>(e.relative_matrix(s)));
    detail::fold_max(r, (w.adjoint() * w - id).eval(), s, s);
    const auto m = detail::to_ld(dense_matrix<V>(e.transform_matrix(s)));
    detail::fold_max(r, (m.adjoint() * m - id).eval(), s, s);
    detail::fold_applied(r, e, s, s, s);
  }
  r.passed = r.max_error <= r.tolerance;
  return r;
}

/// Overload for a braced list of positions.
template <checkable_encoder E>
report unitarity(const E& e, std::initializer_list<position_t> positions, double tol = -1) {
  return unitarity(e, std::span<const position_t>(positions.begin(), positions.size()), tol);
}

/**
 * The relative property W_sᴴ W_t = W_{t−s} (the paper's Eq. 9 in matrix form), and (with
 * `encode_row`) the map encode applies at s and at t equals M_s and M_t.
 * @param tol negative means `default_tolerance(e)` (no position term: see the file comment).
 */
template <checkable_encoder E>
report relative(const E& e, position_t s, position_t t, double tol = -1) {
  using V = typename E::value_type;
  constexpr const char* where = "lrpe::check::relative";
  report r{detail::applies_rows<E> ? "W_s^H W_t = W_{t-s} and encode_row = M at s, t" : "W_s^H W_t = W_{t-s}", true, 0,
           detail::resolve(tol, default_tolerance(e), where)};
  const position_t delta = ::lrpe::detail::checked_offset(s, t, where);
  const auto ws = detail::to_ld(dense_matrix<V>(e.relative_matrix(s)));
  const auto wt = detail::to_ld(dense_matrix<V>(e.relative_matrix(t)));
  const auto wd = detail::to_ld(dense_matrix<V>(e.relative_matrix(delta)));
  detail::fold_max(r, (ws.adjoint() * wt - wd).eval(), s, t);
  detail::fold_applied(r, e, s, s, t);
  detail::fold_applied(r, e, t, s, t);
  r.passed = r.max_error <= r.tolerance;
  return r;
}

/// W_0 = I, and (with `encode_row`) the map encode applies at 0 equals M_0.
template <checkable_encoder E>
report identity_at_zero(const E& e, double tol = -1) {
  using V = typename E::value_type;
  report r{detail::applies_rows<E> ? "W_0 = I and encode_row(0) = M_0" : "W_0 = I", true, 0,
           detail::resolve(tol, default_tolerance(e), "lrpe::check::identity_at_zero")};
  const auto w0 = detail::to_ld(dense_matrix<V>(e.relative_matrix(0)));
  detail::fold_max(r, (w0 - dense_matrix<detail::ld_t<V>>::Identity(e.dim(), e.dim())).eval(), 0, 0);
  detail::fold_applied(r, e, 0, 0, 0);
  r.passed = r.max_error <= r.tolerance;
  return r;
}

/**
 * Score shift invariance f(s, t) = f(s + c, t + c) on random rows q, k drawn from
 * `lrpe::generator(seed)` (uniform in [−1, 1)). The error is relative to ‖q‖‖k‖.
 */
template <class E>
  requires requires(const E& e, const typename E::scalar* x, position_t s) { e.score(x, s, x, s); }
report shift_invariance(const E& e, position_t s, position_t t, position_t c,
                        std::uint64_t seed = 1, double tol = -1) {
  using T = typename E::scalar;
  constexpr const char* where = "lrpe::check::shift_invariance";
  const position_t sc = detail::add_positions(s, c, where, "c", "s + c");
  const position_t tc = detail::add_positions(t, c, where, "c", "t + c");
  report r{"score(s, t) = score(s+c, t+c)", true, 0, detail::resolve(tol, default_tolerance(e), where)};
  generator g(seed);
  std::vector<T> q(static_cast<std::size_t>(e.dim())), k(q.size());
  double nq = 0, nk = 0;
  for (auto& x : q) { x = static_cast<T>(2 * g.uniform01() - 1); nq += double(x) * double(x); }
  for (auto& x : k) { x = static_cast<T>(2 * g.uniform01() - 1); nk += double(x) * double(x); }
  const double a = e.score(q.data(), s, k.data(), t);
  const double b = e.score(q.data(), sc, k.data(), tc);
  r.max_error = std::abs(a - b) / std::sqrt(nq * nk);
  if (std::isnan(r.max_error)) r.max_error = std::numeric_limits<double>::infinity();
  r.s = s;
  r.t = t;
  r.passed = r.max_error <= r.tolerance;
  return r;
}

}  // namespace check
}  // namespace v0
}  // namespace lrpe
