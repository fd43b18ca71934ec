// SPDX-License-Identifier: MIT
/**
 * @file urpe.hpp
 * URPE's post-softmax Toeplitz reweighting (Luo et al. 2022, "Your Transformer May Not be as
 * Powerful as You Expect"; lsj2408/URPE):
 *
 *     A = softmax(scale·QKᵀ + B) ⊙ C,   C_st = c_h[bucket(t − s)]   (not renormalised)
 *
 * C acts after the softmax, so it is not an f_rel and has no canonical form: it is an option of
 * softmax attention, carried by this type. B is any additive encoding (URPE uses a T5 bias
 * over the same buckets). Softmax-RPE attention is row-stochastic, which limits RPE-only
 * transformers; the ⊙C reweighting restores universal approximation.
 *
 * Layout: per-head tables heads × num_buckets over T5-style buckets (rel = key − query;
 * URPE: 64 bidirectional buckets, max distance 128, shared by all layers). `ones` gives the
 * initialisation under which training starts as plain RPE.
 */
#pragma once

#include <lrpe/canonical/buckets.hpp>
#include <lrpe/canonical/detail/common.hpp>

#include <concepts>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace canonical {

/// A post-softmax reweighting: attention multiplies the normalised weight α_st by `weight(s, t)`.
template <class R>
concept post_softmax_reweighting = requires(const R& r, position_t s) {
  { R::is_post_softmax } -> std::convertible_to<bool>;
  requires R::is_post_softmax;
  { r.weight(s, s) } -> std::convertible_to<double>;
};

template <real_scalar T>
class urpe {
 public:
  using scalar = T;
  static constexpr bool is_post_softmax = true;
  static constexpr bool is_linearizable = false;

  /// URPE's bucket defaults: 64 bidirectional buckets, max distance 128.
  static constexpr t5_buckets default_buckets{64, 128, true};

  /// One head, C = 1 over `default_buckets`: no reweighting (as `ones(1)`), so that
  /// `softmax_options<urpe<T>>` is default-constructible; assign a trained table before use.
  urpe() : urpe(default_buckets, row_matrix<T>::Ones(1, default_buckets.num_buckets)) {}

  /**
   * @param cfg   the bucket function (T5 semantics).
   * @param table heads × num_buckets, finite.
   * @throws shape_error (table shape), parameter_error (cfg), domain_error (non-finite).
   */
  urpe(t5_buckets cfg, row_matrix<T> table) : cfg_(cfg) {
    constexpr const char* where = "lrpe::canonical::urpe";
    cfg_.validate(where);
    lrpe::detail::require_shape(table.rows() >= 1 && table.cols() == cfg.num_buckets, where, "table",
                                lrpe::detail::lazy_concat("must be heads x num_buckets = heads x ", cfg.num_buckets,
                                                     " with heads >= 1"),
                                lrpe::detail::lazy_concat(table.rows(), "x", table.cols()));
    detail_::require_finite_table(table, where, "table");
    table_ = detail_::share(std::move(table));
  }
  /// C = 1 for every head and bucket (training then starts as plain RPE).
  /// @throws shape_error (heads < 1, heads or num_buckets > lrpe::max_dim), parameter_error (cfg).
  [[nodiscard]] static urpe ones(index_t heads, t5_buckets cfg = default_buckets) {
    constexpr const char* where = "lrpe::canonical::urpe::ones";
    lrpe::detail::require_shape(heads >= 1, where, "heads", "must be >= 1", heads);
    // the sizes of the table allocated here: checked before it is
    lrpe::detail::require_max_dim(heads, where, "heads");
    cfg.validate(where);
    lrpe::detail::require_max_dim(cfg.num_buckets, where, "num_buckets");
    return urpe(cfg, row_matrix<T>::Ones(heads, cfg.num_buckets));
  }

  [[nodiscard]] const t5_buckets& buckets() const noexcept { return cfg_; }
  [[nodiscard]] index_t heads() const noexcept { return table_->rows(); }
  [[nodiscard]] index_t head_index() const noexcept { return h_; }
  [[nodiscard]] const row_matrix<T>& table() const noexcept { return *table_; }
  [[nodiscard]] urpe head(index_t h) const {
    detail_::require_head(h, heads(), "lrpe::canonical::urpe::head");
    urpe v = *this;
    v.h_ = h;
    return v;
  }

  /// c_h[bucket(δ)] for the offset δ = t − s.
  [[nodiscard]] double weight_at(position_t delta) const noexcept {
    return static_cast<double>((*table_)(h_, t5_bucket(delta, cfg_)));
  }
  /// C_st, the factor applied to the softmax weight of (query s, key t); t − s saturated (exact:
  /// every offset past 2^63 − 1 lands in the last bucket).
  [[nodiscard]] double weight(position_t s, position_t t) const noexcept {
    return weight_at(saturating_offset(s, t));
  }
  /// Same as `weight` (the paper's name).
  [[nodiscard]] double c(position_t s, position_t t) const noexcept { return weight(s, t); }

  /// The table's entries, every head's (the size of its gradient).
  [[nodiscard]] index_t parameter_count() const noexcept { return table_->size(); }
  /// A zero gradient laid out as the table (heads × num_buckets, row-major), for
  /// `softmax_options::reweight_gradient` (docs/training.md).
  [[nodiscard]] std::vector<double> make_gradient() const {
    return std::vector<double>(static_cast<std::size_t>(parameter_count()), 0.0);
  }
  /// dL/dc_h[bucket(t − s)] += g for this view's head h (`grad`: `make_gradient()`-shaped).
  void accumulate_weight_gradient(position_t s, position_t t, double g, double* grad) const noexcept {
    grad[h_ * cfg_.num_buckets + t5_bucket(saturating_offset(s, t), cfg_)] += g;
  }

 private:
  t5_buckets cfg_;
  detail_::shared_table<row_matrix<T>> table_;
  index_t h_ = 0;
};

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
