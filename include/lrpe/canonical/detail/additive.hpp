// SPDX-License-Identifier: MIT
/**
 * @file additive.hpp
 * Internal: the canonical form shared by the additive variants (q·k + b(t − s)).
 */
#pragma once

#include <lrpe/canonical/canonical_form.hpp>

namespace lrpe {
inline namespace v0 {
namespace canonical {
namespace detail_ {

/// canonical_form(q·k, 1·b(δ)·1) for a callable `double b(position_t δ)`.
template <real_scalar T, class F>
[[nodiscard]] auto additive_canonical(index_t d, F b) {
  return canonical_form(term(identity_map<T>(d), identity_op<T>(d), identity_map<T>(d)),
                        term(one_map<T>(d), bias_op<T, F>(std::move(b)), one_map<T>(d)));
}

}  // namespace detail_
}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
