// SPDX-License-Identifier: MIT
/**
 * @file linearizable.hpp
 * Compile-time facts about relative encodings and the feature factorisation of the
 * linearizable ones.
 *
 * A variant is *linearizable* when f_rel(q_s, k_t) = φ_q(q_s, s) · φ_k(k_t, t) for real
 * feature maps of a fixed width independent of n; then linear attention is exact with it.
 * - `is_linearizable_v<V>`: true for every `lrpe::encoder` (and preset), for
 *   `multiplicative<E>`, `cosformer` and `transformer_xl`; false otherwise.
 * - `features(v, side, x, position, out)` / `features(v, side, X, positions)`: φ_q or φ_k;
 *   a non-linearizable variant is a compile error with a readable message.
 * - `default_scale(v, d)`: the logit scale the encoding was published with (the variant's own
 *   `default_scale(d)` when it has one, else 1/√d).
 */
#pragma once

#include <lrpe/core/relative.hpp>
#include <lrpe/core/view.hpp>
#include <lrpe/encoder.hpp>

#include <cmath>
#include <type_traits>

namespace lrpe {
inline namespace v0 {
namespace canonical {

namespace detail_ {
template <class P, class L>
std::true_type derives_from_encoder(const encoder<P, L>*);
std::false_type derives_from_encoder(...);
}  // namespace detail_

/// True for `lrpe::encoder<P, L>` and every type derived from one (the presets).
template <class V>
inline constexpr bool is_encoder_v =
    decltype(detail_::derives_from_encoder(static_cast<const std::remove_cvref_t<V>*>(nullptr)))::value;

namespace detail_ {
template <class V>
constexpr bool linearizable() {
  using U = std::remove_cvref_t<V>;
  if constexpr (is_encoder_v<U>) {
    return true;
  } else if constexpr (requires { { U::is_linearizable } -> std::convertible_to<bool>; }) {
    return static_cast<bool>(U::is_linearizable);
  } else {
    return false;
  }
}
}  // namespace detail_

/**
 * Whether f_rel of `V` factorises into per-position features of fixed width (see the file
 * comment). A user variant opts in with `static constexpr bool is_linearizable = true` and the
 * members `feature_dim()` and `features(side, x, position, out)`.
 */
template <class V>
inline constexpr bool is_linearizable_v = detail_::linearizable<V>();

/// Which side of the pair a feature row is for (φ_q and φ_k differ for Transformer-XL).
enum class side { query, key };

namespace detail_ {
template <class V>
constexpr void require_linearizable() {
  static_assert(is_linearizable_v<V>,
                "lrpe::canonical::features: this relative encoding is not linearizable (f_rel(q_s, k_t) "
                "has no factorisation into per-position features of fixed width); use it with softmax "
                "attention, or pick an LRPE encoder, RoPE, cosformer or transformer_xl. See docs/canonical.md.");
}
}  // namespace detail_

/// Width of the real features of a linearizable variant (compile error for the others).
template <class V>
[[nodiscard]] index_t feature_dim(const V& v) {
  detail_::require_linearizable<V>();
  if constexpr (is_linearizable_v<V>) return v.feature_dim();
  else return 0;
}

/**
 * Features of one row: φ_q(x, position) for `side::query`, φ_k(x, position) for `side::key`,
 * so that features(v, query, q, s) · features(v, key, k, t) = f_rel(q_s, k_t).
 * @param out `feature_dim(v)` elements; must not alias x.
 * Compile error (static_assert) for a non-linearizable variant.
 */
template <class V>
void features(const V& v, side which, const typename V::scalar* x, position_t position,
              typename V::scalar* out) {
  detail_::require_linearizable<V>();
  if constexpr (is_linearizable_v<V>) {
    if constexpr (is_encoder_v<V>) {
      (void)which;
      v.encode_features(position, x, out);
    } else {
      v.features(which, x, position, out);
    }
  }
}

/**
 * Features of a block: row i of the result is the features of row i of `x` at `pos[i]`.
 * @throws shape_error if x has the wrong width or `pos` the wrong length.
 */
template <class V, class Derived>
[[nodiscard]] row_matrix<typename V::scalar> features(const V& v, side which, const Eigen::MatrixBase<Derived>& x,
                                                      positions pos) {
  detail_::require_linearizable<V>();
  using T = typename V::scalar;
  static_assert(std::is_same_v<typename Derived::Scalar, T>,
                "lrpe::canonical::features: the rows must have the variant's scalar type");
  constexpr const char* where = "lrpe::canonical::features";
  const row_matrix<T> rows = x;
  detail::require_shape(rows.cols() == v.dim(), where, "x.cols", detail::lazy_concat("must equal dim() = ", v.dim()),
                        rows.cols());
  pos.require_rows(rows.rows(), where);
  row_matrix<T> out;
  if constexpr (is_linearizable_v<V>) {
    out.resize(rows.rows(), feature_dim(v));
    for (index_t i = 0; i < rows.rows(); ++i) features(v, which, rows.row(i).data(), pos[i], out.row(i).data());
  }
  return out;
}

/**
 * The logit scale an encoding was published with: `v.default_scale(d)` when the variant defines
 * it (T5: 1, DeBERTa: 1/√(d·(1 + #position terms)), Transformer-XL: 1/√d), else 1/√d.
 */
template <class V>
[[nodiscard]] double default_scale(const V& v, index_t d) {
  if constexpr (requires { { v.default_scale(d) } -> std::convertible_to<double>; }) {
    return v.default_scale(d);
  } else {
    return 1.0 / std::sqrt(static_cast<double>(d));
  }
}

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
