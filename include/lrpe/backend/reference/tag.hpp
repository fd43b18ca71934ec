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

namespace detail {
template <class>
inline constexpr bool always_false = false;
}  // namespace detail

}  // namespace backend
}  // namespace v0
}  // namespace lrpe
