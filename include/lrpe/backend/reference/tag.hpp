// SPDX-License-Identifier: MIT
/**
 * @file tag.hpp
 * The reference backend's tag type. Backends are tag types chosen by overload: every public
 * attention entry point takes a `Backend` argument defaulted to `backend::reference`, and calls
 * `backend::softmax_kernel(Backend{}, ...)` / `backend::linear_kernel(Backend{}, ...)`. A backend
 * that does not provide a kernel fails at compile time with a sentence naming the pair.
 */
#pragma once

#include <lrpe/core/config.hpp>

#include <type_traits>

namespace lrpe {
inline namespace v0 {
namespace backend {

/// Plain loops and Eigen products, written for clarity: the oracle of every other backend.
struct reference {
  static constexpr const char* name = "reference";
};

/// What `call_guard` returns for backends that share nothing between calls.
struct no_call_guard {};

/**
 * Held by every attention entry point for the length of one call (after validation), found by
 * ADL on the backend tag: a backend whose scratch may be shared by calls from several threads
 * (a `simd_policy` on a pool's workspace) returns a lock. The default holds nothing.
 */
template <class Backend>
no_call_guard call_guard(const Backend&) noexcept {
  return {};
}

namespace detail {
template <class>
inline constexpr bool always_false = false;
}  // namespace detail

}  // namespace backend
}  // namespace v0
}  // namespace lrpe
