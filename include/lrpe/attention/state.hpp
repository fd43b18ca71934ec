// SPDX-License-Identifier: MIT
/**
 * @file state.hpp
 * `lrpe::linear_attention_state`: the d_f×d_v state of causal linear attention, for O(d_f·d_v)
 * per-token decoding and for splitting a sequence across calls, shards or machines.
 *
 * After keys t_1 ≤ … ≤ t_m (features k̃ = M_t φ(k), or φ_k of a linearizable encoding) the
 * state holds, with p = t_m,
 *
 *     S = Σ_j λ^{p − t_j} k̃_j v_jᵀ   (d_f × d_v),   z = Σ_j λ^{p − t_j} k̃_j   (d_f),
 *
 * and a query at s ≥ p gets num = λ^{s−p} q̃_sᵀ S, den = λ^{s−p} q̃_s·z: exactly the causal
 * sums over keys at positions ≤ s. Appending t ≥ p updates S ← λ^{t−p} S + k̃ vᵀ (every exponent
 * is ≥ 0: nothing overflows).
 */
#pragma once

#include <lrpe/attention/feature_map.hpp>
#include <lrpe/attention/options.hpp>
#include <lrpe/core/error.hpp>
#include <lrpe/core/traits.hpp>
#include <lrpe/detail/small_buffer.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace lrpe {
inline namespace v0 {

namespace detail {

/// How far a state's decay carry may be from 1 (it stays within one rounding of T of 1).
inline constexpr double max_decay_carry_offset = 0x1p-16;

/**
 * The factor that rescales a state in T by λ^Δ (`exact`, computed in double), with the rounding
 * of the earlier factors carried: `carry` is (product of the factors applied) / (product of the
 * exact ones), and the factor applied is fl_T(exact / carry), which brings that ratio back to
 * within one rounding of 1. Without it, a float decode multiplies S by fl(λ) every token, and
 * after Δ tokens a key's weight is fl(λ)^Δ: a systematic relative error of about Δ·u. In double
 * and wider the rounding is that of λ^Δ itself, and nothing is carried. A factor that is 1
 * (Δ = 0) is applied as 1; one below T's normal range restarts the carry at 1. Host and device:
 * the CUDA causal kernel carries its per-chunk rescale the same way.
 */
template <class T>
inline constexpr T smallest_normal_v = std::numeric_limits<T>::min();  // a value device code may read

template <class T>
[[nodiscard]] LRPE_HOST_DEVICE T carried_decay(double exact, double& carry) noexcept {
  if constexpr (sizeof(T) >= sizeof(double)) {
    return static_cast<T>(exact);
  } else {
    if (exact == 1.0) return T(1);
    const T f = static_cast<T>(exact / carry);
    carry = f >= smallest_normal_v<T> ? carry * static_cast<double>(f) / exact : 1.0;
    return f;
  }
}

/// A decay carry from outside (a snapshot): finite and within 2^-16 of 1.
inline void require_decay_carry(double carry, const char* where, const char* arg) {
  require_parameter(std::abs(carry - 1.0) <= max_decay_carry_offset, where, arg,
                    "must be within 2^-16 of 1 (the state's decay carry)", carry);
}

/**
 * A state's contents from outside (a snapshot, or S and z handed to `assign`) are what a state can
 * hold: λ in (0, 1], and with no key folded in (count 0) S = 0, z = 0 and last position 0 (its
 * values before the first key). A count of 0 with anything else is corrupt, and resuming it gave
 * wrong outputs after the next key (the keys held by S and z would have been dropped or kept
 * inconsistently). S and z may hold NaN or ±∞ when count > 0: what a state that met them holds.
 */
template <class V>
void require_state_contents(double decay, position_t last, index_t count, std::span<const V> kv,
                            std::span<const V> k_sum, const char* where, const char* decay_arg,
                            const char* count_arg) {
  require_decay(decay, where, decay_arg);
  if (count != 0) return;
  const auto check = [&](std::span<const V> part, const char* name) {
    const auto it = std::find_if(part.begin(), part.end(), [](V x) { return !(x == V(0)); });
    if (it == part.end()) return;
    fail<parameter_error>(where, count_arg,
                          lazy_concat("must be > 0 when S or z has a nonzero entry (an empty state holds S = 0 and "
                                      "z = 0; ",
                                      name, "[", it - part.begin(), "] = ", *it, ")"),
                          count);
  };
  check(kv, "S");
  check(k_sum, "z");
  require_parameter(last == 0, where, count_arg,
                    lazy_concat("must be > 0 when last_position is not 0 (an empty state's last position is 0; "
                                "last_position = ",
                                last, ")"),
                    count);
}

}  // namespace detail

/**
 * The exported state: a plain, copyable struct (resume with `linear_attention_state(snapshot)`).
 * `to_flat()` / `from_flat()` serialise it to a flat `std::vector<double>` (floats convert
 * exactly; the position is stored as two 32-bit halves, so it is exact for every int64).
 */
template <real_scalar T>
struct linear_attention_snapshot {
  index_t feature_dim = 0;
  index_t value_dim = 0;
  double decay = 1.0;
  position_t last_position = 0;  ///< position of the last key folded in (meaningful if count > 0)
  index_t count = 0;             ///< number of keys folded in
  std::vector<T> kv;             ///< S, feature_dim × value_dim, row-major
  std::vector<T> k_sum;          ///< z, feature_dim
  /// The rounding of the decay factors applied so far, carried to the next one (float states
  /// only; within 2^-16 of 1; see `detail::carried_decay`). Resuming with it continues the
  /// state bit for bit; 1 is always valid (one rounding more, not a drift).
  double decay_carry = 1.0;

  static constexpr double format_version = 2;

  /// [version 2, feature_dim, value_dim, decay, pos_hi, pos_lo, count, decay_carry, S..., z...].
  [[nodiscard]] std::vector<double> to_flat() const {
    std::vector<double> flat;
    flat.reserve(8 + kv.size() + k_sum.size());
    const auto u = static_cast<std::uint64_t>(last_position);
    flat.insert(flat.end(), {format_version, static_cast<double>(feature_dim), static_cast<double>(value_dim),
                             decay, static_cast<double>(u >> 32), static_cast<double>(u & 0xffffffffULL),
                             static_cast<double>(count), decay_carry});
    for (T x : kv) flat.push_back(static_cast<double>(x));
    for (T x : k_sum) flat.push_back(static_cast<double>(x));
    return flat;
  }

  /**
   * Inverse of `to_flat()`; also reads version 1 (no decay carry: 7 header entries, carry 1).
   *
   * A valid snapshot is one a state can hold (checked here, and again when a state resumes from
   * it): a header of whole numbers with f·dv + f entries after it; λ in (0, 1]; a decay carry
   * within 2^-16 of 1; S and z entries within T's range; and with count 0 (no key folded in)
   * S = 0, z = 0 and last_position 0. These are invariants, not a checksum: a corrupted nonzero
   * entry of S with a plausible count is not detected (transport checksums belong to the
   * transport, and a checksum would reject snapshots written by other code).
   * @throws shape_error if the vector is not a state of either format; parameter_error for an
   * entry out of the state type's range, a decay out of (0, 1] (domain_error if NaN), a decay
   * carry not within 2^-16 of 1, or a count of 0 with a nonzero S, z or last position.
   */
  static linear_attention_snapshot from_flat(std::span<const double> flat) {
    constexpr const char* where = "lrpe::linear_attention_snapshot::from_flat";
    detail::require_shape(!flat.empty() && (flat[0] == 1 || flat[0] == format_version), where, "flat",
                          "must start with the header [2, feature_dim, value_dim, ...] (or version 1's)", flat.size());
    const std::size_t header = flat[0] == 1 ? 7 : 8;
    detail::require_shape(flat.size() >= header, where, "flat",
                          detail::lazy_concat("must hold the ", header, " header entries of its version"), flat.size());
    // header entries are whole numbers in [0, limit] (checked before any conversion: a corrupted
    // or foreign vector is an error, never an out-of-range cast)
    const auto whole = [&](std::size_t i, double limit, const char* arg) {
      const double x = flat[i];
      detail::require_shape(x >= 0 && x <= limit && x == std::floor(x), where, arg,
                            detail::lazy_concat("must be a whole number in [0, ", limit, "]"), x);
      return x;
    };
    constexpr double two32 = 4294967296.0;
    const double f = whole(1, static_cast<double>(flat.size()), "flat[1] (feature_dim)");
    const double dv = whole(2, static_cast<double>(flat.size()), "flat[2] (value_dim)");
    const double hi = whole(4, two32 - 1, "flat[4] (last_position, high half)");
    const double lo = whole(5, two32 - 1, "flat[5] (last_position, low half)");
    const double count = whole(6, 9007199254740992.0, "flat[6] (count)");
    const auto fi = static_cast<std::size_t>(f), dvi = static_cast<std::size_t>(dv);  // both <= flat.size()
    detail::require_shape((flat.size() - header) % (dvi + 1) == 0 && (flat.size() - header) / (dvi + 1) == fi, where,
                          "flat.size()",
                          detail::lazy_concat("must be ", header, " + f·dv + f for f = ", fi, ", dv = ", dvi),
                          flat.size());
    if (header == 8) detail::require_decay_carry(flat[7], where, "flat[7] (decay_carry)");
    linear_attention_snapshot s;
    s.feature_dim = static_cast<index_t>(f);
    s.value_dim = static_cast<index_t>(dv);
    s.decay = flat[3];
    const std::uint64_t u = (static_cast<std::uint64_t>(hi) << 32) | static_cast<std::uint64_t>(lo);
    s.last_position = static_cast<position_t>(u);
    s.count = static_cast<index_t>(count);
    if (header == 8) s.decay_carry = flat[7];
    const auto nkv = static_cast<std::size_t>(s.feature_dim * s.value_dim);
    // Entries must fit T: a finite double beyond T's range would become ±∞ silently (NaN and ±∞
    // pass: they are what a state that saw them holds, and round-trip).
    for (std::size_t i = header; i < flat.size(); ++i) {
      const double x = flat[i];
      detail::require_parameter(
          !std::isfinite(x) || std::abs(x) <= static_cast<double>(std::numeric_limits<T>::max()), where, "flat",
          detail::lazy_concat("must hold S and z entries within the state type's range (entry ", i, ")"), x);
    }
    const std::span<const double> body = flat.subspan(header);
    detail::require_state_contents(s.decay, s.last_position, s.count, body.first(nkv), body.subspan(nkv), where,
                                   "flat[3] (decay)", "flat[6] (count)");
    s.kv.assign(body.begin(), body.begin() + static_cast<std::ptrdiff_t>(nkv));
    s.k_sum.assign(body.begin() + static_cast<std::ptrdiff_t>(nkv), body.end());
    return s;
  }
};

/**
 * dL/d(a linear-attention state): the gradients of S (d_f × d_v) and z (d_f), for the backward
 * of a sequence split across calls (docs/training.md). Zero-initialised by the sizes.
 */
template <real_scalar T>
struct linear_state_gradient {
  row_matrix<T> kv;      ///< dL/dS
  dense_vector<T> k_sum; ///< dL/dz
  linear_state_gradient() = default;
  linear_state_gradient(index_t feature_dim, index_t value_dim)
      : kv(row_matrix<T>::Zero(feature_dim, value_dim)), k_sum(dense_vector<T>::Zero(feature_dim)) {}
};

namespace detail {
struct state_access;
}  // namespace detail

/**
 * The running state of causal linear attention (see the file comment for the math).
 * Copyable; not synchronised (one writer at a time).
 */
template <real_scalar T>
class linear_attention_state {
 public:
  linear_attention_state() = default;

  /**
   * An empty state.
   * @param feature_dim d_f: the encoder's `feature_dim()` (d, or 2d for complex encoders).
   * @param value_dim   d_v.
   * @param decay       λ ∈ (0, 1].
   * @throws shape_error if a width is < 1; parameter_error if λ ∉ (0, 1].
   */
  linear_attention_state(index_t feature_dim, index_t value_dim, double decay = 1.0) : decay_(decay) {
    constexpr const char* where = "lrpe::linear_attention_state";
    detail::require_dim(feature_dim, where, "feature_dim");
    detail::require_dim(value_dim, where, "value_dim");
    detail::require_decay(decay, where, "decay");
    kv_ = row_matrix<T>::Zero(feature_dim, value_dim);
    k_sum_ = dense_vector<T>::Zero(feature_dim);
  }

  /// Resumes an exported state. @throws shape_error / parameter_error on an inconsistent snapshot
  /// (sizes, λ, carry, or a count of 0 with a nonzero S, z or last position; see `from_flat`).
  explicit linear_attention_state(const linear_attention_snapshot<T>& s)
      : linear_attention_state(checked(s).feature_dim, s.value_dim, s.decay) {
    for (index_t i = 0; i < s.feature_dim; ++i) {
      for (index_t j = 0; j < s.value_dim; ++j) kv_(i, j) = s.kv[static_cast<std::size_t>(i * s.value_dim + j)];
      k_sum_[i] = s.k_sum[static_cast<std::size_t>(i)];
    }
    last_ = s.last_position;
    count_ = s.count;
    carry_ = s.decay_carry;
  }

  /// The plain exported state (copy of S, z, last position, count, λ).
  [[nodiscard]] linear_attention_snapshot<T> export_state() const {
    linear_attention_snapshot<T> s;
    s.feature_dim = feature_dim();
    s.value_dim = value_dim();
    s.decay = decay_;
    s.last_position = last_;
    s.count = count_;
    s.decay_carry = carry_;
    s.kv.resize(static_cast<std::size_t>(kv_.size()));
    for (index_t i = 0; i < kv_.rows(); ++i)
      for (index_t j = 0; j < kv_.cols(); ++j) s.kv[static_cast<std::size_t>(i * kv_.cols() + j)] = kv_(i, j);
    s.k_sum.assign(k_sum_.data(), k_sum_.data() + k_sum_.size());
    return s;
  }

  [[nodiscard]] index_t feature_dim() const noexcept { return kv_.rows(); }
  [[nodiscard]] index_t value_dim() const noexcept { return kv_.cols(); }
  [[nodiscard]] double decay() const noexcept { return decay_; }
  /// Number of keys folded in; 0 for a fresh state.
  [[nodiscard]] index_t count() const noexcept { return count_; }
  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
  /// Position of the last key folded in (meaningful when !empty()).
  [[nodiscard]] position_t last_position() const noexcept { return last_; }
  /// S (d_f × d_v) and z (d_f), decayed to `last_position()`.
  [[nodiscard]] const row_matrix<T>& kv() const noexcept { return kv_; }
  [[nodiscard]] const dense_vector<T>& k_sum() const noexcept { return k_sum_; }
  /// The rounding of the decay factors applied so far, carried to the next (1 in double; see
  /// `detail::carried_decay`).
  [[nodiscard]] double decay_carry() const noexcept { return carry_; }

  /**
   * Replaces S, z, the last position and the count in place, with no allocation: for a backend
   * whose kernel continued this state in its own buffers (S row i at kv + i·kv_stride, z at
   * k_sum). The keys it folded in must not precede `last_position()`. `decay_carry` is the
   * kernel's carried rounding of its decay factors (`detail::carried_decay`, started from
   * `decay_carry()`); 1 (the default) is always valid.
   * @throws shape_error (kv or k_sum null, kv_stride < value_dim()), parameter_error (count below
   * count(), a last position before last_position(), a decay carry not within 2^-16 of 1, or a
   * count of 0 with a nonzero S or z).
   */
  void assign(const T* kv, index_t kv_stride, const T* k_sum, position_t last_position, index_t count,
              double decay_carry = 1.0) {
    constexpr const char* where = "lrpe::linear_attention_state::assign";
    detail::require_shape(kv != nullptr || feature_dim() == 0, where, "kv", "must be non-null", "nullptr");
    detail::require_shape(k_sum != nullptr || feature_dim() == 0, where, "k_sum", "must be non-null", "nullptr");
    detail::require_shape(kv_stride >= value_dim(), where, "kv_stride",
                          detail::lazy_concat("must be >= value_dim() = ", value_dim()), kv_stride);
    detail::require_parameter(count >= count_, where, "count", detail::lazy_concat("must be >= count() = ", count_),
                              count);
    if (count == 0) {  // still empty: S and z must be zero (scanned only in this rare case)
      bool zero = true;
      for (index_t i = 0; i < feature_dim(); ++i) {
        zero = zero && k_sum[i] == T(0);
        for (index_t j = 0; j < value_dim(); ++j) zero = zero && kv[i * kv_stride + j] == T(0);
      }
      detail::require_parameter(zero, where, "count",
                                "must be > 0 when S or z has a nonzero entry (an empty state holds S = 0 and z = 0)",
                                count);
    }
    if (count_ > 0 && count > count_) require_not_before(last_position, where, "last_position");
    detail::require_decay_carry(decay_carry, where, "decay_carry");
    carry_ = decay_carry;
    for (index_t i = 0; i < feature_dim(); ++i)
      std::copy(kv + i * kv_stride, kv + i * kv_stride + value_dim(), kv_.row(i).data());
    std::copy(k_sum, k_sum + feature_dim(), k_sum_.data());
    if (count > count_) last_ = last_position;
    count_ = count;
  }

  /// λ^{Δ} for Δ ≥ 0 (1 without decay), computed in double.
  [[nodiscard]] double decay_factor(position_t delta) const noexcept {
    return decay_ == 1.0 || delta == 0 ? 1.0 : std::pow(decay_, static_cast<double>(delta));
  }

  /**
   * Folds one already-encoded key: S ← λ^{t−p} S + k̃ vᵀ, z ← λ^{t−p} z + k̃, p ← t.
   * @throws parameter_error if t < last_position(), or t − last_position() does not fit in int64.
   */
  void append_features(const T* k_features, const T* v, position_t t) {
    require_not_before(t, "lrpe::linear_attention_state::append", "t");
    rescale_to(t);
    const index_t f = feature_dim(), dv = value_dim();
    for (index_t i = 0; i < f; ++i) {
      const T ki = k_features[i];
      for (index_t j = 0; j < dv; ++j) kv_(i, j) += ki * v[j];
      k_sum_[i] += ki;
    }
    ++count_;
  }

  /**
   * Folds a block of encoded keys at non-decreasing positions (the chunked algorithm's
   * inter-chunk update): with p′ = the last position, S ← λ^{p′−p} S + Σ_j λ^{p′−t_j} k̃_j v_jᵀ.
   * Row j of the block is at position pos[first + j].
   * @throws shape_error if k_features is not m×feature_dim(), v not m×value_dim(), or (array
   * positions) [first, first + m) not within pos; parameter_error if the positions decrease,
   * start before last_position(), or span (with it) more than 2^63 − 1.
   */
  template <class KF, class VB>
  void append_block(const KF& k_features, const VB& v, const positions& pos, index_t first) {
    const index_t m = k_features.rows();
    {
      constexpr const char* where = "lrpe::linear_attention_state::append_block";
      detail::require_shape(k_features.cols() == feature_dim(), where, "k_features.cols()",
                            detail::lazy_concat("must equal feature_dim() = ", feature_dim()), k_features.cols());
      detail::require_shape(v.rows() == m, where, "v.rows()", detail::lazy_concat("must equal k_features.rows() = ", m),
                            v.rows());
      detail::require_shape(v.cols() == value_dim(), where, "v.cols()",
                            detail::lazy_concat("must equal value_dim() = ", value_dim()), v.cols());
      if (pos.is_array()) {
        detail::require_shape(first >= 0 && first <= pos.size() - m, where, "first",
                              detail::lazy_concat("must be >= 0 with first + rows <= positions.size() = ", pos.size(),
                                                  " (rows = ", m, ")"),
                              first);
      } else {  // offset + first + m − 1 must be a position_t
        constexpr position_t top = std::numeric_limits<position_t>::max();
        detail::require_parameter(
            first >= 0 && (m == 0 || (first <= top - (m - 1) && pos.offset() <= top - (first + m - 1))), where,
            "first",
            detail::lazy_concat("must be >= 0 with offset + first + rows - 1 <= 2^63 - 1 (offset = ", pos.offset(),
                                ", rows = ", m, ")"),
            first);
      }
    }
    if (m == 0) return;
    const position_t p_new = pos[first + m - 1];
    constexpr const char* where = "lrpe::linear_attention_state::append";
    require_not_before(pos[first], where, "t");
    for (index_t j = 1; j < m; ++j) {
      detail::require_parameter(pos[first + j] >= pos[first + j - 1], where, "t",
                                "must be non-decreasing within a block", pos[first + j]);
    }
    detail::require_parameter(detail::difference_fits(empty() ? pos[first] : last_, p_new), where, "t",
                              "must span at most 2^63 - 1 with the block's first position and last_position() "
                              "(every t - last must fit in int64)",
                              p_new);
    rescale_to(p_new);
    if (decay_ == 1.0) {
      kv_.noalias() += k_features.transpose() * v;
      k_sum_.noalias() += k_features.colwise().sum().transpose();
    } else {
      dense_vector<T> w(m);
      for (index_t j = 0; j < m; ++j) w[j] = static_cast<T>(decay_factor(p_new - pos[first + j]));
      kv_.noalias() += k_features.transpose() * (w.asDiagonal() * v);
      k_sum_.noalias() += k_features.transpose() * w;
    }
    count_ += m;
  }

  /**
   * Folds in a later shard's state (its summary: the state a fresh one reached over the shard's
   * keys): S ← λ^{p₂−p₁} S + S₂, z ← λ^{p₂−p₁} z + z₂, p ← p₂, count ← count + count₂, with p₁,
   * p₂ the two last positions. The result is the state of both shards' keys, exactly as if
   * they had been appended one by one (every key's weight λ^{p₂−t}), so folding summaries is
   * associative: the prefix of a sequence's shard summaries is each shard's incoming state
   * (sequence parallelism, LASP-style; docs/attention.md). An empty `later` changes nothing.
   * @throws shape_error (widths differ), parameter_error (decays differ, or later's last
   * position precedes this one's while both hold keys).
   */
  void append_state(const linear_attention_state& later) {
    constexpr const char* where = "lrpe::linear_attention_state::append_state";
    detail::require_shape(later.feature_dim() == feature_dim() && later.value_dim() == value_dim(), where, "later",
                          detail::lazy_concat("must be ", feature_dim(), "x", value_dim(), " (this state's widths)"),
                          detail::lazy_concat(later.feature_dim(), "x", later.value_dim()));
    detail::require_parameter(later.decay() == decay_, where, "later.decay()",
                              detail::lazy_concat("must equal this state's decay ", decay_), later.decay());
    if (later.empty()) return;
    if (empty()) {
      *this = later;
      return;
    }
    require_not_before(later.last_position(), where, "later.last_position()");
    rescale_to(later.last_position());
    kv_ += later.kv_;
    k_sum_ += later.k_sum_;
    count_ += later.count_;
  }

  /**
   * Encodes and appends one key row: k̃ = M_t φ(k).
   * @param encoding an `lrpe::encoder` (or `no_encoding{}`) whose feature_dim() is this state's.
   * @param phi      the feature map.
   * @param k        d elements; @param v d_v elements; @param t its position (≥ last_position()).
   */
  template <class Encoding, class Phi>
  void append(const Encoding& encoding, const Phi& phi, const T* k, const T* v, position_t t) {
    detail::small_buffer<T> kf(feature_dim());
    encode(encoding, phi, k, t, kf.data(), canonical::side::key, "lrpe::linear_attention_state::append");
    append_features(kf.data(), v, t);
  }

  /**
   * Answers a query from already-encoded features: num = λ^{s−p} q̃ᵀS, den = λ^{s−p} q̃·z;
   * out = num (normalisation::none) or num / max(den, eps).
   * @throws parameter_error if s < last_position() (keys after s would be visible), or s −
   * last_position() does not fit in int64.
   */
  void query_features(const T* q_features, position_t s, T* out, normalisation norm = normalisation::none,
                      double eps = 1e-6) const {
    constexpr const char* where = "lrpe::linear_attention_state::query";
    if (norm == normalisation::denominator) detail::require_eps<T>(eps, where, "eps");  // before out is written
    if (!empty()) {
      detail::require_parameter(s >= last_, where, "s",
                                detail::lazy_concat("must be >= last_position() = ", last_,
                                               " (a causal query cannot precede appended keys)"),
                                s);
      require_reachable(s, where, "s");
    }
    const index_t f = feature_dim(), dv = value_dim();
    const T w = empty() ? T(0) : static_cast<T>(decay_factor(s - last_));
    T den = 0;
    for (index_t j = 0; j < dv; ++j) out[j] = 0;
    for (index_t i = 0; i < f; ++i) {
      const T qi = q_features[i] * w;
      for (index_t j = 0; j < dv; ++j) out[j] += qi * kv_(i, j);
      den += qi * k_sum_[i];
    }
    if (norm == normalisation::denominator) {
      const T inv = T(1) / std::max(den, static_cast<T>(eps));
      for (index_t j = 0; j < dv; ++j) out[j] *= inv;
    }
  }

  /// Encodes and answers one query row q at position s (see `query_features`).
  template <class Encoding, class Phi>
  void query(const Encoding& encoding, const Phi& phi, const T* q, position_t s, T* out,
             normalisation norm = normalisation::none, double eps = 1e-6) const {
    detail::small_buffer<T> qf(feature_dim());
    encode(encoding, phi, q, s, qf.data(), canonical::side::query, "lrpe::linear_attention_state::query");
    query_features(qf.data(), s, out, norm, eps);
  }

 private:
  /// A snapshot's sizes, checked before anything is allocated for it (and without forming
  /// feature_dim × value_dim, which may overflow for a corrupted snapshot).
  static const linear_attention_snapshot<T>& checked(const linear_attention_snapshot<T>& s) {
    constexpr const char* where = "lrpe::linear_attention_state";
    // (>= 1 only: the sizes of the vectors the snapshot holds bound them; the state's own
    // constructor then checks them against lrpe::max_dim)
    detail::require_shape(s.feature_dim >= 1, where, "snapshot.feature_dim", "must be >= 1", s.feature_dim);
    detail::require_shape(s.value_dim >= 1, where, "snapshot.value_dim", "must be >= 1", s.value_dim);
    const auto nkv = static_cast<index_t>(s.kv.size());
    detail::require_shape(nkv % s.value_dim == 0 && nkv / s.value_dim == s.feature_dim, where, "snapshot.kv",
                          detail::lazy_concat("must have feature_dim × value_dim = ", s.feature_dim, " × ", s.value_dim,
                                              " entries"),
                          nkv);
    detail::require_size(static_cast<index_t>(s.k_sum.size()), s.feature_dim, where, "snapshot.k_sum");
    detail::require_shape(s.count >= 0, where, "snapshot.count", "must be >= 0", s.count);
    detail::require_decay_carry(s.decay_carry, where, "snapshot.decay_carry");
    detail::require_state_contents(s.decay, s.last_position, s.count, std::span<const T>(s.kv),
                                   std::span<const T>(s.k_sum), where, "snapshot.decay", "snapshot.count");
    return s;
  }

  void require_not_before(position_t t, const char* where, const char* arg) const {
    if (!empty()) {
      detail::require_parameter(t >= last_, where, arg,
                                detail::lazy_concat("must be >= last_position() = ", last_, " (non-decreasing)"), t);
      require_reachable(t, where, arg);
    }
  }

  /// t − last_position() must be a position_t (the decay λ^{t−last}); t ≥ last_position().
  void require_reachable(position_t t, const char* where, const char* arg) const {
    detail::require_parameter(detail::difference_fits(last_, t), where, arg,
                              detail::lazy_concat("must be within 2^63 - 1 of last_position() = ", last_,
                                                  " (t - last must fit in int64)"),
                              t);
  }

  void rescale_to(position_t p) {
    if (!empty() && p != last_ && decay_ != 1.0) {
      const T f = detail::carried_decay<T>(decay_factor(p - last_), carry_);
      kv_ *= f;
      k_sum_ *= f;
    }
    last_ = p;
  }

  template <class Encoding, class Phi>
  void encode(const Encoding& encoding, const Phi& phi, const T* x, position_t s, T* features,
              canonical::side which, const char* where) const {
    static_assert(is_linearizable_encoding_v<Encoding>,
                  "lrpe::linear_attention_state: the encoding is not linearizable (it has no "
                  "per-position feature map); use softmax_attention (docs/attention.md)");
    static_assert(feature_map<Phi, T>, "lrpe::linear_attention_state: phi must satisfy lrpe::feature_map");
    detail::require_feature_map<T>(phi, where);
    if constexpr (std::is_same_v<Encoding, no_encoding>) {
      detail::apply_feature_map(phi, x, features, feature_dim());
    } else if constexpr (is_linearizable_encoding_v<Encoding>) {
      static_assert(std::is_same_v<typename Encoding::scalar, T>,
                    "lrpe::linear_attention_state: the encoding's scalar must be the state's");
      detail::require_shape(canonical::feature_dim(encoding) == feature_dim(), where,
                            "encoding.feature_dim()", detail::lazy_concat("must equal feature_dim() = ", feature_dim()),
                            canonical::feature_dim(encoding));
      const index_t d = encoding.dim();
      detail::small_buffer<T> tmp(d);
      detail::apply_feature_map(phi, x, tmp.data(), d);
      detail::encoding_features(encoding, which, tmp.data(), s, features);
    }
  }

  friend struct detail::state_access;

  row_matrix<T> kv_{};
  dense_vector<T> k_sum_{};
  double decay_ = 1.0;
  double carry_ = 1.0;  ///< see detail::carried_decay
  position_t last_ = 0;
  index_t count_ = 0;
};

namespace detail {

/**
 * Internal: a backend kernel that continues a state in the state's own storage (the SIMD
 * backend's decode step), with no copy in or out. S is row-major, d_f rows of d_v, no padding;
 * the kernel keeps S and z decayed to the position it passes to `advance`, which must not
 * precede `last_position()` when keys were added, and rescales them with `carried_decay`
 * starting from `decay_carry()`.
 */
struct state_access {
  template <class T>
  static T* kv(linear_attention_state<T>& s) noexcept {
    return s.kv_.data();
  }
  template <class T>
  static T* k_sum(linear_attention_state<T>& s) noexcept {
    return s.k_sum_.data();
  }
  template <class T>
  static void advance(linear_attention_state<T>& s, position_t last, index_t count, double decay_carry) noexcept {
    if (count > s.count_) s.last_ = last;
    s.count_ = count;
    s.carry_ = decay_carry;
  }
};

}  // namespace detail

}  // namespace v0
}  // namespace lrpe
