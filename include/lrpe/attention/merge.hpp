// SPDX-License-Identifier: MIT
/**
 * @file merge.hpp
 * Softmax attention split over its keys, and put back together: `merge_attention_states`.
 *
 * A call over keys K_a writes, per query row, o_a = Σ_{t∈a} e^{l_t} w_t / Σ_{t∈a} e^{l_t} and
 * lse_a = log Σ_{t∈a} e^{l_t} (`softmax_attention_lse`; w_t = v_t, or c_t (v_t + a^V) with a
 * reweighting and a value term). Over the keys of parts a, b, … the whole call's row is
 *
 *     m = max_p lse_p,   W_p = e^{lse_p − m},   o = Σ_p W_p o_p / Σ_p W_p,   lse = m + log Σ_p W_p
 *
 * exactly (the online softmax's step, across calls, threads or machines: split-KV decoding,
 * ring attention). A part with no visible key has lse = −∞ and weighs 0; a row no part sees
 * stays O = 0, lse = −∞, as in one call; a NaN lse (a NaN logit) makes its row NaN. The
 * weights are formed in double, so the merge is as accurate as the parts, in any order.
 *
 * The backward of a split call is each part's `softmax_attention_backward` given the merged O
 * and lse (its probabilities are then the whole call's, restricted to its keys): dK and dV are
 * the part's, and dQ is the sum of the parts' (docs/attention.md).
 */
#pragma once

#include <lrpe/attention/options.hpp>
#include <lrpe/core/error.hpp>
#include <lrpe/core/view.hpp>
#include <lrpe/detail/small_buffer.hpp>

#include <cmath>
#include <limits>
#include <span>
#include <type_traits>

namespace lrpe {
inline namespace v0 {

namespace detail {

/// Row i of the merge of `parts` (each an output row and its lse) into `out` and `lse`.
template <class T, class Parts>
void merge_row(const Parts& parts, std::size_t count, index_t i, index_t cols, T* out, T& lse) {
  double m = -std::numeric_limits<double>::infinity();
  bool nan = false;
  for (std::size_t p = 0; p < count; ++p) {
    const double l = static_cast<double>(parts.lse(p, i));
    nan = nan || std::isnan(l);
    m = l > m ? l : m;
  }
  if (nan) {
    std::fill(out, out + cols, std::numeric_limits<T>::quiet_NaN());
    lse = std::numeric_limits<T>::quiet_NaN();
    return;
  }
  if (m == -std::numeric_limits<double>::infinity()) {  // no part sees a key
    std::fill(out, out + cols, T(0));
    lse = static_cast<T>(m);
    return;
  }
  double total = 0;
  for (std::size_t p = 0; p < count; ++p) total += std::exp(static_cast<double>(parts.lse(p, i)) - m);
  small_buffer<double> acc(cols);
  std::fill(acc.data(), acc.data() + cols, 0.0);
  for (std::size_t p = 0; p < count; ++p) {
    const double w = std::exp(static_cast<double>(parts.lse(p, i)) - m) / total;
    if (w == 0) continue;  // (an empty part's row may hold anything)
    const T* row = parts.row(p, i);
    for (index_t j = 0; j < cols; ++j) acc[j] += w * static_cast<double>(row[j]);
  }
  for (index_t j = 0; j < cols; ++j) out[j] = static_cast<T>(acc[j]);
  lse = static_cast<T>(m + std::log(total));
}

}  // namespace detail

/**
 * Merges the partial results of softmax attention over disjoint sets of keys (the same query
 * rows): `out` and `lse` become the result over the union (the file comment's formula).
 *
 * @param outs  the parts' outputs, each n_q × d_v (`matrix_view<const T>`s, any row stride).
 * @param lses  the parts' log-sum-exps, n_q each (`softmax_attention_lse`'s).
 * @param out   n_q × d_v, written (may be one of `outs`' memory: each row is read before written).
 * @param lse   n_q, written (may be one of `lses`' memory, likewise).
 * @throws shape_error (no part, a part's or lse's shape not out's).
 */
template <class T>
void merge_attention_states(std::span<const matrix_view<const T>> outs, std::span<const std::span<const T>> lses,
                            const matrix_view<T>& out, std::span<T> lse) {
  constexpr const char* where = "lrpe::merge_attention_states";
  detail::require_shape(!outs.empty(), where, "outs.size()", "must be >= 1", outs.size());
  detail::require_equal(static_cast<index_t>(lses.size()), static_cast<index_t>(outs.size()), where, "lses.size()",
                        "outs.size()");
  validate(out, where, "out");
  detail::require_equal(static_cast<index_t>(lse.size()), out.rows, where, "lse.size()", "out.rows");
  for (std::size_t p = 0; p < outs.size(); ++p) {
    validate(outs[p], where, "outs[p]");
    detail::require_shape(outs[p].rows == out.rows && outs[p].cols == out.cols, where, "outs[p]",
                          detail::lazy_concat("must be ", out.rows, "x", out.cols, " (out's shape; part ", p, ")"),
                          detail::lazy_concat(outs[p].rows, "x", outs[p].cols));
    detail::require_shape(static_cast<index_t>(lses[p].size()) == out.rows, where, "lses[p].size()",
                          detail::lazy_concat("must equal out.rows = ", out.rows, " (part ", p, ")"), lses[p].size());
  }
  struct parts_t {
    std::span<const matrix_view<const T>> o;
    std::span<const std::span<const T>> l;
    [[nodiscard]] T lse(std::size_t p, index_t i) const { return l[p][static_cast<std::size_t>(i)]; }
    [[nodiscard]] const T* row(std::size_t p, index_t i) const { return o[p].row(i); }
  } parts{outs, lses};
  for (index_t i = 0; i < out.rows; ++i)
    detail::merge_row(parts, outs.size(), i, out.cols, out.row(i), lse[static_cast<std::size_t>(i)]);
}

/**
 * Merges one part (o_b, lse_b) into (out, lse) in place: `merge_attention_states` of the two.
 * Folding parts one at a time in any order gives the many-part merge within rounding.
 * @param out, lse  the result so far (n_q × d_v, n_q): read, then written.
 * @param o_b, lse_b the part to fold in (same shapes); a matrix_input (view or row-major Eigen).
 * @throws shape_error (shapes).
 */
template <class O, class OB, class S>
  requires detail::matrix_input<OB>
void merge_attention_states(O&& out_in, std::span<S> lse, const OB& o_b_in, std::span<const S> lse_b) {
  const auto out = detail::as_output(out_in);
  const auto o_b = detail::as_input(o_b_in);
  static_assert(std::is_same_v<decltype(out), const matrix_view<S>> && std::is_same_v<decltype(o_b), const matrix_view<const S>>,
                "lrpe::merge_attention_states: out, lse, o_b and lse_b must share one scalar type");
  const matrix_view<const S> views[2] = {matrix_view<const S>(out.data, out.rows, out.cols, out.row_stride), o_b};
  const std::span<const S> spans[2] = {std::span<const S>(lse), lse_b};
  merge_attention_states<S>(std::span<const matrix_view<const S>>(views), std::span<const std::span<const S>>(spans), out,
                            lse);
}

}  // namespace v0
}  // namespace lrpe
