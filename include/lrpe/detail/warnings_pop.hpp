// SPDX-License-Identifier: MIT
/**
 * @file warnings_pop.hpp
 * Internal: closes the region that `warnings_push.hpp` opened.
 */
// (no #pragma once: every front door closes its own region)
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic pop
#endif
