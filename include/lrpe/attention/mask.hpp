// SPDX-License-Identifier: MIT
/**
 * @file mask.hpp
 * Which keys a query sees in softmax attention: causal, anti-causal, a sliding window, chunked
 * attention, alone or together. Each is a condition on the two positions (s of the query, t of
 * the key):
 *
 *     causal        t ≤ s
 *     anti_causal   t ≥ s                        (the reverse direction: DiSAN's backward mask)
 *     exclude_self  t ≠ s, with causal or anti_causal only: t < s, t > s (DiSAN's forward and
 *                                                 backward masks hide the token itself)
 *     window w      s − t < w                    (Mistral's and Gemma's `sliding_window`: w keys
 *                                                 up to and including the query's own position)
 *     chunk C       ⌊s / C⌋ = ⌊t / C⌋             (Llama 4's `attention_chunk_size`)
 *
 * and a key is visible when all the conditions set hold. For every s the visible positions form
 * one interval [lo(s), hi(s)] whose ends never decrease with s: the kernels use it to skip key
 * tiles that no query of a tile sees and to mask only the tiles that some query sees in part.
 * That is why `exclude_self` needs a direction: t ≠ s alone (DiSAN's diagonal-disabled mask) is
 * two intervals, t < s and t > s, run as two calls and merged (docs/attention.md).
 */
#pragma once

#include <lrpe/core/config.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

namespace lrpe {
inline namespace v0 {

/// The visibility rule of a softmax call (see the file comment); 0 turns a window or chunk off.
struct key_mask {
  bool causal = false;
  position_t window = 0;  ///< w > 0: key t visible to query s only if s − t < w
  position_t chunk = 0;   ///< C > 0: key t visible to query s only if ⌊s/C⌋ = ⌊t/C⌋
  bool anti_causal = false;   ///< key t visible to query s only if t ≥ s
  bool exclude_self = false;  ///< with causal or anti_causal: t = s hidden too (t < s, t > s)

  static constexpr position_t lowest = std::numeric_limits<position_t>::min();
  static constexpr position_t highest = std::numeric_limits<position_t>::max();

  /// True when no key is ever hidden.
  [[nodiscard]] constexpr bool none() const noexcept {
    return !causal && !anti_causal && window == 0 && chunk == 0;
  }

  /// The first and last positions of the chunk of C positions that holds s: [⌊s/C⌋·C,
  /// ⌊s/C⌋·C + C − 1], each held within the range of position_t.
  [[nodiscard]] static constexpr std::pair<position_t, position_t> chunk_of(position_t s, position_t c) noexcept {
    position_t q = s / c;
    if (s % c != 0 && s < 0) --q;           // ⌊s/C⌋
    if (q < lowest / c) return {lowest, (q + 1) * c - 1};  // q·C below the range; (q + 1)·C ∈ (s, s + C]
    const position_t start = q * c;
    return {start, start > highest - (c - 1) ? highest : start + (c - 1)};
  }

  /// The lowest visible key position of query s (`lowest` when unbounded).
  [[nodiscard]] constexpr position_t lo(position_t s) const noexcept {
    if (sees_nothing(s)) return highest;
    position_t v = lowest;
    if (anti_causal) v = exclude_self ? s + 1 : s;
    if (window > 0) v = std::max(v, s < lowest + (window - 1) ? lowest : s - (window - 1));
    if (chunk > 0) v = std::max(v, chunk_of(s, chunk).first);
    return v;
  }

  /// The highest visible key position of query s (`highest` when unbounded).
  [[nodiscard]] constexpr position_t hi(position_t s) const noexcept {
    if (sees_nothing(s)) return lowest;
    position_t v = causal ? (exclude_self ? s - 1 : s) : highest;
    if (chunk > 0) v = std::min(v, chunk_of(s, chunk).second);
    return v;
  }

  /// A strict direction at the end of the range (t < lowest, t > highest): no key at all, as
  /// lo = highest > hi = lowest (s ± 1 would overflow).
  [[nodiscard]] constexpr bool sees_nothing(position_t s) const noexcept {
    return exclude_self && ((causal && s == lowest) || (anti_causal && s == highest));
  }

  /// True when key position t is visible to query position s.
  [[nodiscard]] constexpr bool visible(position_t s, position_t t) const noexcept { return lo(s) <= t && t <= hi(s); }

  /// False only when no query at a position in [q_min, q_max] sees a key in [k_min, k_max]
  /// (a tile that may be skipped); may be true for such a tile (it is then masked whole).
  [[nodiscard]] constexpr bool may_see(position_t q_min, position_t q_max, position_t k_min,
                                       position_t k_max) const noexcept {
    // a query that a strict direction leaves without keys (`sees_nothing`) is left out: its
    // lo and hi are not monotone with its neighbours'
    if (sees_nothing(q_min)) {
      if (q_min == q_max) return false;
      ++q_min;
    }
    if (sees_nothing(q_max)) {
      if (q_min == q_max) return false;
      --q_max;
    }
    return hi(q_max) >= k_min && lo(q_min) <= k_max;
  }

  /// True when every query at a position in [q_min, q_max] sees every key in [k_min, k_max]
  /// (a tile that needs no mask).
  [[nodiscard]] constexpr bool sees_all(position_t q_min, position_t q_max, position_t k_min,
                                        position_t k_max) const noexcept {
    if (sees_nothing(q_min) || sees_nothing(q_max)) return false;
    return lo(q_max) <= k_min && hi(q_min) >= k_max;
  }
};

}  // namespace v0
}  // namespace lrpe
