// SPDX-License-Identifier: MIT
/**
 * @file warnings_push.hpp
 * Internal: opens the front doors' region in which GCC 12's false AVX-512 warnings are off.
 *
 * GCC before 13 warns that `__Y` "may be used uninitialized" inside its own AVX-512 intrinsic
 * headers (`_mm512_undefined_*`, GCC PR 105593) wherever Eigen's or lrpe's AVX-512 code inlines
 * them: hundreds of warnings in a user's `-Wall -march=native` build. GCC applies a diagnostic
 * pragma along the inlining chain, so turning the two warnings off over lrpe's headers (and the
 * Eigen and xsimd headers they include first) silences them without touching the user's flags.
 * `warnings_pop.hpp` closes the region; nothing else is changed, and only for GCC < 13.
 */
// (no #pragma once: every front door opens its own region)
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
