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

#include <span>
#include <type_traits>

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

  [[nodiscard]] constexpr T* row(index_t i) const noexcept { return data + i * row_stride; }
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

  /// Throws `shape_error` if this is an array whose length differs from `rows`.
  void require_rows(index_t rows, const char* where, const char* arg = "positions") const {
    if (is_array() && size_ != rows) detail::require_size(size_, rows, where, arg);
  }

 private:
  const position_t* array_ = nullptr;
  index_t size_ = 0;
  position_t offset_ = 0;
  bool is_array_ = false;
};

}  // namespace v0
}  // namespace lrpe
