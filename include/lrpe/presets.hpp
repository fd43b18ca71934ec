// SPDX-License-Identifier: MIT
/**
 * @file presets.hpp
 * The paper's Table 1 (LRPE Types 1–8) and the encoders of the wider literature, as named
 * encoder types. Exact P, Λ and θ of each are in docs/math.md and shared REFERENCE.md.
 *
 * | preset | P | Λ | θ (default) |
 * |---|---|---|---|
 * | `type1`, `type2` | Householder (v seeded or given) | rotation, interleaved | type a on d − d mod 2, or given |
 * | `type3` | Householder (v given or seeded) | rotation | type a, or given |
 * | `type4` | Householder (v seeded or given) | permutation powers (π seeded or given) | – |
 * | `type5`, `type6` | odd-even | rotation, interleaved | type a, or given |
 * | `type7` | odd-even | permutation powers (π seeded or given) | – |
 * | `type8` | unitary DFT | complex phase | 10000^(−2j/d), j < d, or given |
 * | `mixed` | identity, or any P given | rotation of the first e = `mixed_rotated_dim(d)` | type a on e |
 * | `rope_gptj` | identity | rotation, interleaved | base^(−2k/e) |
 * | `rope_neox` | identity | rotation, split-half | base^(−2k/e) |
 * | `permuteformer` | identity | permutation powers (π seeded or given) | – |
 *
 * Every random parameter has two constructors: one from a seed, with the draws below, and one
 * that takes the parameter itself (a trained model's v, π or θ). Seeds: v =
 * `p::householder<T>::seeded(d, seed).vector()`, π = `lambda::permutation_power<T>::seeded(d,
 * seed + 1).indices()` (so Type 4's v and π are independent draws); the explicit constructor
 * given these draws builds the same encoder (v to rounding: it is normalised again). "Learned"
 * types (2, 3, 6) default to the initialisation of the reference code.
 */
#pragma once

#include <lrpe/encoder.hpp>
#include <lrpe/lambda/complex_phase.hpp>
#include <lrpe/lambda/identity.hpp>
#include <lrpe/lambda/permutation_power.hpp>
#include <lrpe/lambda/rotation.hpp>
#include <lrpe/p/dct.hpp>
#include <lrpe/p/dense.hpp>
#include <lrpe/p/dft.hpp>
#include <lrpe/p/householder.hpp>
#include <lrpe/p/identity.hpp>
#include <lrpe/p/permutation.hpp>

#include <cmath>
#include <concepts>
#include <vector>

namespace lrpe {
inline namespace v0 {

/// Default seed of the seeded presets.
inline constexpr std::uint64_t default_seed = 0x5eed'1a7e'0000'0001ULL;

namespace detail {
/// θ type a on the whole even part of d when `theta` is empty, else `theta`; `arg` names d in
/// the error (the preset's d, or the size of a given v).
inline std::vector<double> theta_or_type_a(index_t d, std::vector<double> theta, const char* arg = "dim") {
  if (!theta.empty()) return theta;
  detail::require_shape(d >= 2, "lrpe preset", arg, "must be >= 2 for rotation blocks", d);
  return freq::theta_a(d - d % 2);
}

/// `pi` when it has `d` entries: a mismatch is reported under the preset's argument name
/// ('pi.size()') rather than as the encoder's "lambda.dim() must equal p.dim()".
inline const std::vector<index_t>& require_pi_size(const std::vector<index_t>& pi, std::size_t d, const char* where) {
  detail::require_shape(pi.size() == d, where, "pi.size()", detail::lazy_concat("must equal v.size() = ", d), pi.size());
  return pi;
}

// The width a preset's P is built with, checked first. The base constructor's two arguments
// (P, then Λ) are evaluated in an unspecified order (GCC right to left, clang left to right):
// a bad width checked only inside Λ would be reported as P's 'dim' by one compiler.

/// d = pi.size() of a preset given π, nonzero.
inline index_t pi_dim(const std::vector<index_t>& pi, const char* where) {
  detail::require_shape(!pi.empty(), where, "pi.size()", "must be >= 1 (a permutation of 0..d-1)", pi.size());
  return static_cast<index_t>(pi.size());
}

/// RoPE's d, at least 2: one pair of features.
inline index_t rope_dim(index_t d) {
  detail::require_shape(d >= 2, "lrpe::rope", "d", "must be >= 2 (RoPE rotates pairs of features)", d);
  return d;
}
}  // namespace detail

/// Rotation-block encoders over any P.
template <class P, real_scalar T>
using rotation_encoder = encoder<P, lambda::rotation<T>>;

/// LRPE Type 1: Householder (fixed v) × rotation blocks, θ type a.
template <real_scalar T>
class type1 : public encoder<p::householder<T>, lambda::rotation<T>> {
  using base = encoder<p::householder<T>, lambda::rotation<T>>;

 public:
  /// v = `p::householder<T>::seeded(d, seed).vector()`; θ type a unless given.
  explicit type1(index_t d, std::uint64_t seed = default_seed, std::vector<double> theta = {})
      : base(p::householder<T>::seeded(d, seed),
             lambda::rotation<T>(d, detail::theta_or_type_a(d, std::move(theta)))) {}
  /// A trained model's v (replaces the seeded draw; normalised as by `p::householder`, d =
  /// v.size()) and θ (type a when empty). Errors name 'v', 'v.size()', 'theta' or 'theta.size()'.
  explicit type1(const std::vector<T>& v, std::vector<double> theta = {})
      : base(p::householder<T>(v),
             lambda::rotation<T>(static_cast<index_t>(v.size()),
                                 detail::theta_or_type_a(static_cast<index_t>(v.size()), std::move(theta), "v.size()"))) {}
};

/// LRPE Type 2: Householder (fixed v) × rotation blocks with learned θ (initialised to type a).
template <real_scalar T>
class type2 : public encoder<p::householder<T>, lambda::rotation<T>> {
  using base = encoder<p::householder<T>, lambda::rotation<T>>;

 public:
  /// v = `p::householder<T>::seeded(d, seed).vector()`; the learned θ (type a when empty).
  explicit type2(index_t d, std::uint64_t seed = default_seed, std::vector<double> theta = {})
      : base(p::householder<T>::seeded(d, seed),
             lambda::rotation<T>(d, detail::theta_or_type_a(d, std::move(theta)))) {}
  /// A trained model's fixed v (replaces the seeded draw; normalised, d = v.size()) and learned
  /// θ (type a when empty).
  explicit type2(const std::vector<T>& v, std::vector<double> theta = {})
      : base(p::householder<T>(v),
             lambda::rotation<T>(static_cast<index_t>(v.size()),
                                 detail::theta_or_type_a(static_cast<index_t>(v.size()), std::move(theta), "v.size()"))) {}
};

/// LRPE Type 3: learned Householder v × rotation blocks with learned θ.
template <real_scalar T>
class type3 : public encoder<p::householder<T>, lambda::rotation<T>> {
  using base = encoder<p::householder<T>, lambda::rotation<T>>;

 public:
  /// The learned v (replaces the seeded draw; normalised here by ‖v‖, where the reference code
  /// divides by ‖v‖ + 1e-6 and so is orthogonal only to ~1e-6) and θ (type a when empty);
  /// d = v.size(). An empty or one-entry v (with θ type a) is a shape_error naming 'v.size()'.
  explicit type3(const std::vector<T>& v, std::vector<double> theta = {})
      : base(p::householder<T>(v),
             lambda::rotation<T>(static_cast<index_t>(v.size()),
                                 detail::theta_or_type_a(static_cast<index_t>(v.size()), std::move(theta), "v.size()"))) {}
  /// Initialisation as in the reference code: v = `p::householder<T>::seeded(d, seed).vector()`,
  /// θ type a.
  explicit type3(index_t d, std::uint64_t seed = default_seed)
      : base(p::householder<T>::seeded(d, seed), lambda::rotation<T>(d, detail::theta_or_type_a(d, {}))) {}
};

/// LRPE Type 4: Householder (fixed v) × permutation powers.
template <real_scalar T>
class type4 : public encoder<p::householder<T>, lambda::permutation_power<T>> {
  using base = encoder<p::householder<T>, lambda::permutation_power<T>>;

 public:
  /// v = `p::householder<T>::seeded(d, seed).vector()`, π =
  /// `lambda::permutation_power<T>::seeded(d, seed + 1).indices()`.
  explicit type4(index_t d, std::uint64_t seed = default_seed)
      : base(p::householder<T>::seeded(d, seed), lambda::permutation_power<T>::seeded(d, seed + 1)) {}
  /// A trained model's v (normalised) and π (a permutation of 0..d−1 with d = v.size(),
  /// Λ⁽ˢ⁾x[j] = x[π^s(j)]), replacing both seeded draws. Errors name 'v', 'v.size()', 'pi' or
  /// 'pi.size()'.
  type4(const std::vector<T>& v, const std::vector<index_t>& pi)
      : base(p::householder<T>(v), lambda::permutation_power<T>(detail::require_pi_size(pi, v.size(), "lrpe::type4"))) {}
};

/// LRPE Type 5: odd-even permutation × rotation blocks, θ type a (= split-half RoPE for even d;
/// for odd d the pairs differ, docs/math.md).
template <real_scalar T>
class type5 : public encoder<p::odd_even<T>, lambda::rotation<T>> {
  using base = encoder<p::odd_even<T>, lambda::rotation<T>>;

 public:
  explicit type5(index_t d, std::vector<double> theta = {})
      : base(p::odd_even<T>(d), lambda::rotation<T>(d, detail::theta_or_type_a(d, std::move(theta)))) {}
};

/// LRPE Type 6: odd-even permutation × rotation blocks with learned θ (initialised to type a).
template <real_scalar T>
class type6 : public encoder<p::odd_even<T>, lambda::rotation<T>> {
  using base = encoder<p::odd_even<T>, lambda::rotation<T>>;

 public:
  explicit type6(index_t d, std::vector<double> theta = {})
      : base(p::odd_even<T>(d), lambda::rotation<T>(d, detail::theta_or_type_a(d, std::move(theta)))) {}
};

/// LRPE Type 7: odd-even permutation × permutation powers.
template <real_scalar T>
class type7 : public encoder<p::odd_even<T>, lambda::permutation_power<T>> {
  using base = encoder<p::odd_even<T>, lambda::permutation_power<T>>;

 public:
  /// π = `lambda::permutation_power<T>::seeded(d, seed + 1).indices()`.
  explicit type7(index_t d, std::uint64_t seed = default_seed)
      : base(p::odd_even<T>(d), lambda::permutation_power<T>::seeded(d, seed + 1)) {}
  /// A trained model's π (replaces the seeded draw; d = pi.size()). Errors name 'pi' or
  /// 'pi.size()'.
  explicit type7(const std::vector<index_t>& pi)
      : base(p::odd_even<T>(detail::pi_dim(pi, "lrpe::type7")), lambda::permutation_power<T>(pi)) {}
};

/// LRPE Type 8: unitary DFT (full d bins, 1/√d) × complex phase θ_j = 10000^(−2j/d).
template <real_scalar T>
class type8 : public encoder<p::dft<T>, lambda::complex_phase<T>> {
  using base = encoder<p::dft<T>, lambda::complex_phase<T>>;

 public:
  explicit type8(index_t d, p::dft_method method = p::dft_method::automatic)
      : base(p::dft<T>(d, method), lambda::complex_phase<T>(d)) {}
  type8(index_t d, std::vector<double> theta, p::dft_method method = p::dft_method::automatic)
      : base(p::dft<T>(d, method), lambda::complex_phase<T>(d, std::move(theta))) {}
};

/**
 * The rotated width e of the LRPE reference code's "mixed" core (Solution 2 with about half
 * the features left as identity, the paper's "first version" of Appendix C.7): e = ⌊d/2⌋,
 * rounded up to even. d = 3..5 → 2, 6..9 → 4, 64 → 32.
 * @throws shape_error naming 'd' if d < 3 (the reference asserts d ≥ 3).
 */
inline index_t mixed_rotated_dim(index_t d) {
  detail::require_shape(d >= 3, "lrpe::mixed_rotated_dim", "d", "must be >= 3 (the mixed core leaves features unrotated)",
                        d);
  const index_t e = d / 2;
  return e + e % 2;
}

/**
 * LRPE "mixed" core: Λ⁽ˢ⁾ rotates only the first e = `mixed_rotated_dim(d)` features, pairs
 * (2k, 2k+1) at angles s·θ_k with θ_k = 10000^(−2k/e) (θ type a normalised by e, not by d),
 * and passes the other d − e through. With P = identity this is `rope_gptj<T>(d, 1e4, e)`.
 *
 * The reference code (fairseq-evo `Urpe`, core_matrix 2, `mix_rope`) combines it with identity,
 * DCT and Householder P; give `p::dct<T>(d)` or a `p::householder<T>` for those. The paper's
 * text (C.7) writes q = ⌊d/2⌋ identity dims (an odd rotated width for some d) and
 * 10000^(−2t/d); its code, followed here, rounds e up to even and normalises θ by e.
 * @tparam P the P policy (identity by default), with scalar T.
 */
template <real_scalar T, p_policy P = p::identity<T>>
class mixed : public encoder<P, lambda::rotation<T>> {
  using base = encoder<P, lambda::rotation<T>>;

 public:
  /// P = identity over d features.
  explicit mixed(index_t d)
    requires std::same_as<P, p::identity<T>>
      : mixed(p::identity<T>(checked_dim(d))) {}
  /**
   * Any P (d = p.dim()) and θ: the reference's type a on e when empty; else exactly e/2
   * frequencies (e.g. `freq::theta_b(mixed_rotated_dim(d), L)`), a shape_error naming
   * 'theta.size()' otherwise.
   */
  explicit mixed(P p, std::vector<double> theta = {}) : base(p, make_rotation(p.dim(), std::move(theta))) {}

 private:
  // d < 3 is reported as mixed's 'd' before p::identity would report d < 1 as 'dim'.
  static index_t checked_dim(index_t d) {
    static_cast<void>(mixed_rotated_dim(d));
    return d;
  }
  static lambda::rotation<T> make_rotation(index_t d, std::vector<double> theta) {
    const index_t e = mixed_rotated_dim(d);
    if (theta.empty()) return lambda::rotation<T>(d, freq::theta_a(e));
    detail::require_shape(2 * static_cast<index_t>(theta.size()) == e, "lrpe::mixed", "theta.size()",
                          detail::lazy_concat("must equal mixed_rotated_dim(d)/2 = ", e / 2), theta.size());
    return lambda::rotation<T>(d, std::move(theta));
  }
};

/**
 * RoPE with GPT-J pairing (2k, 2k+1): identity × rotation blocks, θ_k = base^(−2k/e).
 * @param d the head width; @param base the frequency base; @param rotary_dim the rotated
 * width e (even, ≤ d; 0 means the whole even part of d), the rest passes through.
 */
template <real_scalar T>
class rope_gptj : public encoder<p::identity<T>, lambda::rotation<T>> {
  using base_t = encoder<p::identity<T>, lambda::rotation<T>>;

 public:
  explicit rope_gptj(index_t d, double base = 10000.0, index_t rotary_dim = 0)
      : base_t(p::identity<T>(detail::rope_dim(d)),
               lambda::rotation<T>(d, rope_theta(d, base, rotary_dim), pairing::interleaved)) {}

  static std::vector<double> rope_theta(index_t d, double base, index_t rotary_dim) {
    // d is checked first: with rotary_dim = 0 (every feature) a d below 2 would otherwise be
    // reported as the rotary_dim it implies.
    detail::rope_dim(d);
    if (rotary_dim == 0) rotary_dim = d - d % 2;
    detail::require_shape(rotary_dim >= 2 && rotary_dim % 2 == 0 && rotary_dim <= d, "lrpe::rope",
                          "rotary_dim", detail::lazy_concat("must be even and in [2, d = ", d, "]"), rotary_dim);
    return freq::rope(rotary_dim / 2, base, rotary_dim);
  }
};

/// RoPE with GPT-NeoX / HF LLaMA pairing (k, k + e/2): identity × split-half rotation blocks.
template <real_scalar T>
class rope_neox : public encoder<p::identity<T>, lambda::rotation<T>> {
  using base_t = encoder<p::identity<T>, lambda::rotation<T>>;

 public:
  explicit rope_neox(index_t d, double base = 10000.0, index_t rotary_dim = 0)
      : base_t(p::identity<T>(detail::rope_dim(d)),
               lambda::rotation<T>(d, rope_gptj<T>::rope_theta(d, base, rotary_dim), pairing::split_half)) {}
};

/// PermuteFormer: identity × powers of one permutation (the decay r^{s−t} belongs to linear
/// attention, not to the encoder: `permuteformer_decays`).
template <real_scalar T>
class permuteformer : public encoder<p::identity<T>, lambda::permutation_power<T>> {
  using base = encoder<p::identity<T>, lambda::permutation_power<T>>;

 public:
  /// π = `lambda::permutation_power<T>::seeded(d, seed + 1).indices()`.
  explicit permuteformer(index_t d, std::uint64_t seed = default_seed)
      : base(p::identity<T>(d), lambda::permutation_power<T>::seeded(d, seed + 1)) {}
  /// A trained model's π for one head (replaces the seeded draw; d = pi.size(); PermuteFormer
  /// draws one per head): x̃_s[j] = x[π^s(j)], the reference's `gather` of its expanded table.
  /// Errors name 'pi' or 'pi.size()'.
  explicit permuteformer(const std::vector<index_t>& pi)
      : base(p::identity<T>(detail::pi_dim(pi, "lrpe::permuteformer")), lambda::permutation_power<T>(pi)) {}
};

/**
 * PermuteFormer's decay of head h of H: r_h = sigmoid(3h/H + 2), from r_0 = sigmoid(2) ≈ 0.881
 * up to below sigmoid(5) ≈ 0.993 (0.881 … 0.990 for H = 8). Causal linear attention weighs key
 * t for query s by r_h^{s−t}: pass it as `linear_options::decay`, or all heads' as `head_decays`.
 * @throws shape_error naming 'heads' if heads < 1, naming 'head' unless 0 ≤ head < heads.
 */
inline double permuteformer_decay(index_t head, index_t heads) {
  constexpr const char* where = "lrpe::permuteformer_decay";
  detail::require_shape(heads >= 1, where, "heads", "must be >= 1", heads);
  detail::require_shape(head >= 0 && head < heads, where, "head", detail::lazy_concat("must be in [0, heads = ", heads, ")"),
                        head);
  // The reference's order of operations: arange(H) / H * 3 + 2.
  const double x = static_cast<double>(head) / static_cast<double>(heads) * 3.0 + 2.0;
  return 1.0 / (1.0 + std::exp(-x));
}

/// r_h = `permuteformer_decay(h, heads)` for h = 0..heads−1, ready for
/// `linear_options::head_decays`. @throws shape_error naming 'heads' if heads < 1.
inline std::vector<double> permuteformer_decays(index_t heads) {
  detail::require_shape(heads >= 1, "lrpe::permuteformer_decays", "heads", "must be >= 1", heads);
  std::vector<double> r(static_cast<std::size_t>(heads));
  for (index_t h = 0; h < heads; ++h) r[static_cast<std::size_t>(h)] = permuteformer_decay(h, heads);
  return r;
}

}  // namespace v0
}  // namespace lrpe
