// SPDX-License-Identifier: MIT
/**
 * @file canonical_form.hpp
 * The canonical form of a relative positional encoding:
 *
 *     f_rel(q_s, k_t) = Σ_{l=1..m} Re( q̂_s⁽ˡ⁾ᴴ W⁽ˡ⁾_{t−s} k̂_t⁽ˡ⁾ )
 *
 * with m terms, each a position-free q̂ map, a position-free k̂ map and a Toeplitz operator
 * W⁽ˡ⁾_{t−s} (primitives.hpp). Every variant in lrpe/canonical/ has a `canonical()` that returns
 * its canonical form; a `canonical_form` is itself a `relative_encoding`, so a new variant can be
 * written by composing primitives.
 *
 * Dense view (for tests and plots): with q̂ = [q̂⁽¹⁾; …; q̂⁽ᵐ⁾] and k̂ stacked likewise,
 * f_rel = Re(q̂ᴴ W_{t−s} k̂) with W_{t−s} = blockdiag(W⁽¹⁾_{t−s}, …, W⁽ᵐ⁾_{t−s}) (`dense_w`).
 */
#pragma once

#include <lrpe/canonical/primitives.hpp>
#include <lrpe/core/view.hpp>

#include <cmath>
#include <tuple>
#include <type_traits>

namespace lrpe {
inline namespace v0 {
namespace canonical {

/**
 * One canonical term Re(q̂(q)ᴴ W_{t−s} k̂(k)).
 * @tparam QM, KM `qk_map`s; @tparam W a `w_operator` of shape QM::out_dim × KM::out_dim.
 */
template <qk_map QM, w_operator W, qk_map KM>
class term {
 public:
  using scalar = typename QM::scalar;
  using value_type = typename W::value_type;
  static_assert(std::is_same_v<typename KM::scalar, scalar> && std::is_same_v<typename W::scalar, scalar>,
                "lrpe::canonical::term: q-map, W and k-map must have the same scalar type");

  /// @throws shape_error if the widths do not chain (q̂ width = W rows, k̂ width = W cols,
  ///         both maps read rows of the same width).
  term(QM q, W w, KM k) : q_(std::move(q)), w_(std::move(w)), k_(std::move(k)) {
    constexpr const char* where = "lrpe::canonical::term";
    detail::require_shape(q_.in_dim() == k_.in_dim(), where, "k_map.in_dim()",
                          detail::lazy_concat("must equal q_map.in_dim() = ", q_.in_dim()), k_.in_dim());
    detail::require_shape(q_.out_dim() == w_.rows(), where, "w.rows()",
                          detail::lazy_concat("must equal q_map.out_dim() = ", q_.out_dim()), w_.rows());
    detail::require_shape(k_.out_dim() == w_.cols(), where, "w.cols()",
                          detail::lazy_concat("must equal k_map.out_dim() = ", k_.out_dim()), w_.cols());
  }

  [[nodiscard]] const QM& q_map() const noexcept { return q_; }
  [[nodiscard]] const W& w() const noexcept { return w_; }
  [[nodiscard]] const KM& k_map() const noexcept { return k_; }

  /// d, the width of q and k.
  [[nodiscard]] index_t dim() const noexcept { return q_.in_dim(); }
  [[nodiscard]] index_t q_hat_dim() const noexcept { return q_.out_dim(); }
  [[nodiscard]] index_t k_hat_dim() const noexcept { return k_.out_dim(); }

  /// Re(q̂(q)ᴴ W_{t−s} k̂(k)), accumulated in double.
  [[nodiscard]] double score(const scalar* q, position_t s, const scalar* k, position_t t) const {
    const index_t mq = q_hat_dim(), mk = k_hat_dim();
    detail::small_buffer<scalar> qh(mq), kh(mk);
    detail::small_buffer<value_type> wk(mq);
    q_.apply(q, qh.data());
    k_.apply(k, kh.data());
    const position_t delta = detail::checked_offset(s, t, "lrpe::canonical::term::score");
    w_.apply(delta, kh.data(), wk.data());
    double acc = 0;
    for (index_t i = 0; i < mq; ++i)
      acc += static_cast<double>(qh[i]) * static_cast<double>(detail::real_part(wk[i]));
    return acc;
  }

  void q_hat(const scalar* q, scalar* out) const { q_.apply(q, out); }
  void k_hat(const scalar* k, scalar* out) const { k_.apply(k, out); }
  [[nodiscard]] dense_matrix<value_type> dense_w(position_t delta) const { return w_.dense(delta); }

 private:
  QM q_;
  W w_;
  KM k_;
};

template <class QM, class W, class KM>
term(QM, W, KM) -> term<QM, W, KM>;

namespace detail_ {
template <class T>
inline constexpr bool is_term_v = false;
template <class QM, class W, class KM>
inline constexpr bool is_term_v<term<QM, W, KM>> = true;
}  // namespace detail_

/**
 * f_rel as a sum of m = sizeof...(Terms) canonical terms.
 *
 * A `relative_encoding`: `score(q, s, k, t)` sums the terms through their operators;
 * `q_hat`, `k_hat` and `dense_w` give the stacked dense view.
 */
template <class... Terms>
class canonical_form {
  static_assert(sizeof...(Terms) >= 1, "lrpe::canonical::canonical_form needs at least one term");
  static_assert((detail_::is_term_v<Terms> && ...),
                "lrpe::canonical::canonical_form<Terms...>: every argument must be a lrpe::canonical::term");

 public:
  using scalar = typename std::tuple_element_t<0, std::tuple<Terms...>>::scalar;
  static_assert((std::is_same_v<typename Terms::scalar, scalar> && ...),
                "lrpe::canonical::canonical_form: all terms must have the same scalar type");
  /// True when some W⁽ˡ⁾ is complex (a complex LRPE encoder).
  static constexpr bool is_complex = (is_complex_v<typename Terms::value_type> || ...);
  using value_type = maybe_complex_t<scalar, is_complex>;

  /// @throws shape_error if the terms read rows of different widths.
  explicit canonical_form(Terms... terms) : terms_(std::move(terms)...) {
    const index_t d = std::get<0>(terms_).dim();
    std::apply([d](const auto&... t) {
      (detail::require_shape(t.dim() == d, "lrpe::canonical::canonical_form", "term.dim()",
                             detail::lazy_concat("must equal the first term's dim() = ", d), t.dim()), ...);
    }, terms_);
  }

  /// m, the number of terms.
  [[nodiscard]] static constexpr std::size_t size() noexcept { return sizeof...(Terms); }
  /// Term l (0-based).
  template <std::size_t L>
  [[nodiscard]] const auto& term() const noexcept { return std::get<L>(terms_); }

  [[nodiscard]] index_t dim() const noexcept { return std::get<0>(terms_).dim(); }
  /// Width of the stacked q̂ (Σ_l width of q̂⁽ˡ⁾) and of the stacked k̂.
  [[nodiscard]] index_t q_hat_dim() const noexcept {
    return std::apply([](const auto&... t) { return (t.q_hat_dim() + ...); }, terms_);
  }
  [[nodiscard]] index_t k_hat_dim() const noexcept {
    return std::apply([](const auto&... t) { return (t.k_hat_dim() + ...); }, terms_);
  }

  /// f_rel(q_s, k_t) = Σ_l Re(q̂⁽ˡ⁾ᴴ W⁽ˡ⁾_{t−s} k̂⁽ˡ⁾), through the operators (no dense W).
  [[nodiscard]] double score(const scalar* q, position_t s, const scalar* k, position_t t) const {
    return std::apply([&](const auto&... tm) { return (tm.score(q, s, k, t) + ...); }, terms_);
  }

  /// The stacked q̂ = [q̂⁽¹⁾; …; q̂⁽ᵐ⁾] of a row of width dim().
  [[nodiscard]] dense_vector<scalar> q_hat(const scalar* q) const {
    dense_vector<scalar> out(q_hat_dim());
    index_t at = 0;
    std::apply([&](const auto&... t) { ((t.q_hat(q, out.data() + at), at += t.q_hat_dim()), ...); }, terms_);
    return out;
  }
  /// The stacked k̂.
  [[nodiscard]] dense_vector<scalar> k_hat(const scalar* k) const {
    dense_vector<scalar> out(k_hat_dim());
    index_t at = 0;
    std::apply([&](const auto&... t) { ((t.k_hat(k, out.data() + at), at += t.k_hat_dim()), ...); }, terms_);
    return out;
  }

  /// W_δ = blockdiag(W⁽¹⁾_δ, …, W⁽ᵐ⁾_δ), q_hat_dim()×k_hat_dim(), materialised on request.
  [[nodiscard]] dense_matrix<value_type> dense_w(position_t delta) const {
    dense_matrix<value_type> w = dense_matrix<value_type>::Zero(q_hat_dim(), k_hat_dim());
    index_t r = 0, c = 0;
    std::apply([&](const auto&... t) {
      ((w.block(r, c, t.q_hat_dim(), t.k_hat_dim()) = t.dense_w(delta).template cast<value_type>(),
        r += t.q_hat_dim(), c += t.k_hat_dim()), ...);
    }, terms_);
    return w;
  }

  /// Re(q̂ᴴ W_{t−s} k̂) through the dense view (slow; for inspection and tests).
  [[nodiscard]] double dense_score(const scalar* q, position_t s, const scalar* k, position_t t) const {
    const auto qh = q_hat(q).template cast<value_type>().eval();
    const auto kh = k_hat(k).template cast<value_type>().eval();
    const position_t delta = detail::checked_offset(s, t, "lrpe::canonical::canonical_form::dense_score");
    return static_cast<double>(detail::real_part(qh.dot(dense_w(delta) * kh)));
  }

 private:
  std::tuple<Terms...> terms_;
};

/**
 * The n_q×n_k matrix of f_rel(q_i, k_j) of any relative encoding, with query row i at
 * `qpos[i]` and key row j at `kpos[j]` (for inspection and plots; O(n²) score calls).
 * @throws shape_error if the widths or position arrays do not match; parameter_error if some
 * t − s does not fit in int64.
 */
template <class V, class DQ, class DK>
  requires requires(const V& v, const typename V::scalar* x, position_t s) { v.score(x, s, x, s); v.dim(); }
[[nodiscard]] dense_matrix<double> score_matrix(const V& v, const Eigen::MatrixBase<DQ>& q,
                                                const Eigen::MatrixBase<DK>& k, positions qpos = 0,
                                                positions kpos = 0) {
  using T = typename V::scalar;
  constexpr const char* where = "lrpe::canonical::score_matrix";
  const row_matrix<T> qr = q, kr = k;
  detail::require_shape(qr.cols() == v.dim(), where, "q.cols", detail::lazy_concat("must equal dim() = ", v.dim()), qr.cols());
  detail::require_shape(kr.cols() == v.dim(), where, "k.cols", detail::lazy_concat("must equal dim() = ", v.dim()), kr.cols());
  qpos.require_rows(qr.rows(), where, "qpos");
  kpos.require_rows(kr.rows(), where, "kpos");
  detail::require_position_span(qpos, qr.rows(), kpos, kr.rows(), where, "qpos", "kpos");
  dense_matrix<double> out(qr.rows(), kr.rows());
  for (index_t i = 0; i < qr.rows(); ++i)
    for (index_t j = 0; j < kr.rows(); ++j)
      out(i, j) = v.score(qr.row(i).data(), qpos[i], kr.row(j).data(), kpos[j]);
  return out;
}

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
