// SPDX-License-Identifier: MIT
/**
 * @file scaling.hpp
 * RoPE context-extension scalings of a frequency schedule, as HF transformers'
 * `modeling_rope_utils.py` defines them (linear, dynamic NTK, YaRN, llama3). Each takes the
 * unscaled θ (e.g. `freq::rope(dim/2, base)`) or its parameters and returns the scaled θ, to be
 * passed to `lambda::rotation` or a RoPE preset's θ argument.
 *
 * | scaling | θ'_k |
 * |---|---|
 * | `linear(θ, f)` | θ_k / f (position interpolation) |
 * | `dynamic_ntk_base(base, f, L, L_max, dim)` | a new base: base·((f·L/L_max) − (f − 1))^(dim/(dim−2)) when L > L_max |
 * | `yarn(θ, f, L_orig, base, β_fast = 32, β_slow = 1, truncate = true)` | θ/f·ramp + θ·(1 − ramp), ramp over the correction range |
 * | `llama3(θ, f = 8, low = 1, high = 4, L_orig = 8192)` | θ/f for long wavelengths, θ for short, smooth between |
 * | `longrope(θ, short, long, L, L_orig)` | θ_k / long_k when L > L_orig, else θ_k / short_k (Phi-3) |
 *
 * Two caveats users hit (HF issues 25104, 25306): dynamic NTK changes the base with the current
 * length L, so keys cached under the old base are inconsistent with queries under the new one —
 * re-encode the cache or fix L; YaRN also scales cos and sin by `yarn_attention_factor(f)`
 * (0.1·ln f + 1, or the mscale ratio of DeepSeek-style configs), which is not unitary: lrpe keeps
 * encoders unitary and leaves that factor to the attention scale (multiply the softmax scale by
 * its square).
 *
 * Checked against transformers' own functions for every scaling type (docs/math.md, the
 * paragraph on scalings): inverse frequencies, NTK bases and attention factors agree to double
 * rounding. lrpe takes every value explicitly: HF's defaults for a missing
 * factor, β, L_orig or attention factor are tabled in docs/math.md ("Reading a Hugging Face
 * config"); an explicit `attention_factor` is the caller's own number.
 */
#pragma once

#include <lrpe/freq/schedules.hpp>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <span>
#include <utility>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace freq {

namespace detail_ {
inline void require_factor(double factor, const char* where) {
  if (!std::isfinite(factor)) throw domain_error(detail::concat(where, ": argument 'factor' must be finite; got ", factor));
  detail::require_parameter(factor >= 1.0, where, "factor", "must be >= 1", factor);
}
inline void require_positive(double x, const char* where, const char* arg) {
  if (!std::isfinite(x)) throw domain_error(detail::concat(where, ": argument '", arg, "' must be finite; got ", x));
  detail::require_parameter(x > 0, where, arg, "must be > 0", x);
}
}  // namespace detail_

/// Linear scaling (position interpolation): θ_k / factor.
inline std::vector<double> linear(std::span<const double> theta, double factor) {
  constexpr const char* where = "lrpe::freq::linear";
  detail_::require_factor(factor, where);
  std::vector<double> out = user(theta);
  for (auto& x : out) x /= factor;
  return out;
}

/**
 * Dynamic NTK: the base to use at current length `length` (unchanged while length ≤ max_length):
 * base·((factor·L/L_max) − (factor − 1))^(dim/(dim−2)).
 * Example: base 1e4, factor 2, L 8192, L_max 4096, dim 128 → 30527.74.
 */
inline double dynamic_ntk_base(double base, double factor, double length, double max_length, index_t dim) {
  constexpr const char* where = "lrpe::freq::dynamic_ntk_base";
  detail_::require_base(base, where);
  detail_::require_factor(factor, where);
  detail_::require_positive(length, where, "length");
  detail_::require_positive(max_length, where, "max_length");
  detail::require_shape(dim > 2 && dim % 2 == 0, where, "dim", "must be even and > 2", dim);
  if (length <= max_length) return base;
  const auto d = static_cast<double>(dim);
  const double scaled = base * std::pow(factor * length / max_length - (factor - 1.0), d / (d - 2.0));
  if (!std::isfinite(scaled))
    throw parameter_error(detail::concat(where, ": argument 'length' must keep the scaled base finite (base = ", base,
                                         ", factor = ", factor, ", max_length = ", max_length, ", dim = ", dim,
                                         "); got ", length, ", which gives ", scaled));
  return scaled;
}

namespace detail_ {
/// dim·ln(L_orig/(2π r)) / (2 ln base), the ratio L_orig/(2π r) within double's range (else a
/// parameter_error naming `arg`, the argument that gave r).
inline double correction_dim(double rotations, index_t dim, double base, double original_length, const char* where,
                             const char* arg) {
  const double ratio = original_length / (2.0 * std::numbers::pi * rotations);
  if (!(std::isfinite(ratio) && ratio > 0))
    throw parameter_error(detail::concat(where, ": argument '", arg,
                                         "' must keep original_length/(2*pi*", arg,
                                         ") a finite, nonzero double (original_length = ", original_length, "); got ",
                                         rotations));
  return static_cast<double>(dim) * std::log(ratio) / (2.0 * std::log(base));
}
}  // namespace detail_

/// YaRN's correction dimension for `rotations` full turns over `original_length`:
/// dim·ln(L_orig/(2π r)) / (2 ln base).
/// @throws domain_error / parameter_error unless rotations, original_length > 0, dim ≥ 1, base > 1
///         and L_orig/(2π r) is a finite, nonzero double.
inline double yarn_correction_dim(double rotations, index_t dim, double base, double original_length) {
  constexpr const char* where = "lrpe::freq::yarn_correction_dim";
  detail_::require_positive(rotations, where, "rotations");
  detail::require_shape(dim >= 1, where, "dim", "must be >= 1", dim);
  detail_::require_base(base, where);
  detail_::require_positive(original_length, where, "original_length");
  return detail_::correction_dim(rotations, dim, base, original_length, where, "rotations");
}

/**
 * YaRN ("NTK-by-parts"): θ'_k = θ_k/factor·ramp_k + θ_k·(1 − ramp_k), with
 * ramp_k = clamp((k − low)/(high − low), 0, 1), low = ⌊corr(β_fast)⌋, high = ⌈corr(β_slow)⌉ clipped
 * to [0, dim − 1] (dim = 2·θ.size()). High frequencies (small k) are kept, low ones interpolated.
 * `truncate = false` (HF's `rope_parameters["truncate"]`, e.g. gpt-oss) keeps low and high
 * unrounded.
 */
inline std::vector<double> yarn(std::span<const double> theta, double factor, double original_length,
                                double base = 10000.0, double beta_fast = 32.0, double beta_slow = 1.0,
                                bool truncate = true) {
  constexpr const char* where = "lrpe::freq::yarn";
  detail_::require_factor(factor, where);
  detail_::require_base(base, where);
  detail_::require_positive(original_length, where, "original_length");
  detail_::require_positive(beta_fast, where, "beta_fast");
  detail_::require_positive(beta_slow, where, "beta_slow");
  // low = corr(β_fast) ≤ high = corr(β_slow): more rotations, a lower correction dimension
  detail::require_parameter(beta_fast >= beta_slow, where, "beta_fast",
                            detail::lazy_concat("must be >= beta_slow = ", beta_slow, " (the ramp runs from beta_fast's "
                                                "correction dimension up to beta_slow's)"),
                            beta_fast);
  std::vector<double> out = user(theta);
  const auto dim = 2 * static_cast<index_t>(out.size());
  detail::require_shape(dim >= 2, where, "theta.size()", "must be >= 1", out.size());
  double low = detail_::correction_dim(beta_fast, dim, base, original_length, where, "beta_fast");
  double high = detail_::correction_dim(beta_slow, dim, base, original_length, where, "beta_slow");
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (high == low) high += 0.001;  // as HF: avoid a zero-width ramp
  for (std::size_t k = 0; k < out.size(); ++k) {
    const double ramp = std::clamp((static_cast<double>(k) - low) / (high - low), 0.0, 1.0);
    out[k] = out[k] / factor * ramp + out[k] * (1.0 - ramp);
  }
  return out;
}

/// YaRN's attention factor 0.1·ln(factor) + 1 (1.138629 for factor 4); 1 for factor ≤ 1.
/// @throws domain_error if factor is not finite.
inline double yarn_attention_factor(double factor) {
  if (!std::isfinite(factor))
    throw domain_error(detail::concat("lrpe::freq::yarn_attention_factor: argument 'factor' must be finite; got ", factor));
  return factor <= 1.0 ? 1.0 : 0.1 * std::log(factor) + 1.0;
}

/**
 * YaRN's attention factor with HF's `mscale` and `mscale_all_dim` (DeepSeek-V2/V3 configs):
 * m(f, mscale)/m(f, mscale_all_dim) with m(f, c) = 0.1·c·ln f + 1 (1 for f ≤ 1) when both are
 * nonzero, else `yarn_attention_factor(f)` (0 stands for HF's unset). Example: f = 40,
 * mscale = mscale_all_dim = 1 → 1; mscale = 2, mscale_all_dim = 1 → 1.26948.
 * @throws domain_error (a non-finite argument), parameter_error (a negative mscale).
 */
inline double yarn_attention_factor(double factor, double mscale, double mscale_all_dim) {
  constexpr const char* where = "lrpe::freq::yarn_attention_factor";
  const double plain = yarn_attention_factor(factor);  // checks factor
  for (const auto& [x, arg] : {std::pair{mscale, "mscale"}, std::pair{mscale_all_dim, "mscale_all_dim"}}) {
    if (!std::isfinite(x)) throw domain_error(detail::concat(where, ": argument '", arg, "' must be finite; got ", x));
    detail::require_parameter(x >= 0, where, arg, "must be >= 0 (0: unset)", x);
  }
  if (mscale == 0 || mscale_all_dim == 0 || factor <= 1.0) return plain;
  // (0.1·c₁·ln f + 1)/(0.1·c₂·ln f + 1), as (a + 1/c₁)/(a + 1/c₂)·(c₁/c₂) with a = 0.1·ln f
  // when a numerator or denominator overflows (both mscales near DBL_MAX: the ratio is finite)
  const double a = 0.1 * std::log(factor);
  const double num = a * mscale + 1.0, den = a * mscale_all_dim + 1.0;
  double ratio = num / den;
  if (!std::isfinite(num) || !std::isfinite(den)) ratio = (a + 1.0 / mscale) / (a + 1.0 / mscale_all_dim) * (mscale / mscale_all_dim);
  if (!std::isfinite(ratio))
    throw parameter_error(detail::concat(where, ": argument 'mscale' must keep the factor finite (mscale_all_dim = ",
                                         mscale_all_dim, ", factor = ", factor, "); got ", mscale, ", which gives ",
                                         ratio));
  return ratio;
}

/**
 * LongRoPE (Phi-3, HF `rope_type = "longrope"`): θ'_k = θ_k / ext_k with ext = `long_factor` when
 * the current length L > L_orig, else `short_factor` (L = 0: no length given, short). As with
 * dynamic NTK, crossing L_orig changes every angle, so keys cached under the short factors do not
 * match queries under the long ones: re-encode the cache, or fix L.
 * @throws shape_error (a factor list whose size is not θ.size()), domain_error (a non-finite
 *         factor, L or L_orig), parameter_error (a factor ≤ 0, L < 0, L_orig ≤ 0).
 */
inline std::vector<double> longrope(std::span<const double> theta, std::span<const double> short_factor,
                                    std::span<const double> long_factor, double length, double original_length) {
  constexpr const char* where = "lrpe::freq::longrope";
  std::vector<double> out = user(theta);
  for (const auto& [list, arg] : {std::pair{short_factor, "short_factor"}, std::pair{long_factor, "long_factor"}}) {
    detail::require_shape(list.size() == out.size(), where, arg,
                          detail::lazy_concat("must have theta.size() = ", out.size(), " entries"), list.size());
    for (std::size_t k = 0; k < list.size(); ++k) {
      if (!std::isfinite(list[k]))
        throw domain_error(detail::concat(where, ": argument '", arg, "' must be finite; got ", list[k], " at index ", k));
      detail::require_parameter(list[k] > 0, where, arg, detail::lazy_concat("must be > 0 (at index ", k, ")"), list[k]);
    }
  }
  if (!std::isfinite(length)) throw domain_error(detail::concat(where, ": argument 'length' must be finite; got ", length));
  detail::require_parameter(length >= 0, where, "length", "must be >= 0 (0: no length, the short factors)", length);
  detail_::require_positive(original_length, where, "original_length");
  const bool long_list = length > original_length;
  const std::span<const double> ext = long_list ? long_factor : short_factor;
  for (std::size_t k = 0; k < out.size(); ++k) out[k] /= ext[k];
  detail::require_frequencies_from(out, where, long_list ? "long_factor" : "short_factor", ext);
  return out;
}

/**
 * Per-frequency factors, as ggml's `freq_factors` (the `rope_freqs.weight` tensor that GGUF files
 * of LLaMA 3.1 and Phi-3 carry): θ_j / f_j, for factors computed elsewhere (a converter's
 * llama3 or long-rope table, or a checkpoint's own).
 * @throws shape_error (factors.size() ≠ θ.size()), domain_error (a non-finite factor),
 *         parameter_error (a factor ≤ 0).
 */
inline std::vector<double> with_factors(std::span<const double> theta, std::span<const double> factors) {
  constexpr const char* where = "lrpe::freq::with_factors";
  std::vector<double> out = user(theta);
  detail::require_shape(factors.size() == out.size(), where, "factors",
                        detail::lazy_concat("must have theta.size() = ", out.size(), " entries"), factors.size());
  for (std::size_t k = 0; k < factors.size(); ++k) {
    if (!std::isfinite(factors[k]))
      throw domain_error(detail::concat(where, ": argument 'factors' must be finite; got ", factors[k], " at index ", k));
    detail::require_parameter(factors[k] > 0, where, "factors", detail::lazy_concat("must be > 0 (at index ", k, ")"),
                              factors[k]);
    out[k] /= factors[k];
  }
  detail::require_frequencies_from(out, where, "factors", factors);
  return out;
}

/// LongRoPE's attention factor √(1 + ln f / ln L_orig), 1 for f ≤ 1 (HF's default; Phi-3 takes
/// f = max_position_embeddings / L_orig). It multiplies cos and sin in HF: as YaRN's, lrpe leaves
/// it to the attention scale (docs/math.md).
/// @throws domain_error (non-finite), parameter_error (L_orig ≤ 1).
inline double longrope_attention_factor(double factor, double original_length) {
  constexpr const char* where = "lrpe::freq::longrope_attention_factor";
  if (!std::isfinite(factor)) throw domain_error(detail::concat(where, ": argument 'factor' must be finite; got ", factor));
  if (!std::isfinite(original_length))
    throw domain_error(detail::concat(where, ": argument 'original_length' must be finite; got ", original_length));
  detail::require_parameter(original_length > 1, where, "original_length", "must be > 1", original_length);
  return factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(factor) / std::log(original_length));
}

/**
 * Llama 3 scaling: with wavelength λ_k = 2π/θ_k, θ_k/factor when λ_k > L_orig/low_freq_factor,
 * θ_k when λ_k < L_orig/high_freq_factor, and between them
 * (1 − s)·θ_k/factor + s·θ_k with s = (L_orig/λ_k − low)/(high − low). A negative θ_k is
 * scaled as |θ_k| would be.
 * @throws domain_error (a non-finite argument), parameter_error (factor < 1, a factor ≤ 0,
 *         high_freq_factor ≤ low_freq_factor).
 */
inline std::vector<double> llama3(std::span<const double> theta, double factor = 8.0, double low_freq_factor = 1.0,
                                  double high_freq_factor = 4.0, double original_length = 8192.0) {
  constexpr const char* where = "lrpe::freq::llama3";
  detail_::require_factor(factor, where);
  detail_::require_positive(low_freq_factor, where, "low_freq_factor");
  detail_::require_positive(original_length, where, "original_length");
  detail_::require_positive(high_freq_factor, where, "high_freq_factor");  // finite: an infinite one scaled every θ
  detail::require_parameter(high_freq_factor > low_freq_factor, where, "high_freq_factor",
                            detail::lazy_concat("must be > low_freq_factor = ", low_freq_factor), high_freq_factor);
  std::vector<double> out = user(theta);
  const double low_wavelen = original_length / low_freq_factor;
  const double high_wavelen = original_length / high_freq_factor;
  for (auto& x : out) {
    const double wavelen = 2.0 * std::numbers::pi / std::abs(x);  // a negative θ scales as |θ|
    if (wavelen > low_wavelen) {
      x /= factor;
    } else if (wavelen >= high_wavelen) {
      const double s = (original_length / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      x = (1.0 - s) * x / factor + s * x;
    }
  }
  return out;
}

}  // namespace freq
}  // namespace v0
}  // namespace lrpe
