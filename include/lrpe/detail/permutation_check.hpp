// SPDX-License-Identifier: MIT
/**
 * @file permutation_check.hpp
 * Internal: validation of index arrays as bijections of {0, ..., d-1}.
 */
#pragma once

#include <lrpe/detail/validate.hpp>

#include <span>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace detail {

/// Throws unless `pi` is a permutation of 0..size-1; the message names the first offender.
inline void require_bijection(std::span<const index_t> pi, const char* where, const char* arg) {
  const auto d = static_cast<index_t>(pi.size());
  require_dim(d, where, concat(arg, ".size()").c_str());
  std::vector<bool> seen(pi.size(), false);
  for (std::size_t j = 0; j < pi.size(); ++j) {
    const index_t v = pi[j];
    if (v < 0 || v >= d) {
      throw parameter_error(concat(where, ": argument '", arg,
                                   "' must be a permutation of 0..", d - 1, "; got ", v,
                                   " at index ", j));
    }
    if (seen[static_cast<std::size_t>(v)]) {
      throw parameter_error(concat(where, ": argument '", arg,
                                   "' must be a bijection (each of 0..", d - 1,
                                   " exactly once); got ", v, " twice (again at index ", j, ")"));
    }
    seen[static_cast<std::size_t>(v)] = true;
  }
}

}  // namespace detail
}  // namespace v0
}  // namespace lrpe
