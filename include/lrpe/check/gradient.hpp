// SPDX-License-Identifier: MIT
/**
 * @file gradient.hpp
 * `lrpe::check::gradient`: an encoder's backward (`encoder::backward`) against its own forward,
 * for any `lrpe::encoder`, in-library or built from user policies. Downstream projects call it
 * from their tests when they write a policy with learnable parameters (docs/training.md).
 *
 * The loss is L = Σ_i ⟨g_i, features(s_i, x_i)⟩ with x_i and g_i drawn from `seed`, so that
 * dL/d(features) = g exactly. Then:
 * - dL/dx against M_sᴴ g, M_s the map `encode_row` applies (a linear map: this is its exact
 *   derivative), formed in long double;
 * - every parameter of a P or Λ that can be rebuilt from its parameters (`reparameterisable`)
 *   against central differences of L, summed in long double, with Richardson's extrapolation of
 *   the steps h and h/2 (error O(h⁴)). The step moves an angle by at most `step` radians for Λ
 *   (h = step / max(1, max |s|): Λ's parameters are taken to be frequencies) and a P parameter
 *   by `step`·RMS(P's parameters).
 *
 * Errors are relative to the largest entry of the group (dx, P's, Λ's). Default tolerances:
 * 32·d·ε(T) for dx (the rounding of the d-term products); for parameters 1e-8 (double) and
 * 2e-3 (float), the finite differences' own noise, ε(T)·|L| over a change of L of about
 * `step`·|L|, with room. A dense P (`p::dense`) is not rebuilt from its entries (its constructor
 * projects onto the unitary matrices), so its raw gradient is not checked here.
 */
#pragma once

#include <lrpe/check/check.hpp>
#include <lrpe/encoder.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace check {

namespace detail {

/// x and g of the check's loss: uniform in [−1, 1), n rows each.
template <class T>
struct gradient_case {
  std::vector<position_t> s;
  row_matrix<T> x, g;
};

/// L(e) = Σ_i ⟨g_i, features(s_i, x_i)⟩ in long double, through the encoder's own forward.
template <class E, class T>
long double probe_loss(const E& e, const gradient_case<T>& c) {
  std::vector<T> f(static_cast<std::size_t>(e.feature_dim()));
  long double acc = 0;
  for (index_t i = 0; i < c.x.rows(); ++i) {
    e.encode_features(c.s[static_cast<std::size_t>(i)], c.x.row(i).data(), f.data());
    for (index_t j = 0; j < e.feature_dim(); ++j)
      acc += static_cast<long double>(c.g(i, j)) * static_cast<long double>(f[static_cast<std::size_t>(j)]);
  }
  return acc;
}

/// A report on max_j |got_j − want_j| / max_j |want_j| (a non-finite entry fails it).
inline report relative_report(const std::vector<double>& got, const std::vector<long double>& want,
                              std::string property, double tol) {
  report r{std::move(property), true, 0, tol};
  long double scale = 0;
  for (long double w : want) scale = std::max(scale, std::abs(w));
  for (std::size_t j = 0; j < got.size(); ++j) {
    const long double diff = std::abs(static_cast<long double>(got[j]) - want[j]);
    const double err = static_cast<double>(scale > 0 ? diff / scale : diff);
    if (!(err <= r.max_error)) {
      r.max_error = std::isfinite(err) ? err : std::numeric_limits<double>::infinity();
      r.row = static_cast<index_t>(j);
    }
  }
  r.passed = r.max_error <= tol;
  return r;
}

/// The worse of two reports (by error over tolerance); passed only when both passed.
inline report worse(const report& a, const report& b) {
  report w = b.max_error * a.tolerance > a.max_error * b.tolerance ? b : a;
  w.passed = a.passed && b.passed;
  return w;
}

/// Richardson-extrapolated central differences of L along each parameter of one policy:
/// `rebuild(w)` is the encoder with that policy's parameters w. w ± h is rarely a double: the
/// steps taken, h₊ = (w + h) − w and h₋ = w − (w − h), are exact and may differ by an ulp of
/// w, which a symmetric quotient would turn into an error h₊ − h₋ times L'' (far positions make
/// L'' ~ s²); the three-point quotient for unequal steps is second order in any case.
template <class Rebuild, class T>
std::vector<long double> central_differences(std::vector<double> w, double h, const Rebuild& rebuild,
                                             const gradient_case<T>& c) {
  using ld = long double;
  const ld at = probe_loss(rebuild(w), c);
  std::vector<ld> d(w.size());
  const auto diff = [&](std::size_t j, double step) {
    const double w0 = w[j], hi = w0 + step, lo = w0 - step;
    if (hi == w0 || lo == w0)
      ::lrpe::detail::fail<parameter_error>(
          "lrpe::check::gradient", "positions",
          ::lrpe::detail::lazy_concat("must leave a finite-difference step for parameter ", j, " (", w0,
                                      " +- step/max|s| rounds to itself: check it at smaller |s|); step"),
          step);
    const ld up_step = static_cast<ld>(hi) - w0, down_step = static_cast<ld>(w0) - lo;
    w[j] = hi;
    const ld up = probe_loss(rebuild(w), c);
    w[j] = lo;
    const ld down = probe_loss(rebuild(w), c);
    w[j] = w0;
    return (down_step * down_step * up - up_step * up_step * down +
            (up_step * up_step - down_step * down_step) * at) /
           (up_step * down_step * (up_step + down_step));
  };
  for (std::size_t j = 0; j < w.size(); ++j) {
    const ld coarse = diff(j, h), fine = diff(j, h / 2);
    d[j] = (4.0L * fine - coarse) / 3.0L;
  }
  return d;
}

}  // namespace detail

/**
 * Checks `e.backward` (dL/dx and the parameters' gradients) at the given positions against the
 * encoder's forward; see the file comment for the method and the default tolerances.
 * @param e         any `lrpe::encoder` (presets included).
 * @param positions one row per position (far positions included: Λ's step shrinks with them).
 * @param seed      draws x and the loss's g.
 * @param tol       relative tolerance for every group; negative means the defaults.
 * @param step      the finite-difference step (radians for Λ, relative for P); negative: 1e-3
 *                  for double, 1e-2 for float.
 * @throws shape_error if `positions` is empty; domain_error / parameter_error for a NaN or
 *         infinite tol or step.
 */
template <lrpe_encoder E>
report gradient(const E& e, std::span<const position_t> positions, std::uint64_t seed = 1, double tol = -1,
                double step = -1) {
  using T = typename E::scalar;
  using P = typename E::p_type;
  using L = typename E::lambda_type;
  constexpr const char* where = "lrpe::check::gradient";
  ::lrpe::detail::require_shape(!positions.empty(), where, "positions", "must not be empty", positions.size());
  constexpr bool single = sizeof(T) < sizeof(double);
  const double dx_tol = detail::resolve(tol, 32.0 * static_cast<double>(e.dim()) * std::numeric_limits<T>::epsilon(), where);
  const double param_tol = detail::resolve(tol, single ? 2e-3 : 1e-8, where);
  if (std::isnan(step) || std::isinf(step))
    ::lrpe::detail::fail<domain_error>(where, "step", "must be finite (negative: the default step)", step);
  if (step <= 0) step = single ? 1e-2 : 1e-3;

  const auto n = static_cast<index_t>(positions.size());
  const index_t d = e.dim(), f = e.feature_dim();
  detail::gradient_case<T> c{std::vector<position_t>(positions.begin(), positions.end()), row_matrix<T>(n, d),
                             row_matrix<T>(n, f)};
  generator rng(seed);
  for (index_t i = 0; i < n; ++i) {
    for (index_t j = 0; j < d; ++j) c.x(i, j) = static_cast<T>(2 * rng.uniform01() - 1);
    for (index_t j = 0; j < f; ++j) c.g(i, j) = static_cast<T>(2 * rng.uniform01() - 1);
  }
  row_matrix<T> dx(n, d);
  encoder_gradient grad = e.make_gradient();
  e.backward(view(std::as_const(c.x)), positions, view(std::as_const(c.g)), view(dx), &grad);

  // dL/dx_i = Re(M_sᴴ g_i), g_i complex for complex encoders ([Re, Im] halves).
  report r{"dL/dx vs M_s^H g (long double)", true, 0, dx_tol};
  for (index_t i = 0; i < n; ++i) {
    const position_t s = c.s[static_cast<std::size_t>(i)];
    const auto m = detail::to_ld(detail::applied_matrix(e, s));
    std::vector<double> got(static_cast<std::size_t>(d));
    std::vector<long double> want(static_cast<std::size_t>(d));
    for (index_t k = 0; k < d; ++k) {
      long double acc = 0;
      for (index_t j = 0; j < d; ++j) {
        if constexpr (E::is_complex)
          acc += std::real(m(j, k)) * c.g(i, j) + std::imag(m(j, k)) * c.g(i, d + j);
        else
          acc += m(j, k) * c.g(i, j);
      }
      got[static_cast<std::size_t>(k)] = static_cast<double>(dx(i, k));
      want[static_cast<std::size_t>(k)] = acc;
    }
    report row = detail::relative_report(got, want, r.property, dx_tol);
    row.s = row.t = s;
    row.col = row.row;  // (input row, feature)
    row.row = i;
    r = detail::worse(r, row);
  }
  using base = encoder<P, L>;
  if constexpr (reparameterisable<P>) {
    std::vector<double> w = e.p().parameters();
    long double ms = 0;
    for (double v : w) ms += static_cast<long double>(v) * v;
    const double rms = w.empty() ? 1.0 : static_cast<double>(std::sqrt(ms / static_cast<long double>(w.size())));
    const auto rebuild = [&](const std::vector<double>& v) { return base(e.p().with_parameters(v), e.lambda()); };
    r = detail::worse(r, detail::relative_report(
                             grad.p, detail::central_differences(std::move(w), step * (rms > 0 ? rms : 1.0), rebuild, c),
                             "dL/d(P parameters) vs central differences", param_tol));
  }
  if constexpr (reparameterisable<L>) {
    double far = 1;
    for (position_t s : positions) far = std::max(far, detail::abs_position(s));
    const auto rebuild = [&](const std::vector<double>& v) { return base(e.p(), e.lambda().with_parameters(v)); };
    r = detail::worse(r, detail::relative_report(
                             grad.lambda, detail::central_differences(e.lambda().parameters(), step / far, rebuild, c),
                             "dL/d(Lambda parameters) vs central differences", param_tol));
  }
  return r;
}

/// `gradient(e, {s, t, ...})`.
template <lrpe_encoder E>
report gradient(const E& e, std::initializer_list<position_t> positions, std::uint64_t seed = 1, double tol = -1,
                double step = -1) {
  return gradient(e, std::span<const position_t>(positions.begin(), positions.size()), seed, tol, step);
}

}  // namespace check
}  // namespace v0
}  // namespace lrpe
