// SPDX-License-Identifier: MIT
/**
 * @file deberta.hpp
 * DeBERTa-v2 disentangled attention (He et al.; HF transformers `modeling_deberta_v2.py`):
 *
 *     f_rel(q_s, k_t) = q_s·k_t  +  q_s·K_r[c(s, t)]  +  k_t·Q_r[c(s, t)]
 *                       (c2c)       (c2p)               (p2c)
 *     c(s, t) = clamp(δ(s, t) + span, 0, 2·span − 1),  δ(s, t) = log_bucket(s − t)
 *
 * with rel = query_pos − key_pos (the opposite sign to T5), log buckets as in
 * `deberta_log_bucket`, span = position_buckets (or max_relative_positions without buckets),
 * and all three terms divided by √(d·(1 + #position terms)) = √(3d) with both (`default_scale`).
 *
 * p2c index: HF gathers key·Q_rᵀ at clamp(−r_pos + span) with r_pos taken *key-major* and then
 * transposes, so the index that reaches score(s, t) is clamp(log_bucket(s − t) + span), the
 * same as c2p (the paper writes δ(j, i) for p2c; the code, which trained the checkpoints, uses
 * δ(i, j)). lrpe reproduces the code.
 *
 * - canonical: m = 3: (q, I, k), (q, K_r[c] as a d×1 column, 1), (1, Q_r[c]ᵀ as a 1×d row, k);
 * - not linearizable (bucketed and clamped offsets).
 *
 * Layout: the projected relative tables K_r = key_proj(rel_embeddings) and
 * Q_r = query_proj(rel_embeddings) are 2·span × (heads·d), head h in columns [h·d, (h+1)·d)
 * (HF's layout before `transpose_for_scores`). `from_embeddings` projects them; DeBERTa-v3's
 * `share_att_key` means passing the content projections W_k, W_q there.
 *
 * Gradient (`score_backward`, through attention's backward): a head's parameters, laid out as
 * [K_r's columns of head h (2·span × d, row-major) if c2p, then Q_r's if p2c].
 * `gradient_tables` gathers the heads' into K_r's and Q_r's shapes, and `embeddings_backward`
 * takes those through `from_embeddings`' projections (the relative embeddings, W and b; with
 * share_att_key, W's gradient adds to the content projection's).
 */
#pragma once

#include <lrpe/canonical/buckets.hpp>
#include <lrpe/canonical/canonical_form.hpp>
#include <lrpe/canonical/detail/common.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace canonical {

/// Which position terms DeBERTa uses (`pos_att_type`); deberta-v2/v3: both.
struct deberta_terms {
  bool c2p = true;
  bool p2c = true;
  [[nodiscard]] constexpr int count() const noexcept { return int(c2p) + int(p2c); }
};

/// A linear projection y = x·W + b (W: in × out; b: out entries, or empty for none).
template <real_scalar T>
struct linear_projection {
  row_matrix<T> weight;
  dense_vector<T> bias = {};
};

/// DeBERTa's table gradients in the constructor's shapes (`gradient_tables`); a table whose
/// term is disabled is empty.
struct deberta_gradient {
  row_matrix<double> pos_key, pos_query;
};

/// The gradients of `from_embeddings`' inputs (`embeddings_backward`).
struct deberta_embeddings_gradient {
  row_matrix<double> rel_embeddings;  ///< rel_embeddings' shape (rows past 2·span: zero)
  linear_projection<double> key;      ///< dW_k, db_k (empty without c2p)
  linear_projection<double> query;    ///< dW_q, db_q (empty without p2c)
};

template <real_scalar T>
class deberta_v2 {
 public:
  using scalar = T;
  static constexpr bool is_linearizable = false;

  /**
   * @param d         head width.
   * @param heads     number of heads (≥ 1).
   * @param cfg       position_buckets and max_relative_positions.
   * @param pos_key   K_r, 2·span × (heads·d), finite.
   * @param pos_query Q_r, 2·span × (heads·d), finite (may be empty when !terms.p2c).
   * @param terms     which position terms are used.
   * @throws shape_error (sizes), parameter_error (cfg), domain_error (non-finite tables).
   */
  deberta_v2(index_t d, index_t heads, deberta_buckets cfg, row_matrix<T> pos_key, row_matrix<T> pos_query,
             deberta_terms terms = {})
      : d_(d), cfg_(cfg), terms_(terms), heads_(heads) {
    constexpr const char* where = "lrpe::canonical::deberta_v2";
    require_sizes(d, heads, where);
    cfg_.validate(where);
    const index_t rows = 2 * cfg_.span();
    if (terms.c2p) {
      detail_::require_table_shape(pos_key, rows, heads * d, where, "pos_key");
      detail_::require_finite_table(pos_key, where, "pos_key");
    }
    if (terms.p2c) {
      detail_::require_table_shape(pos_query, rows, heads * d, where, "pos_query");
      detail_::require_finite_table(pos_query, where, "pos_query");
    }
    key_ = detail_::share(std::move(pos_key));
    query_ = detail_::share(std::move(pos_query));
  }

  /**
   * Projects relative embeddings: K_r = E·W_k + b_k, Q_r = E·W_q + b_q on the first 2·span rows
   * of E (HF slices `rel_embeddings[:2*att_span]`; apply its LayerNorm before calling).
   * @param rel_embeddings ≥ 2·span rows × hidden.
   * @param key, query projections hidden × (heads·d) (the content projections for share_att_key).
   */
  [[nodiscard]] static deberta_v2 from_embeddings(index_t d, index_t heads, deberta_buckets cfg,
                                                  const row_matrix<T>& rel_embeddings,
                                                  const linear_projection<T>& key, const linear_projection<T>& query,
                                                  deberta_terms terms = {}) {
    constexpr const char* where = "lrpe::canonical::deberta_v2::from_embeddings";
    require_sizes(d, heads, where);
    cfg.validate(where);
    const index_t rows = 2 * cfg.span();
    lrpe::detail::require_shape(rel_embeddings.rows() >= rows, where, "rel_embeddings.rows()",
                                lrpe::detail::lazy_concat("must be >= 2*span = ", rows), rel_embeddings.rows());
    auto project = [&](const linear_projection<T>& p, const char* arg) -> row_matrix<T> {
      detail_::require_table_shape(p.weight, rel_embeddings.cols(), heads * d, where, arg);
      row_matrix<T> out = rel_embeddings.topRows(rows) * p.weight;
      if (p.bias.size() != 0) {
        lrpe::detail::require_shape(p.bias.size() == heads * d, where, "bias.size()",
                                    lrpe::detail::lazy_concat("must be heads*d = ", heads * d), p.bias.size());
        out.rowwise() += p.bias.transpose();
      }
      return out;
    };
    row_matrix<T> k = terms.c2p ? project(key, "key.weight") : row_matrix<T>();
    row_matrix<T> q = terms.p2c ? project(query, "query.weight") : row_matrix<T>();
    return deberta_v2(d, heads, cfg, std::move(k), std::move(q), terms);
  }

  [[nodiscard]] index_t dim() const noexcept { return d_; }
  [[nodiscard]] index_t heads() const noexcept { return heads_; }
  [[nodiscard]] index_t head_index() const noexcept { return h_; }
  [[nodiscard]] const deberta_buckets& buckets() const noexcept { return cfg_; }
  [[nodiscard]] deberta_terms terms() const noexcept { return terms_; }
  [[nodiscard]] deberta_v2 head(index_t h) const {
    detail_::require_head(h, heads(), "lrpe::canonical::deberta_v2::head");
    deberta_v2 v = *this;
    v.h_ = h;
    return v;
  }

  /// The clamped table row c = clamp(log_bucket(s − t) + span, 0, 2·span − 1) of offset δ = t − s.
  [[nodiscard]] index_t table_index(position_t delta) const noexcept {
    constexpr position_t top = std::numeric_limits<position_t>::max();
    const position_t neg = delta == std::numeric_limits<position_t>::min() ? top : -delta;
    const position_t rel = cfg_.log_buckets()
                               ? deberta_log_bucket(neg, cfg_.position_buckets, cfg_.max_relative_positions)
                               : neg;
    const position_t span = cfg_.span();
    return static_cast<index_t>(std::clamp<position_t>(rel, -span, span - 1) + span);  // no rel + span overflow
  }
  /// K_r[c(δ)] of this head (d entries); nullptr without c2p (whose table is not checked, or empty).
  [[nodiscard]] const T* key_vector(position_t delta) const noexcept {
    return terms_.c2p ? key_->row(table_index(delta)).data() + h_ * d_ : nullptr;
  }
  /// Q_r[c(δ)] of this head (d entries); nullptr without p2c (whose table is not checked, or empty).
  [[nodiscard]] const T* query_vector(position_t delta) const noexcept {
    return terms_.p2c ? query_->row(table_index(delta)).data() + h_ * d_ : nullptr;
  }

  /// Direct formula q·k + q·K_r[c] + k·Q_r[c] (terms as configured), unscaled.
  [[nodiscard]] double score(const T* q, position_t s, const T* k, position_t t) const noexcept {
    double acc = detail_::dot(q, k, d_);
    if (terms_.c2p) acc += detail_::dot(q, key_vector(saturating_offset(s, t)), d_);
    if (terms_.p2c) acc += detail_::dot(k, query_vector(saturating_offset(s, t)), d_);
    return acc;
  }
  /// 1/√(d·(1 + #position terms)): 1/√(3d) with c2p and p2c.
  [[nodiscard]] double default_scale(index_t d) const noexcept {
    return 1.0 / std::sqrt(static_cast<double>(d) * static_cast<double>(1 + terms_.count()));
  }

  /// This head's parameter count: 2·span·d per enabled term.
  [[nodiscard]] index_t parameter_count() const noexcept { return terms_.count() * 2 * cfg_.span() * d_; }
  /// A zeroed gradient of this head's parameters (the layout of the file comment).
  [[nodiscard]] std::vector<double> make_gradient() const {
    return std::vector<double>(static_cast<std::size_t>(parameter_count()), 0.0);
  }

  /**
   * The score's backward: dq += g·(k + K_r[c]), dk += g·(q + Q_r[c]), and this head's K_r[c]
   * and Q_r[c] gradients += g·q and g·k (terms as configured).
   */
  void score_backward(const T* q, position_t s, const T* k, position_t t, double g, T* dq, T* dk,
                      double* grad) const noexcept {
    const position_t delta = saturating_offset(s, t);
    const index_t c = table_index(delta), block = 2 * cfg_.span() * d_;
    const T* kr = key_vector(delta);
    const T* qr = query_vector(delta);
    double* gk = grad != nullptr && terms_.c2p ? grad + c * d_ : nullptr;
    double* gq = grad != nullptr && terms_.p2c ? grad + (terms_.c2p ? block : 0) + c * d_ : nullptr;
    for (index_t i = 0; i < d_; ++i) {
      const double qi = q[i], ki = k[i];
      dq[i] += static_cast<T>(g * (ki + (kr != nullptr ? static_cast<double>(kr[i]) : 0.0)));
      dk[i] += static_cast<T>(g * (qi + (qr != nullptr ? static_cast<double>(qr[i]) : 0.0)));
      if (gk != nullptr) gk[i] += g * qi;
      if (gq != nullptr) gq[i] += g * ki;
    }
  }

  /// Every head's gradient (`make_gradient()` of heads 0 … heads() − 1) as K_r and Q_r, each
  /// 2·span × (heads·d) (empty for a disabled term).
  [[nodiscard]] deberta_gradient gradient_tables(std::span<const std::vector<double>> per_head) const {
    constexpr const char* where = "lrpe::canonical::deberta_v2::gradient_tables";
    lrpe::detail::require_shape(static_cast<index_t>(per_head.size()) == heads_, where, "per_head.size()",
                                lrpe::detail::lazy_concat("must equal heads() = ", heads_), per_head.size());
    const index_t rows = 2 * cfg_.span(), block = rows * d_;
    deberta_gradient out;
    if (terms_.c2p) out.pos_key = row_matrix<double>::Zero(rows, heads_ * d_);
    if (terms_.p2c) out.pos_query = row_matrix<double>::Zero(rows, heads_ * d_);
    for (index_t h = 0; h < heads_; ++h) {
      const auto& g = per_head[static_cast<std::size_t>(h)];
      lrpe::detail::require_shape(static_cast<index_t>(g.size()) == parameter_count(), where, "per_head[h].size()",
                                  lrpe::detail::lazy_concat("must equal parameter_count() = ", parameter_count()),
                                  g.size());
      index_t at = 0;
      for (auto* table : {&out.pos_key, &out.pos_query}) {
        if (table->size() == 0) continue;
        for (index_t c = 0; c < rows; ++c)
          for (index_t i = 0; i < d_; ++i) (*table)(c, h * d_ + i) = g[static_cast<std::size_t>(at + c * d_ + i)];
        at += block;
      }
    }
    return out;
  }

  /**
   * The backward of `from_embeddings`: with K_r = E·W_k + b_k (E: the first 2·span rows),
   * dE = dK_r·W_kᵀ + dQ_r·W_qᵀ, dW_k = Eᵀ·dK_r, db_k = Σ_rows dK_r (likewise for Q_r).
   * @param tables the tables' gradient (`gradient_tables`); the other arguments as given to
   *               `from_embeddings`.
   * @throws shape_error on shapes that `from_embeddings` would reject, or tables of another shape.
   */
  [[nodiscard]] static deberta_embeddings_gradient embeddings_backward(
      index_t d, index_t heads, deberta_buckets cfg, const row_matrix<T>& rel_embeddings,
      const linear_projection<T>& key, const linear_projection<T>& query, const deberta_gradient& tables,
      deberta_terms terms = {}) {
    constexpr const char* where = "lrpe::canonical::deberta_v2::embeddings_backward";
    require_sizes(d, heads, where);
    cfg.validate(where);
    const index_t rows = 2 * cfg.span();
    lrpe::detail::require_shape(rel_embeddings.rows() >= rows, where, "rel_embeddings.rows()",
                                lrpe::detail::lazy_concat("must be >= 2*span = ", rows), rel_embeddings.rows());
    deberta_embeddings_gradient out{row_matrix<double>::Zero(rel_embeddings.rows(), rel_embeddings.cols()), {}, {}};
    const row_matrix<double> e = rel_embeddings.topRows(rows).template cast<double>();
    auto back = [&](bool on, const linear_projection<T>& p, const row_matrix<double>& dt, const char* arg,
                    linear_projection<double>& g) {
      if (!on) return;
      detail_::require_table_shape(p.weight, rel_embeddings.cols(), heads * d, where, arg);
      detail_::require_table_shape(dt, rows, heads * d, where, "tables");
      out.rel_embeddings.topRows(rows) += dt * p.weight.template cast<double>().transpose();
      g.weight = e.transpose() * dt;
      if (p.bias.size() != 0) g.bias = dt.colwise().sum().transpose();
    };
    back(terms.c2p, key, tables.pos_key, "key.weight", out.key);
    back(terms.p2c, query, tables.pos_query, "query.weight", out.query);
    return out;
  }

  /// Canonical form, always with three terms (a disabled term has a zero W).
  [[nodiscard]] auto canonical() const {
    auto c2p = [v = *this](position_t delta, T* a) {
      if (!v.terms().c2p) { std::fill(a, a + v.dim(), T(0)); return; }
      const T* src = v.key_vector(delta);
      std::copy(src, src + v.dim(), a);
    };
    auto p2c = [v = *this](position_t delta, T* a) {
      if (!v.terms().p2c) { std::fill(a, a + v.dim(), T(0)); return; }
      const T* src = v.query_vector(delta);
      std::copy(src, src + v.dim(), a);
    };
    return canonical_form(term(identity_map<T>(d_), identity_op<T>(d_), identity_map<T>(d_)),
                          term(identity_map<T>(d_), column_op<T, decltype(c2p)>(d_, c2p), one_map<T>(d_)),
                          term(one_map<T>(d_), row_op<T, decltype(p2c)>(d_, p2c), identity_map<T>(d_)));
  }

 private:
  /// d ≥ 1, heads ≥ 1 and heads·d an index_t (the tables' width).
  static void require_sizes(index_t d, index_t heads, const char* where) {
    lrpe::detail::require_shape(d >= 1, where, "d", "must be >= 1", d);
    lrpe::detail::require_shape(heads >= 1 && heads <= std::numeric_limits<index_t>::max() / d, where, "heads",
                                lrpe::detail::lazy_concat("must be >= 1 with heads*d an index_t (d = ", d, ")"), heads);
  }

  index_t d_;
  deberta_buckets cfg_;
  deberta_terms terms_;
  index_t heads_;
  detail_::shared_table<row_matrix<T>> key_, query_;
  index_t h_ = 0;
};

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
