/**
 * @file presets.hpp
 * The paper's Table 1 (LRPE Types 1–8) and the encoders of the wider literature, as named
 * encoder types. Exact P, Λ and θ of each are in docs/math.md and shared REFERENCE.md.
 *
 * | preset | P | Λ | θ (default) |
 * |---|---|---|---|
 * | `type1`, `type2` | Householder (v seeded) | rotation, interleaved | type a on d − d mod 2 |
 * | `type3` | Householder (v given or seeded) | rotation | type a, or given |
 * | `type4` | Householder (v seeded) | permutation powers (π seeded) | – |
 * | `type5`, `type6` | odd-even | rotation, interleaved | type a |
 * | `type7` | odd-even | permutation powers (π seeded) | – |
 * | `type8` | unitary DFT | complex phase | 10000^(−2j/d), j < d |
 * | `rope_gptj` | identity | rotation, interleaved | base^(−2k/e) |
 * | `rope_neox` | identity | rotation, split-half | base^(−2k/e) |
 * | `permuteformer` | identity | permutation powers (π seeded) | – |
 *
 * "Learned" types (2, 3, 6) take their learned parameters (θ, v) as constructor arguments; they
 * default to the initialisation of the reference code. Seeds: v = `householder::seeded(d, seed)`,
 * π = `permutation_power::seeded(d, seed + 1)` (so Type 4's v and π are independent draws).
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
}  // namespace detail

/// Rotation-block encoders over any P.
template <class P, real_scalar T>
using rotation_encoder = encoder<P, lambda::rotation<T>>;

/// LRPE Type 1: Householder (fixed, seeded v) × rotation blocks, θ type a.
template <real_scalar T>
class type1 : public encoder<p::householder<T>, lambda::rotation<T>> {
  using base = encoder<p::householder<T>, lambda::rotation<T>>;

 public:
  explicit type1(index_t d, std::uint64_t seed = default_seed, std::vector<double> theta = {})
      : base(p::householder<T>::seeded(d, seed),
             lambda::rotation<T>(d, detail::theta_or_type_a(d, std::move(theta)))) {}
};

/// LRPE Type 2: Householder (fixed v) × rotation blocks with learned θ (initialised to type a).
template <real_scalar T>
class type2 : public encoder<p::householder<T>, lambda::rotation<T>> {
  using base = encoder<p::householder<T>, lambda::rotation<T>>;

 public:
  explicit type2(index_t d, std::uint64_t seed = default_seed, std::vector<double> theta = {})
      : base(p::householder<T>::seeded(d, seed),
             lambda::rotation<T>(d, detail::theta_or_type_a(d, std::move(theta)))) {}
};

/// LRPE Type 3: learned Householder v × rotation blocks with learned θ.
template <real_scalar T>
class type3 : public encoder<p::householder<T>, lambda::rotation<T>> {
  using base = encoder<p::householder<T>, lambda::rotation<T>>;

 public:
  /// Learned parameters given explicitly (v normalised here; d = v.size()). An empty or
  /// one-entry v (with θ type a) is a shape_error naming 'v.size()'.
  type3(const std::vector<T>& v, std::vector<double> theta = {})
      : base(p::householder<T>(v),
             lambda::rotation<T>(static_cast<index_t>(v.size()),
                                 detail::theta_or_type_a(static_cast<index_t>(v.size()), std::move(theta), "v.size()"))) {}
  /// Initialisation as in the reference code (v ~ N(0, I), θ type a).
  explicit type3(index_t d, std::uint64_t seed = default_seed)
      : base(p::householder<T>::seeded(d, seed), lambda::rotation<T>(d, detail::theta_or_type_a(d, {}))) {}
};

/// LRPE Type 4: Householder (fixed v) × permutation powers.
template <real_scalar T>
class type4 : public encoder<p::householder<T>, lambda::permutation_power<T>> {
  using base = encoder<p::householder<T>, lambda::permutation_power<T>>;

 public:
  explicit type4(index_t d, std::uint64_t seed = default_seed)
      : base(p::householder<T>::seeded(d, seed), lambda::permutation_power<T>::seeded(d, seed + 1)) {}
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
  explicit type7(index_t d, std::uint64_t seed = default_seed)
      : base(p::odd_even<T>(d), lambda::permutation_power<T>::seeded(d, seed + 1)) {}
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
 * RoPE with GPT-J pairing (2k, 2k+1): identity × rotation blocks, θ_k = base^(−2k/e).
 * @param d the head width; @param base the frequency base; @param rotary_dim the rotated
 * width e (even, ≤ d; 0 means the whole even part of d), the rest passes through.
 */
template <real_scalar T>
class rope_gptj : public encoder<p::identity<T>, lambda::rotation<T>> {
  using base_t = encoder<p::identity<T>, lambda::rotation<T>>;

 public:
  explicit rope_gptj(index_t d, double base = 10000.0, index_t rotary_dim = 0)
      : base_t(p::identity<T>(d), lambda::rotation<T>(d, rope_theta(d, base, rotary_dim), pairing::interleaved)) {}

  static std::vector<double> rope_theta(index_t d, double base, index_t rotary_dim) {
    // d is checked first: with rotary_dim = 0 (every feature) a d below 2 would otherwise be
    // reported as the rotary_dim it implies.
    detail::require_shape(d >= 2, "lrpe::rope", "d", "must be >= 2 (RoPE rotates pairs of features)", d);
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
      : base_t(p::identity<T>(d),
               lambda::rotation<T>(d, rope_gptj<T>::rope_theta(d, base, rotary_dim), pairing::split_half)) {}
};

/// PermuteFormer: identity × powers of one seeded permutation (the decay r^{s−t} belongs to
/// linear attention, not to the encoder).
template <real_scalar T>
class permuteformer : public encoder<p::identity<T>, lambda::permutation_power<T>> {
  using base = encoder<p::identity<T>, lambda::permutation_power<T>>;

 public:
  explicit permuteformer(index_t d, std::uint64_t seed = default_seed)
      : base(p::identity<T>(d), lambda::permutation_power<T>::seeded(d, seed + 1)) {}
};

}  // namespace v0
}  // namespace lrpe
