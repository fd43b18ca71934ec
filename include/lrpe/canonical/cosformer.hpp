// SPDX-License-Identifier: MIT
/**
 * @file cosformer.hpp
 * cosFormer's cos re-weighting (Qin et al. 2022; OpenNLPLab/cosFormer):
 * f_rel(q_s, k_t) = (q_s·k_t)·cos(π(t − s)/(2M)) with a fixed M.
 *
 * - canonical: m = 1: (q, cos(π(t−s)/(2M))·I, k);
 * - linearizable: φ(x, i) = [x sin a_i, x cos a_i], a_i = π i/(2M) (the same map for queries and
 *   keys), since sin a_s sin a_t + cos a_s cos a_t = cos(a_s − a_t).
 *
 * The ReLU feature map of cosFormer belongs to linear attention (it is applied to q and k
 * before this encoding). The reference sets M to the current length (max(src_len, tgt_len)),
 * which changes every weight when the length changes; here M is a fixed parameter, as
 * streaming needs. The weight is a re-weighting for |t − s| ≤ M and changes sign beyond.
 * Angles are the exact i·θ of θ = fl(π/(2M)), reduced (`detail::angle_cos_sin`), so that
 * φ(q, s)·φ(k, t) equals the direct score at any positions, far from 0 too.
 */
#pragma once

#include <lrpe/canonical/canonical_form.hpp>
#include <lrpe/canonical/detail/common.hpp>
#include <lrpe/canonical/linearizable.hpp>
#include <lrpe/detail/angle.hpp>

#include <cmath>
#include <numbers>

namespace lrpe {
inline namespace v0 {
namespace canonical {

template <real_scalar T>
class cosformer {
 public:
  using scalar = T;
  static constexpr bool is_linearizable = true;

  /**
   * @param d width of q and k.
   * @param m the length parameter M (> 0, finite).
   * @throws shape_error (d < 1), parameter_error (M ≤ 0), domain_error (M not finite).
   */
  cosformer(index_t d, double m) : d_(d), m_(m) {
    constexpr const char* where = "lrpe::canonical::cosformer";
    lrpe::detail::require_shape(d >= 1, where, "d", "must be >= 1", d);
    detail_::require_finite_value(m, where, "M");
    lrpe::detail::require_parameter(m > 0, where, "M", "must be > 0", m);
    theta_ = std::numbers::pi / (2.0 * m);
    lrpe::detail::require_parameter(theta_ <= 0x1p960, where, "M",
                                    "must be at least pi / 2^961 (about 1.6e-289: the angles pi i/(2M) of every "
                                    "int64 position i finite)",
                                    m);
  }

  [[nodiscard]] index_t dim() const noexcept { return d_; }
  [[nodiscard]] double length() const noexcept { return m_; }
  /// θ = π/(2M) in double: every angle below is the exact i·θ of this θ, reduced (as every
  /// rotation in lrpe: math.md §Angles), so features at far positions keep their accuracy.
  [[nodiscard]] double theta() const noexcept { return theta_; }

  /// The angle a_i = π i / (2M) of position i, one rounded double (for inspection; the weights
  /// and features use the exact angle).
  [[nodiscard]] double angle(position_t i) const noexcept { return static_cast<double>(i) * theta_; }
  /// The Toeplitz weight cos(π δ/(2M)) of the offset δ = t − s.
  [[nodiscard]] double weight(position_t delta) const noexcept {
    return lrpe::detail::angle_cos_sin(delta, theta_).c;
  }

  /// Direct formula (q·k)·cos(π(t − s)/(2M)), for any positions: t − s when it is an int64, else
  /// cos a_t cos a_s + sin a_t sin a_s of the two exact angles (what the features give).
  [[nodiscard]] double score(const T* q, position_t s, const T* k, position_t t) const noexcept {
    position_t delta;
    double w;
    if (!__builtin_sub_overflow(t, s, &delta)) {
      w = weight(delta);
    } else {
      const auto as = lrpe::detail::angle_cos_sin(s, theta_), at = lrpe::detail::angle_cos_sin(t, theta_);
      w = at.c * as.c + at.s * as.s;
    }
    return detail_::dot(q, k, d_) * w;
  }

  [[nodiscard]] auto canonical() const {
    auto w = [v = *this](position_t delta) { return v.weight(delta); };
    return canonical_form(term(identity_map<T>(d_), scalar_op<T, decltype(w)>(d_, w), identity_map<T>(d_)));
  }

  /// 2d: [x sin a_i, x cos a_i].
  [[nodiscard]] index_t feature_dim() const noexcept { return 2 * d_; }
  /// φ(x, i) = [x sin a_i, x cos a_i] (the same for queries and keys).
  void features(side, const T* x, position_t position, T* out) const noexcept {
    const auto a = lrpe::detail::angle_cos_sin(position, theta_);
    const auto sn = static_cast<T>(a.s), cs = static_cast<T>(a.c);
    for (index_t j = 0; j < d_; ++j) {
      out[j] = x[j] * sn;
      out[d_ + j] = x[j] * cs;
    }
  }
  /// The features' backward (no parameters, so x and grad are not read): dx = g[0:d) sin a_i +
  /// g[d:2d) cos a_i, for either side.
  void features_backward(side, const T* /*x*/, const T* g, position_t position, T* dx, double* /*grad*/) const noexcept {
    const auto a = lrpe::detail::angle_cos_sin(position, theta_);
    const auto sn = static_cast<T>(a.s), cs = static_cast<T>(a.c);
    for (index_t j = 0; j < d_; ++j) dx[j] = g[j] * sn + g[d_ + j] * cs;
  }
  /// The same features in the `lrpe::encoder` signature, so that attention's linear path
  /// (`feature_encoding`) takes a cosformer directly.
  void encode_features(position_t position, const T* x, T* out) const noexcept {
    features(side::query, x, position, out);
  }

 private:
  index_t d_;
  double m_;
  double theta_ = 0;
};

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
