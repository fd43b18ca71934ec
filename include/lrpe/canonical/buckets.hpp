// SPDX-License-Identifier: MIT
/**
 * @file buckets.hpp
 * The position functions of the relative encodings of the literature, exactly as published:
 * Shaw's clip, T5's relative buckets, DeBERTa-v2's log buckets and ALiBi's head slopes.
 *
 * Sign conventions (they differ between papers; REFERENCE.md):
 * - T5 (HF `_relative_position_bucket`): the argument is rel = key_pos − query_pos = t − s;
 * - DeBERTa-v2 (HF `make_log_bucket_position`): rel = query_pos − key_pos = s − t;
 * - Shaw: clip(t − s, r).
 */
#pragma once

#include <lrpe/core/error.hpp>
#include <lrpe/core/traits.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace canonical {

/// |x|, saturated: INT64_MIN's magnitude 2^63 reads as 2^63 − 1, which every bucketing and
/// clipping below treats alike (far beyond any table's range); −x itself would overflow.
[[nodiscard]] constexpr position_t saturating_abs(position_t x) noexcept {
  return x >= 0 ? x : x == std::numeric_limits<position_t>::min() ? std::numeric_limits<position_t>::max() : -x;
}

/// t − s, saturated to [−(2^63 − 1), 2^63 − 1]: the offset of (query s, key t) for encodings that
/// clip or bucket it (exact there: every offset past the saturation point lands in the same
/// clipped entry or bucket); t − s itself overflows for positions 2^63 or more apart.
[[nodiscard]] constexpr position_t saturating_offset(position_t s, position_t t) noexcept {
  constexpr position_t top = std::numeric_limits<position_t>::max();
  position_t d;
  if (__builtin_sub_overflow(t, s, &d)) return t > s ? top : -top;
  return std::max(d, -top);  // INT64_MIN itself (t − s = −2^63) reads as −(2^63 − 1) too
}

/// Shaw et al.'s clip(x, r) = max(−r, min(r, x)), for a clip distance r ≥ 0.
/// @throws parameter_error if r < 0 (−r would overflow at INT64_MIN, and no table has such a clip).
[[nodiscard]] constexpr position_t clip(position_t x, position_t r) {
  if (r < 0) lrpe::detail::fail<parameter_error>("lrpe::canonical::clip", "r", "must be >= 0 (a clip distance)", r);
  return std::max(-r, std::min(r, x));
}

/**
 * Configuration of T5's relative position buckets (HF transformers, `T5Attention`).
 * Defaults are T5's: 32 buckets, max_distance 128, bidirectional (encoder).
 */
struct t5_buckets {
  index_t num_buckets = 32;
  position_t max_distance = 128;
  bool bidirectional = true;

  /// The exact-range size: buckets [0, max_exact) hold |rel| itself.
  [[nodiscard]] constexpr index_t max_exact() const noexcept {
    return (bidirectional ? num_buckets / 2 : num_buckets) / 2;
  }

  /**
   * Throws unless the configuration defines a bucket for every offset:
   * `parameter_error` if num_buckets < 2 (4 when bidirectional: each direction needs an exact
   * bucket) or max_distance ≤ max_exact() (the log branch would divide by log(1) = 0).
   */
  void validate(const char* where) const {
    const index_t min_buckets = bidirectional ? 4 : 2;
    detail::require_parameter(num_buckets >= min_buckets, where, "num_buckets",
                              detail::lazy_concat("must be >= ", min_buckets,
                                             bidirectional ? " for bidirectional buckets" : " for causal buckets"),
                              num_buckets);
    detail::require_parameter(max_distance > max_exact(), where, "max_distance",
                              detail::lazy_concat("must be > max_exact = ", max_exact(),
                                             " (num_buckets", bidirectional ? "/4" : "/2", ")"),
                              max_distance);
  }
};

/**
 * T5's bucket of rel = key_pos − query_pos (HF `T5Attention._relative_position_bucket`).
 *
 * Bidirectional: half the buckets per direction, rel > 0 (key after query) in the upper half;
 * causal: rel ← −min(rel, 0) (every future key shares bucket 0). Then |rel| < max_exact is its
 * own bucket, larger offsets share log-spaced buckets up to max_distance, capped at the last.
 * The log is taken only when |rel| ≥ max_exact (log 0 is never formed). Computed in double;
 * defined for every int64 rel and every valid `cfg` (no NaN is formed, nothing past int64 is
 * converted).
 * @return a bucket in [0, num_buckets).
 * @throws parameter_error unless `cfg` is valid (`t5_buckets::validate`).
 */
[[nodiscard]] inline index_t t5_bucket(position_t rel, const t5_buckets& cfg) {
  cfg.validate("lrpe::canonical::t5_bucket");
  index_t nb = cfg.num_buckets;
  index_t bucket = 0;
  position_t r = rel;
  if (cfg.bidirectional) {
    nb /= 2;
    if (r > 0) bucket += nb;
    r = saturating_abs(r);
  } else {
    r = r < 0 ? saturating_abs(r) : 0;
  }
  const index_t max_exact = nb / 2;  // ≥ 1 for a valid cfg
  if (r < max_exact) return bucket + static_cast<index_t>(r);
  // Both logs are ≥ 0 (r ≥ max_exact and max_distance > max_exact, so the rounded ratios are ≥ 1).
  // The base's log is 0 when max_distance/max_exact rounds to 1 in double (both near 2^61): then
  // r = max_exact keeps its own bucket (log 0 over log 0 would be NaN) and larger r go past the
  // cap (+∞).
  const double above = std::log(static_cast<double>(r) / static_cast<double>(max_exact));
  const double large =
      above == 0 ? static_cast<double>(max_exact)
                 : static_cast<double>(max_exact) +
                       above / std::log(static_cast<double>(cfg.max_distance) / static_cast<double>(max_exact)) *
                           static_cast<double>(nb - max_exact);
  // large ≥ max_exact here; compared in double before converting (huge r stays in range)
  const index_t capped = large < static_cast<double>(nb - 1) ? static_cast<index_t>(large) : nb - 1;
  return bucket + capped;
}

/**
 * Configuration of DeBERTa-v2's relative positions (HF `DisentangledSelfAttention`):
 * `position_buckets` (256 in deberta-v3; ≤ 0: no log buckets), `max_relative_positions`
 * (512), and the attention span, `position_buckets` when > 0 else `max_relative_positions`.
 */
struct deberta_buckets {
  index_t position_buckets = 256;
  position_t max_relative_positions = 512;

  [[nodiscard]] constexpr bool log_buckets() const noexcept {
    return position_buckets > 0 && max_relative_positions > 0;
  }
  /// att_span: the relative tables have 2·span rows.
  [[nodiscard]] constexpr index_t span() const noexcept {
    return position_buckets > 0 ? position_buckets : static_cast<index_t>(max_relative_positions);
  }

  /// `parameter_error` if span() < 1, or if log buckets are used with position_buckets < 4
  /// or max_relative_positions − 1 ≤ position_buckets/2 (the log base would be ≤ 1).
  void validate(const char* where) const {
    detail::require_parameter(span() >= 1 && span() < (position_t{1} << 62), where,
                              "position_buckets / max_relative_positions",
                              "must give an attention span in [1, 2^62 - 1] (the tables have 2*span rows)", span());
    if (log_buckets()) {
      detail::require_parameter(position_buckets >= 4, where, "position_buckets",
                                "must be >= 4 (or <= 0 for no log buckets)", position_buckets);
      detail::require_parameter(max_relative_positions - 1 > position_buckets / 2, where,
                                "max_relative_positions",
                                detail::lazy_concat("must be > position_buckets/2 + 1 = ", position_buckets / 2 + 1),
                                max_relative_positions);
    }
  }
};

/**
 * DeBERTa-v2's log bucket of rel = query_pos − key_pos (HF `make_log_bucket_position`):
 * mid = bucket_size/2; offsets with |rel| ≤ mid are kept; larger ones map to
 * sign(rel)·(⌈log(|rel|/mid)/log((max_position−1)/mid)·(mid−1)⌉ + mid). Computed in double;
 * defined for every int64 rel (|INT64_MIN| reads as 2^63 − 1). The result is odd in rel,
 * monotone, beyond mid in magnitude where |rel| is (also where |rel|/mid rounds to 1 in double)
 * and unbounded (the attention span clamps it), saturated at ±(2^63 − 1).
 * @throws parameter_error if bucket_size < 4 or max_position ≤ bucket_size/2 + 1 (the log base
 * (max_position − 1)/mid would be ≤ 1: the buckets would not grow with |rel|, or change sign).
 */
[[nodiscard]] inline position_t deberta_log_bucket(position_t rel, index_t bucket_size, position_t max_position) {
  constexpr const char* where = "lrpe::canonical::deberta_log_bucket";
  detail::require_parameter(bucket_size >= 4, where, "bucket_size", "must be >= 4", bucket_size);
  // max_position − 1 > mid, tested without forming max_position − 1 (INT64_MIN − 1 overflows)
  detail::require_parameter(max_position > bucket_size / 2 + 1, where, "max_position",
                            detail::lazy_concat("must be > bucket_size/2 + 1 = ", bucket_size / 2 + 1), max_position);
  const position_t mid = bucket_size / 2;
  const position_t a = (rel < mid && rel > -mid) ? mid - 1 : saturating_abs(rel);
  if (a <= mid) return rel;
  // |rel| > mid maps beyond mid, as the exact formula does (its ceil is ≥ 1). Past 2^53 the
  // double ratio a/mid can round to 1 (log 0): the offset's own log1p((a − mid)/mid) keeps it
  // positive, and mid + steps is added in integers, where it cannot round back to mid. A log base
  // that rounds to 1 (max_position − 1 near mid) gives +∞ steps, saturated as the offsets are.
  const double plain = std::log(static_cast<double>(a) / static_cast<double>(mid));
  const double above = plain > 0 ? plain : std::log1p(static_cast<double>(a - mid) / static_cast<double>(mid));
  const double steps = std::ceil(above / std::log(static_cast<double>(max_position - 1) / static_cast<double>(mid)) *
                                 static_cast<double>(mid - 1));  // ≥ 1
  constexpr double top = 0x1p63;
  position_t p = std::numeric_limits<position_t>::max();
  if (steps < top && __builtin_add_overflow(mid, static_cast<position_t>(steps), &p))
    p = std::numeric_limits<position_t>::max();
  return rel < 0 ? -p : p;
}

/// DeBERTa-v2's relative position of (query s, key t): the log bucket of s − t when enabled,
/// else s − t itself. @throws parameter_error as `deberta_log_bucket` for a `cfg` whose log
/// buckets are not valid (`deberta_buckets::validate`).
[[nodiscard]] inline position_t deberta_relative_position(position_t s, position_t t, const deberta_buckets& cfg) {
  const position_t rel = saturating_offset(t, s);  // s − t
  return cfg.log_buckets() ? deberta_log_bucket(rel, cfg.position_buckets, cfg.max_relative_positions) : rel;
}

/**
 * ALiBi's head slopes (ofirpress/attention_with_linear_biases, `get_slopes`): for n a power of
 * two, start = 2^(−8/n) and slopes start¹ … startⁿ; otherwise, with c = 2^⌊log2 n⌋, the c-head
 * slopes followed by every other slope of the 2c-head list, first n − c of them.
 * @throws parameter_error if heads < 1 or heads > lrpe::max_dim.
 */
[[nodiscard]] inline std::vector<double> alibi_slopes(index_t heads) {
  // at most lrpe::max_dim, as every size a table is allocated for (2·c below is then an index_t)
  detail::require_parameter(heads >= 1 && heads <= max_dim, "lrpe::canonical::alibi_slopes", "heads",
                            detail::lazy_concat("must be in [1, ", max_dim, "] (lrpe::max_dim)"), heads);
  auto power_of_two = [](index_t n) {
    std::vector<double> s(static_cast<std::size_t>(n));
    const double start = std::exp2(-8.0 / static_cast<double>(n));
    for (std::size_t i = 0; i < s.size(); ++i) s[i] = std::pow(start, static_cast<double>(i + 1));
    return s;
  };
  index_t c = 1;
  while (c <= heads / 2) c *= 2;
  std::vector<double> slopes = power_of_two(c);
  if (c == heads) return slopes;
  const std::vector<double> extra = power_of_two(2 * c);
  for (index_t i = 0; i < heads - c; ++i) slopes.push_back(extra[static_cast<std::size_t>(2 * i)]);
  return slopes;
}

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
