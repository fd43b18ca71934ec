// SPDX-License-Identifier: MIT
/**
 * @file sinusoidal.hpp
 * Sinusoidal absolute position encodings, added to the token embeddings before the first layer
 * (or, Shortformer's position-infused attention, to the inputs of the query and key projections
 * only), in the two conventions in use:
 *
 * | convention | frequencies ω_i, i = 0 … d/2 − 1 | layout of row p | used by |
 * |---|---|---|---|
 * | `vaswani` | base^(−2i/d) | [sin pω₀, cos pω₀, sin pω₁, cos pω₁, …] | "Attention is all you need", HF's `create_sinusoidal_embeddings`, CAPE |
 * | `tensor2tensor` | base^(−i/(d/2 − 1)) (ω₀ = 1 when d = 2) | [sin pω₀ … sin pω_{d/2−1}, cos pω₀ … cos pω_{d/2−1}] | tensor2tensor's timing signal, fairseq, the Universal Transformer |
 *
 * Angles are exact: cos and sin of the exact product p·ω at integer positions (detail/angle.hpp,
 * a few double ulps at any int64 position), and of the exact product x·ω at a real position x
 * (CAPE's continuous positions), so an encoding far from 0 is as accurate as one near it.
 * The width d must be even.
 */
#pragma once

#include <lrpe/core/random.hpp>
#include <lrpe/core/view.hpp>
#include <lrpe/detail/angle.hpp>
#include <lrpe/detail/validate.hpp>

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace absolute {

/// Which frequencies and layout (file comment).
enum class sinusoid_convention { vaswani, tensor2tensor };

struct sinusoidal_options {
  sinusoid_convention convention = sinusoid_convention::vaswani;
  double base = 10000.0;  ///< the longest wavelength is 2π·base (> 1, finite)
};

namespace detail_ {

inline void require_sinusoid(index_t d, const sinusoidal_options& o, const char* where) {
  lrpe::detail::require_shape(d >= 2 && d % 2 == 0 && d <= max_dim, where, "d",
                              lrpe::detail::lazy_concat("must be even, in [2, lrpe::max_dim = ", max_dim, "]"), d);
  if (!std::isfinite(o.base) || !(o.base > 1))
    lrpe::detail::fail<parameter_error>(where, "options.base", "must be finite and > 1", o.base);
}

/// ω_i of the convention, i = 0 … d/2 − 1.
inline std::vector<double> sinusoid_frequencies(index_t d, const sinusoidal_options& o) {
  const index_t half = d / 2;
  std::vector<double> w(static_cast<std::size_t>(half));
  for (index_t i = 0; i < half; ++i) {
    const double exponent = o.convention == sinusoid_convention::vaswani
                                ? -2.0 * static_cast<double>(i) / static_cast<double>(d)
                                : -static_cast<double>(i) / static_cast<double>(half > 1 ? half - 1 : 1);
    w[static_cast<std::size_t>(i)] = std::pow(o.base, exponent);
  }
  return w;
}

/// Writes row `out` (d entries) from the rotations (cos, sin) of its d/2 angles.
template <class T, class Angle>
void write_sinusoid(T* out, index_t d, sinusoid_convention c, const std::vector<double>& w, Angle angle) {
  const index_t half = d / 2;
  for (index_t i = 0; i < half; ++i) {
    const lrpe::detail::cos_sin r = angle(w[static_cast<std::size_t>(i)]);
    if (c == sinusoid_convention::vaswani) {
      out[2 * i] = static_cast<T>(r.s);
      out[2 * i + 1] = static_cast<T>(r.c);
    } else {
      out[i] = static_cast<T>(r.s);
      out[half + i] = static_cast<T>(r.c);
    }
  }
}

}  // namespace detail_

/**
 * The encodings of n positions (row i at `pos[i]`: an offset, default 0, or an array), n × d.
 * @throws shape_error (n < 0, d odd, < 2 or past max_dim, n·d past index_t; an array of
 *         positions of another size), parameter_error (base; an offset whose last row passes int64).
 */
template <real_scalar T = double>
row_matrix<T> sinusoidal(index_t n, index_t d, const sinusoidal_options& options = {}, const positions& pos = 0) {
  constexpr const char* where = "lrpe::absolute::sinusoidal";
  detail_::require_sinusoid(d, options, where);
  lrpe::detail::require_shape(n >= 0 && n <= std::numeric_limits<index_t>::max() / d, where, "n",
                              "must be >= 0 with n*d an index_t", n);
  pos.require_rows(n, where, "pos");
  const std::vector<double> w = detail_::sinusoid_frequencies(d, options);
  row_matrix<T> out(n, d);
  for (index_t i = 0; i < n; ++i) {
    const position_t p = pos[i];
    detail_::write_sinusoid(out.row(i).data(), d, options.convention, w,
                            [p](double omega) { return lrpe::detail::angle_cos_sin(p, omega); });
  }
  return out;
}

/**
 * The encodings of real positions x_i (CAPE's augmented positions), n × d: cos and sin of the
 * exact products x_i·ω.
 * @throws shape_error (d), parameter_error (base), domain_error (a non-finite position).
 */
template <real_scalar T = double>
row_matrix<T> sinusoidal_at(std::span<const double> x, index_t d, const sinusoidal_options& options = {}) {
  constexpr const char* where = "lrpe::absolute::sinusoidal_at";
  detail_::require_sinusoid(d, options, where);
  const auto n = static_cast<index_t>(x.size());
  lrpe::detail::require_shape(n <= std::numeric_limits<index_t>::max() / d, where, "x.size()",
                              "must keep x.size()*d an index_t", n);
  const std::vector<double> w = detail_::sinusoid_frequencies(d, options);
  row_matrix<T> out(n, d);
  for (index_t i = 0; i < n; ++i) {
    const double xi = x[static_cast<std::size_t>(i)];
    if (!std::isfinite(xi))
      lrpe::detail::fail<domain_error>(where, "x", "must be finite", lrpe::detail::concat(xi, " at [", i, "]"));
    detail_::write_sinusoid(out.row(i).data(), d, options.convention, w,
                            [xi](double omega) { return lrpe::detail::exact_product_cos_sin(xi, omega); });
  }
  return out;
}

/**
 * The Universal Transformer's coordinate embedding at recurrence step `step`: the timing
 * signal of each position plus the timing signal of the step (both tensor2tensor's), n × d,
 * positions 0 … n − 1.
 * @throws as `sinusoidal`; parameter_error (step < 0).
 */
template <real_scalar T = double>
row_matrix<T> position_and_step(index_t n, index_t d, position_t step, double base = 10000.0) {
  lrpe::detail::require_parameter(step >= 0, "lrpe::absolute::position_and_step", "step", "must be >= 0", step);
  const sinusoidal_options o{sinusoid_convention::tensor2tensor, base};
  row_matrix<T> out = sinusoidal<T>(n, d, o);
  const row_matrix<T> at_step = sinusoidal<T>(1, d, o, step);
  out.rowwise() += at_step.row(0);
  return out;
}

/**
 * CAPE's augmentations (Likhomanenko et al. 2021) of positions 0 … n − 1, for one sequence of a
 * training batch: x_i = λ·(p_i + Δ + ε_i), with p_i = pos_scale·i (less their mean with
 * `normalize`), one global shift Δ ~ U[−max_global_shift, max_global_shift], a local shift per
 * position ε_i ~ U[−pos_scale·max_local_shift/2, pos_scale·max_local_shift/2] and one global
 * scaling log λ ~ U[−log max_global_scaling, log max_global_scaling]. Draws come from
 * `generator(seed)` in that order (Δ, the ε_i, λ): a batch uses one seed per sequence. At
 * evaluation (`training = false`) x_i = p_i. Then `sinusoidal_at(x, d)` (Vaswani's layout, as
 * CAPE's).
 */
struct cape_options {
  double max_global_shift = 0.0;    ///< ≥ 0
  double max_local_shift = 0.0;     ///< ≥ 0 (in units of pos_scale)
  double max_global_scaling = 1.0;  ///< ≥ 1
  double pos_scale = 1.0;           ///< > 0: the spacing of the positions
  bool normalize = false;           ///< centre the positions (subtract their mean)
  bool training = true;             ///< false: no augmentation
  std::uint64_t seed = 0;
};

/// The (augmented) real positions of n tokens (see `cape_options`).
/// @throws shape_error (n < 0), parameter_error (an option outside its range; non-finite ones).
inline std::vector<double> cape_positions(index_t n, const cape_options& o) {
  constexpr const char* where = "lrpe::absolute::cape_positions";
  lrpe::detail::require_shape(n >= 0, where, "n", "must be >= 0", n);
  const auto check = [&](bool ok, const char* arg, const char* expectation, double value) {
    if (!ok || !std::isfinite(value)) lrpe::detail::fail<parameter_error>(where, arg, expectation, value);
  };
  check(o.max_global_shift >= 0, "options.max_global_shift", "must be finite and >= 0", o.max_global_shift);
  check(o.max_local_shift >= 0, "options.max_local_shift", "must be finite and >= 0", o.max_local_shift);
  check(o.max_global_scaling >= 1, "options.max_global_scaling", "must be finite and >= 1", o.max_global_scaling);
  check(o.pos_scale > 0, "options.pos_scale", "must be finite and > 0", o.pos_scale);
  std::vector<double> x(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = o.pos_scale * static_cast<double>(i);
  if (o.normalize && n > 0) {
    const double mean = o.pos_scale * static_cast<double>(n - 1) / 2.0;
    for (double& xi : x) xi -= mean;
  }
  if (!o.training) return x;
  generator g(o.seed);
  const auto symmetric = [&g](double half_width) { return half_width * (2.0 * g.uniform01() - 1.0); };
  const double delta = symmetric(o.max_global_shift);
  for (double& xi : x) xi += delta + symmetric(o.pos_scale * o.max_local_shift / 2.0);
  const double lambda = std::exp(symmetric(std::log(o.max_global_scaling)));
  for (double& xi : x) xi *= lambda;
  return x;
}

}  // namespace absolute
}  // namespace v0
}  // namespace lrpe
