// SPDX-License-Identifier: MIT
/**
 * @file view.hpp
 * Non-owning strided 2-D views (rows = positions, contiguous features) and position sources.
 *
 * A `matrix_view<T>` is what every kernel takes: `rows` rows of `cols` contiguous elements,
 * row i starting at `data + i * row_stride`. Eigen row-major matrices, maps and blocks convert
 * to it without copies (`lrpe::view(m)`); multi-head layouts (BNSH, BSNH) are views with a
 * row stride of d or heads·d.
 */
#pragma once

#include <lrpe/detail/validate.hpp>
#include <lrpe/core/traits.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>

namespace lrpe {
inline namespace v0 {

/**
 * A rows×cols strided matrix view; `T` may be const.
 */
template <class T>
struct matrix_view {
  T* data = nullptr;
  index_t rows = 0;
  index_t cols = 0;
  index_t row_stride = 0;  ///< elements between the starts of consecutive rows (≥ cols)

  constexpr matrix_view() = default;
  constexpr matrix_view(T* data_, index_t rows_, index_t cols_, index_t row_stride_) noexcept
      : data(data_), rows(rows_), cols(cols_), row_stride(row_stride_) {}
  constexpr matrix_view(T* data_, index_t rows_, index_t cols_) noexcept
      : matrix_view(data_, rows_, cols_, cols_) {}
  /// A mutable view converts to a const one.
  template <class U>
    requires(std::is_const_v<T> && std::same_as<std::remove_const_t<T>, U>)
  constexpr matrix_view(const matrix_view<U>& other) noexcept
      : matrix_view(other.data, other.rows, other.cols, other.row_stride) {}

  /// Row i's start. A view without columns may have null data (an empty Eigen matrix's): its
  /// rows are null too (an offset from null is undefined).
  [[nodiscard]] constexpr T* row(index_t i) const noexcept { return data == nullptr ? data : data + i * row_stride; }
  [[nodiscard]] constexpr T& operator()(index_t i, index_t j) const noexcept { return data[i * row_stride + j]; }
  [[nodiscard]] constexpr bool empty() const noexcept { return rows == 0; }
};

/// Checks a view's invariants (non-negative sizes, row_stride ≥ cols, data when non-empty).
template <class T>
void validate(const matrix_view<T>& v, const char* where, const char* arg) {
  // Messages are built only on failure: validate() sits on every kernel's entry.
  if (v.rows < 0 || v.cols < 0)
    detail::fail<shape_error>(where, arg, "must have non-negative sizes", detail::concat(v.rows, "x", v.cols));
  if (v.rows > 1 && v.row_stride < v.cols)
    detail::fail<shape_error>(where, arg, detail::concat("must have row_stride >= cols (", v.cols, ")"), v.row_stride);
  if (v.rows != 0 && v.cols != 0 && v.data == nullptr)
    detail::fail<shape_error>(where, arg, "must have non-null data when non-empty", "nullptr");
  // the offset of the last element must be an index_t: the kernels form every row's pointer
  index_t last = 0;
  if (v.rows > 0 && v.cols > 0 &&
      (__builtin_mul_overflow(v.rows - 1, v.row_stride, &last) || __builtin_add_overflow(last, v.cols - 1, &last)))
    detail::fail<shape_error>(where, arg,
                              "must have the offset of its last element, (rows-1)*row_stride + cols-1, an index_t",
                              detail::concat(v.rows, " rows of stride ", v.row_stride));
}

/// View of an Eigen row-major dense object with unit inner stride (Matrix, Map, Ref, Block).
template <class Derived>
  requires(static_cast<bool>(Derived::IsRowMajor) || Derived::ColsAtCompileTime == 1)
auto view(Eigen::PlainObjectBase<Derived>& m) noexcept {
  return matrix_view<typename Derived::Scalar>(m.data(), m.rows(), m.cols(), m.cols());
}
template <class Derived>
  requires(static_cast<bool>(Derived::IsRowMajor) || Derived::ColsAtCompileTime == 1)
auto view(const Eigen::PlainObjectBase<Derived>& m) noexcept {
  return matrix_view<const typename Derived::Scalar>(m.data(), m.rows(), m.cols(), m.cols());
}
/// View of a row-major Eigen::Map / Ref / Block with direct access (checked inner stride 1).
template <class Derived>
  requires(!std::is_base_of_v<Eigen::PlainObjectBase<std::remove_cvref_t<Derived>>, std::remove_cvref_t<Derived>> &&
           static_cast<bool>(std::remove_cvref_t<Derived>::IsRowMajor) &&
           requires(Derived&& m) { m.data(); m.outerStride(); m.innerStride(); })
auto view(Derived&& m) {
  using S = std::remove_pointer_t<decltype(m.data())>;
  detail::require_shape(m.innerStride() == 1, "lrpe::view", "m.innerStride()", "must be 1",
                        m.innerStride());
  return matrix_view<S>(m.data(), m.rows(), m.cols(), m.outerStride());
}

/**
 * Where the rows are: either `offset + row` or an explicit per-row array (packed batches,
 * KV caches). Converts implicitly from a position and from a span.
 */
class positions {
 public:
  /// Row i is at position `offset + i`.
  constexpr positions(position_t offset = 0) noexcept : offset_(offset) {}  // NOLINT implicit
  /// Row i is at position `array[i]`.
  constexpr positions(std::span<const position_t> array) noexcept  // NOLINT implicit
      : array_(array.data()), size_(static_cast<index_t>(array.size())), is_array_(true) {}
  positions(const std::vector<position_t>& array) noexcept  // NOLINT implicit
      : positions(std::span<const position_t>(array)) {}

  [[nodiscard]] constexpr position_t operator[](index_t row) const noexcept {
    return is_array_ ? array_[row] : offset_ + row;
  }
  [[nodiscard]] constexpr bool is_array() const noexcept { return is_array_; }
  [[nodiscard]] constexpr position_t offset() const noexcept { return offset_; }
  [[nodiscard]] constexpr index_t size() const noexcept { return size_; }

  /// The positions of rows first .. first + count − 1: a sub-block of the same source (an array
  /// slice of exactly `count` entries, or the offset moved by `first`).
  [[nodiscard]] constexpr positions slice(index_t first, index_t count) const noexcept {
    if (!is_array_) return positions(offset_ + first);
    return positions(std::span<const position_t>(array_ + first, static_cast<std::size_t>(count)));
  }

  /**
   * Throws `shape_error` if this is an array whose length differs from `rows`, and
   * `parameter_error` if this is an offset whose last row, `offset + rows − 1`, would pass the
   * largest `position_t`.
   */
  void require_rows(index_t rows, const char* where, const char* arg = "positions") const {
    if (is_array() && size_ != rows) detail::require_size(size_, rows, where, arg);
    if (!is_array() && rows > 1 && offset_ > std::numeric_limits<position_t>::max() - (rows - 1)) {
      detail::fail<parameter_error>(where, arg,
                                    detail::lazy_concat("must be an offset with offset + rows - 1 <= 2^63 - 1 (rows = ",
                                                        rows, ")"),
                                    offset_);
    }
  }

 private:
  const position_t* array_ = nullptr;
  index_t size_ = 0;
  position_t offset_ = 0;
  bool is_array_ = false;
};

namespace detail {

/// True when `hi − lo` (lo ≤ hi) is a `position_t`: computed without overflow for any positions.
constexpr bool difference_fits(position_t lo, position_t hi) noexcept {
  return static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo) <=
         static_cast<std::uint64_t>(std::numeric_limits<position_t>::max());
}

/// t − s of (query s, key t), for encodings whose value needs it exactly (W_{t−s}, exact
/// angles): throws `parameter_error` naming `t` (and s) when the positions are 2^63 or more
/// apart. Attention calls never reach the throw: `require_position_span` checked their
/// positions first.
inline position_t checked_offset(position_t s, position_t t, const char* where) {
  position_t delta;
  if (__builtin_sub_overflow(t, s, &delta))
    fail<parameter_error>(where, "t", lazy_concat("must keep t - s within int64 (s = ", s, ")"), t);
  return delta;
}

/// t − s in double, for encodings that are smooth functions of it (ALiBi's m·(t − s),
/// cosFormer's cos(π(t − s)/2M)): the exact difference rounded once, computed without
/// overflow for any positions (for positions 2^63 or more apart, t and s are rounded first).
[[nodiscard]] constexpr double offset_value(position_t s, position_t t) noexcept {
  position_t delta;
  if (__builtin_sub_overflow(t, s, &delta)) return static_cast<double>(t) - static_cast<double>(s);
  return static_cast<double>(delta);
}

/// The lowest and highest of rows 0 … rows − 1 (rows ≥ 1; an offset checked by `require_rows`).
inline std::pair<position_t, position_t> position_bounds(const positions& p, index_t rows) noexcept {
  if (!p.is_array()) return {p.offset(), p.offset() + (rows - 1)};
  position_t lo = p[0], hi = p[0];
  for (index_t i = 1; i < rows; ++i) {
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  return {lo, hi};
}

/// The lowest and highest position of some rows (`empty` when there are none).
struct position_span {
  position_t lo = 0, hi = 0;
  bool empty = true;
};

/// The spans of one call's query and key positions.
struct call_span {
  position_span q, k;
};

/**
 * Every difference of two positions of one attention call, t − s (and a state's t − last, see
 * `require_within_span`), must be a `position_t`: the relative encodings (bias(t − s), W_{t−s})
 * and the decays λ^{t−s} are functions of it. Checked as: all the call's positions span at most
 * 2^63 − 1. Throws `parameter_error` naming the positions that reach too far: Q's own span,
 * K's own, or K's against Q's. Returns the spans. A scan of array positions (O(n_q + n_k));
 * offsets cost nothing.
 */
inline call_span require_position_span(const positions& qp, index_t nq, const positions& kp, index_t nk,
                                       const char* where, const char* q_arg = "options.q_positions",
                                       const char* k_arg = "options.k_positions") {
  constexpr const char* too_wide = "must span at most 2^63 - 1 (every difference of two positions must fit in int64)";
  const auto span_of = [&](const positions& p, index_t rows, const char* arg) {
    if (rows == 0) return position_span{};
    const auto [a, b] = position_bounds(p, rows);
    if (!difference_fits(a, b)) fail<parameter_error>(where, arg, too_wide, concat("[", a, ", ", b, "]"));
    return position_span{a, b, false};
  };
  const call_span c{span_of(qp, nq, q_arg), span_of(kp, nk, k_arg)};
  if (!c.q.empty && !c.k.empty && !difference_fits(std::min(c.q.lo, c.k.lo), std::max(c.q.hi, c.k.hi))) {
    fail<parameter_error>(where, k_arg,
                          lazy_concat("must lie within 2^63 - 1 of ", q_arg, " = [", c.q.lo, ", ", c.q.hi,
                                      "] (every difference t - s must fit in int64)"),
                          concat("[", c.k.lo, ", ", c.k.hi, "]"));
  }
  return c;
}

/// Throws `parameter_error`, naming Q's or K's positions, unless every position of the call is
/// within 2^63 − 1 of a state's last position `last` (the decays λ^{t−last}).
template <class Name>
void require_within_span(const call_span& c, position_t last, const char* where, Name const& state_name) {
  const auto check = [&](const position_span& s, const char* arg) {
    if (s.empty || difference_fits(std::min(s.lo, last), std::max(s.hi, last))) return;
    fail<parameter_error>(where, arg,
                          lazy_concat("must lie within 2^63 - 1 of ", state_name, ".last_position() = ", last,
                                      " (every difference t - last must fit in int64)"),
                          concat("[", s.lo, ", ", s.hi, "]"));
  };
  check(c.q, "options.q_positions");
  check(c.k, "options.k_positions");
}

}  // namespace detail
}  // namespace v0
}  // namespace lrpe
