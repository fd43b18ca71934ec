// SPDX-License-Identifier: MIT
/**
 * @file small_buffer.hpp
 * Internal: a scratch row on the stack for widths up to N, on the heap above (rare: head
 * widths are ≤ 256 in practice). Keeps per-row encoding allocation-free and thread-safe.
 */
#pragma once

#include <lrpe/core/config.hpp>

#include <memory>
#include <new>
#include <type_traits>

namespace lrpe {
inline namespace v0 {
namespace detail {

template <class V, index_t N = 512>
class small_buffer {
 public:
  explicit small_buffer(index_t n) {
    if (n > N) heap_ = std::make_unique<V[]>(static_cast<std::size_t>(n));
  }
  small_buffer(const small_buffer&) = delete;
  small_buffer& operator=(const small_buffer&) = delete;
  [[nodiscard]] V* data() noexcept {
    // Uninitialised on purpose: every element is written before it is read, and zeroing
    // 512 complex<double> per row would cost more than encoding it.
    return heap_ ? heap_.get() : std::launder(reinterpret_cast<V*>(stack_));
  }
  V& operator[](index_t i) noexcept { return data()[i]; }

 private:
  static_assert(std::is_trivially_copyable_v<V> && std::is_trivially_destructible_v<V>);
  alignas(V) unsigned char stack_[static_cast<std::size_t>(N) * sizeof(V)];
  std::unique_ptr<V[]> heap_;
};

}  // namespace detail
}  // namespace v0
}  // namespace lrpe
