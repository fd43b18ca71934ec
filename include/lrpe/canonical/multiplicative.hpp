// SPDX-License-Identifier: MIT
/**
 * @file multiplicative.hpp
 * Multiplicative relative encodings: any `lrpe::encoder` (LRPE Types 1–8, RoPE in both
 * pairings, PermuteFormer, user encoders).
 *
 * - direct:    f_rel(q_s, k_t) = Re(q̃_sᴴ k̃_t), q̃_s = M_s q_s (the encoder's own score);
 * - canonical: m = 1, q̂ = q, k̂ = k, W_{t−s} = Pᴴ Λ⁽ᵗ⁻ˢ⁾ P (`lrpe_op`, applied as factors);
 * - features:  φ_q(q, s) = real view of M_s q, φ_k(k, t) = real view of M_t k (linearizable).
 *
 * Attention may take the encoder itself (it satisfies `relative_encoding`); this wrapper only
 * adds the canonical form and the feature interface. `canonical_form_of(encoder)` works on a
 * bare encoder too.
 */
#pragma once

#include <lrpe/canonical/canonical_form.hpp>
#include <lrpe/canonical/linearizable.hpp>

namespace lrpe {
inline namespace v0 {
namespace canonical {

/**
 * A multiplicative relative encoding built from an LRPE encoder.
 * @tparam E `lrpe::encoder<P, L>` or a preset derived from one.
 */
template <class E>
  requires is_encoder_v<E>
class multiplicative {
 public:
  using encoder_type = E;
  using scalar = typename E::scalar;
  static constexpr bool is_linearizable = true;

  explicit multiplicative(E e) : e_(std::move(e)) {}

  [[nodiscard]] const E& encoder() const noexcept { return e_; }
  [[nodiscard]] index_t dim() const noexcept { return e_.dim(); }

  /// Direct formula: Re(q̃_sᴴ k̃_t).
  [[nodiscard]] double score(const scalar* q, position_t s, const scalar* k, position_t t) const {
    return e_.score(q, s, k, t);
  }

  /// Canonical form: one term (identity, Pᴴ Λ⁽ᵗ⁻ˢ⁾ P, identity).
  [[nodiscard]] auto canonical() const {
    return canonical_form(term(identity_map<scalar>(dim()), lrpe_op<E>(e_), identity_map<scalar>(dim())));
  }

  /// d, or 2d for complex encoders ([Re, Im]).
  [[nodiscard]] index_t feature_dim() const noexcept { return e_.feature_dim(); }
  /// The real view of M_position x (the same map for queries and keys).
  void features(side, const scalar* x, position_t position, scalar* out) const {
    e_.encode_features(position, x, out);
  }
  /// The encoder's own feature signature (attention's `feature_encoding`).
  void encode_features(position_t position, const scalar* x, scalar* out) const {
    e_.encode_features(position, x, out);
  }

 private:
  E e_;
};

template <class E>
multiplicative(E) -> multiplicative<E>;

/// The canonical form of a variant (`v.canonical()`), of a bare encoder (as multiplicative), or
/// a `canonical_form` itself (a copy).
template <class V>
[[nodiscard]] auto canonical_form_of(const V& v) {
  if constexpr (is_encoder_v<V>) return multiplicative<V>(v).canonical();
  else if constexpr (requires { v.canonical(); }) return v.canonical();
  else if constexpr (requires { v.dense_w(position_t{0}); v.q_hat(nullptr); }) return v;
  else static_assert(is_encoder_v<V>, "lrpe::canonical::canonical_form_of: V has no canonical form "
                                      "(not an lrpe::encoder, a variant with canonical(), or a canonical_form)");
}

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
