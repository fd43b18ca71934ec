// SPDX-License-Identifier: MIT
/**
 * @file lambda_kernel.hpp
 * The public extension point of the SIMD backend for a user Λ policy: specialise
 * `backend::simd_lambda_kernel<Arch, L>` and every encoder with that Λ after a real P takes the
 * vectorised path instead of the reference one (docs/howto-simd-lambda-kernel.md, a whole
 * program that the tests compile and run).
 *
 * The encoder splits Λ⁽ˢ⁾ in two, as lrpe's own Λ kernels do (detail/kernels.hpp): a table row
 * per position, filled once and reused for every head, batch entry, and for Q and K; and a
 * per-row `apply` that reads it. What a specialisation `K` for a Λ `L` with scalar `T` provides
 * (checked by `simd_lambda_kernel_for`, with the missing member named in the error):
 *
 * | member | meaning |
 * |---|---|
 * | `static constexpr bool vectorised = true` | opts in (the primary template says false) |
 * | `static constexpr bool is_identity = false` | true only for Λ = I (the row is copied) |
 * | `using entry = ...` | the table's element type (T, or an index type) |
 * | `explicit K(const L&)` | built once per encoder, before any call |
 * | `table_width()` | entries per position |
 * | `angle_count()` | doubles of scratch that `fill` may use for c and s (may be 0) |
 * | `fill(position_t s, entry* row, double* c, double* s)` | writes position s's table row |
 * | `stream_layout_ok()` | whether `apply<true>` may be used (else always `apply<false>`) |
 * | `template <bool Stream> apply(const entry* row, const T* x, T* y)` | y = Λ⁽ˢ⁾ x, x = P x₀ |
 *
 * `apply<true>` is called only when `stream_layout_ok()` and the output row is aligned to the
 * vector width; it may store non-temporally. x and y never alias. Keep the angles exact in
 * `fill` (`lrpe::exact_cos_sin`) and the arithmetic of `apply` in T.
 */
#pragma once

#include <lrpe/backend/simd/tag.hpp>
#include <lrpe/core/concepts.hpp>

#include <concepts>

namespace lrpe {
inline namespace v0 {
namespace backend {

/**
 * The SIMD kernel of a Λ policy: a user specialises it for their own Λ (the table above).
 * The primary template says "no kernel": an encoder with such a Λ runs the reference path.
 * @tparam Arch an xsimd arch tag; a specialisation is usually generic in it (xsimd::batch<T, Arch>).
 * @tparam L    the Λ policy.
 */
template <class Arch, class L>
struct simd_lambda_kernel {
  static constexpr bool vectorised = false;
};

/// What the SIMD encoder needs of a vectorised Λ kernel `K` for `L` (the file's table).
template <class K, class L>
concept simd_lambda_kernel_for =
    lambda_policy<L> && K::vectorised && std::same_as<std::remove_cv_t<decltype(K::is_identity)>, bool> &&
    std::constructible_from<K, const L&> &&
    requires(const K& k, position_t s, typename K::entry* row, double* cs, const typename L::scalar* x,
             typename L::scalar* y) {
      { k.table_width() } -> std::convertible_to<index_t>;
      { k.angle_count() } -> std::convertible_to<index_t>;
      { k.stream_layout_ok() } -> std::convertible_to<bool>;
      k.fill(s, row, cs, cs);
      k.template apply<false>(row, x, y);
      k.template apply<true>(row, x, y);
    };

}  // namespace backend
}  // namespace v0
}  // namespace lrpe
