// SPDX-License-Identifier: MIT
/**
 * @file transformer_xl.hpp
 * Transformer-XL relative attention (Dai et al. 2019; kimiyoung/transformer-xl
 * `RelPartialLearnableMultiHeadAttn`):
 *
 *     f_rel(q_s, k_t) = (q_s + u)·k_t + (q_s + v)·(W_R R_{s−t}),   scaled by 1/√d
 *
 * with R_δ = [sin(δ ω_0..ω_{D/2−1}), cos(δ ω_0..ω_{D/2−1})] (halves, not interleaved; exact
 * angles, docs/math.md §Angles, so both forms below agree at every position),
 * ω_k = 10000^(−2k/D), D = d_model, and W_R the head's rows of `r_net` (d × D). The distance
 * s − t (query − key) is computed directly; the reference's "rel_shift" reshape, which leaves
 * garbage above the diagonal j > i + mlen, is not used, so any positions (future keys, packed
 * rows) are valid.
 *
 * - canonical: m = 2: (q + u, I, k) and (q + v, W_R R_{s−t} as a d×1 column, 1);
 * - linearizable, exactly: with a = W_Rᵀ(q + v) split into halves (a_sin, a_cos),
 *   a·R_{s−t} = Σ_k cos(tω_k)(a_sin,k sin sω_k + a_cos,k cos sω_k)
 *             + sin(tω_k)(a_cos,k sin sω_k − a_sin,k cos sω_k),
 *   so φ_q(q, s) = [q + u, a_sin∘sin sω + a_cos∘cos sω, a_cos∘sin sω − a_sin∘cos sω] and
 *   φ_k(k, t) = [k, cos tω, sin tω] (width d + D, bounded at every position).
 *
 * Layout: u and v are heads × d (r_w_bias, r_r_bias); W_R is (heads·d) × D, `r_net.weight` as
 * PyTorch stores it (out × in): row h·d + i is output feature i of head h.
 *
 * Gradient (`features_backward`, through attention's backward): a head's parameters, laid out
 * as [u_h (d), v_h (d), W_R's rows of head h (d × D, row-major)]; `gradient_tables` gathers
 * the heads' into the constructor's shapes.
 *
 * `clamped_transformer_xl` is the reference code's `clamp_len`: R_{s−t} at clip(s − t, c) (the
 * reference clamps s − t ≥ 0 from above; XLNet clamps both signs, as here). Clamped, the
 * encoding is no longer linearizable: softmax attention evaluates it per pair from a table of
 * W_R R_δ for the 2c + 1 offsets.
 */
#pragma once

#include <lrpe/canonical/buckets.hpp>
#include <lrpe/canonical/canonical_form.hpp>
#include <lrpe/canonical/detail/common.hpp>
#include <lrpe/canonical/linearizable.hpp>
#include <lrpe/detail/angle.hpp>

#include <cmath>
#include <span>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace canonical {

/// Transformer-XL's parameter gradients in the constructor's shapes (`gradient_tables`).
struct transformer_xl_gradient {
  row_matrix<double> u, v, w_r;
};

template <real_scalar T>
class transformer_xl {
 public:
  using scalar = T;
  static constexpr bool is_linearizable = true;

  /**
   * @param d    head width.
   * @param u, v global content and position biases, heads × d.
   * @param w_r  the position projection, (heads·d) × D, D = d_model even ≥ 2.
   * @param base the sinusoid base (10000).
   * @throws shape_error (sizes, odd D), parameter_error (base ≤ 1), domain_error (non-finite).
   */
  transformer_xl(index_t d, row_matrix<T> u, row_matrix<T> v, row_matrix<T> w_r, double base = 10000.0) : d_(d) {
    constexpr const char* where = "lrpe::canonical::transformer_xl";
    lrpe::detail::require_shape(d >= 1, where, "d", "must be >= 1", d);
    lrpe::detail::require_shape(u.rows() >= 1, where, "u.rows()", "must be >= 1 (one row per head)", u.rows());
    const index_t heads = u.rows();
    detail_::require_table_shape(u, heads, d, where, "u");
    detail_::require_table_shape(v, heads, d, where, "v");
    lrpe::detail::require_shape(w_r.cols() >= 2 && w_r.cols() % 2 == 0, where, "w_r.cols()",
                                "must be an even d_model >= 2", w_r.cols());
    detail_::require_table_shape(w_r, heads * d, w_r.cols(), where, "w_r");
    detail_::require_finite_table(u, where, "u");
    detail_::require_finite_table(v, where, "v");
    detail_::require_finite_table(w_r, where, "w_r");
    detail_::require_finite_value(base, where, "base");
    lrpe::detail::require_parameter(base > 1.0, where, "base", "must be > 1", base);
    const index_t half = w_r.cols() / 2;
    dense_vector<double> inv(half);
    for (index_t k = 0; k < half; ++k)
      inv[k] = std::pow(base, -2.0 * static_cast<double>(k) / static_cast<double>(w_r.cols()));
    p_ = detail_::share(params{std::move(u), std::move(v), std::move(w_r), std::move(inv)});
  }

  [[nodiscard]] index_t dim() const noexcept { return d_; }
  [[nodiscard]] index_t heads() const noexcept { return p_->u.rows(); }
  [[nodiscard]] index_t head_index() const noexcept { return h_; }
  /// D = d_model, the width of R.
  [[nodiscard]] index_t model_dim() const noexcept { return p_->w_r.cols(); }
  [[nodiscard]] const dense_vector<double>& inv_freq() const noexcept { return p_->inv_freq; }
  [[nodiscard]] const T* u() const noexcept { return p_->u.row(h_).data(); }
  [[nodiscard]] const T* v() const noexcept { return p_->v.row(h_).data(); }
  /// This head's W_R (d × D).
  [[nodiscard]] auto w_r() const noexcept { return p_->w_r.middleRows(h_ * d_, d_); }
  [[nodiscard]] transformer_xl head(index_t h) const {
    detail_::require_head(h, heads(), "lrpe::canonical::transformer_xl::head");
    transformer_xl x = *this;
    x.h_ = h;
    return x;
  }

  /// R_δ = [sin(δω), cos(δω)] (D entries, double) for the distance δ = s − t.
  void sinusoid(position_t distance, double* out) const noexcept {
    const index_t half = model_dim() / 2;
    for (index_t k = 0; k < half; ++k) {
      const auto [c, sn] = lrpe::detail::angle_cos_sin(distance, p_->inv_freq[k]);  // exact angle
      out[k] = sn;
      out[half + k] = c;
    }
  }
  /// r = W_R R_{s−t} (d entries) for the offset δ = t − s: R_{−δ} = [−sin(δω), cos(δω)], from
  /// R_δ (−δ itself overflows at δ = −2^63).
  void position_vector(position_t delta, T* out) const {
    const index_t dm = model_dim();
    lrpe::detail::small_buffer<double> r(dm);
    sinusoid(delta, r.data());
    for (index_t k = 0; k < dm / 2; ++k) r[k] = -r[k];
    const auto w = w_r();
    for (index_t i = 0; i < d_; ++i) {
      double acc = 0;
      for (index_t j = 0; j < dm; ++j) acc += static_cast<double>(w(i, j)) * r[j];
      out[i] = static_cast<T>(acc);
    }
  }

  /// Direct formula (q + u)·k + (q + v)·(W_R R_{s−t}), unscaled.
  [[nodiscard]] double score(const T* q, position_t s, const T* k, position_t t) const {
    lrpe::detail::small_buffer<T> r(d_);
    position_vector(lrpe::detail::checked_offset(s, t, "lrpe::canonical::transformer_xl::score"), r.data());
    const T* uu = u();
    const T* vv = v();
    double acc = 0;
    for (index_t i = 0; i < d_; ++i)
      acc += (static_cast<double>(q[i]) + uu[i]) * k[i] + (static_cast<double>(q[i]) + vv[i]) * r[i];
    return acc;
  }
  /// 1/√d, applied to both terms (1 for `tener`, which does not scale).
  [[nodiscard]] double default_scale(index_t d) const noexcept {
    return scaled_ ? 1.0 / std::sqrt(static_cast<double>(d)) : 1.0;
  }

  /**
   * TENER (Yan et al. 2019, "TENER: adapting Transformer encoder for named entity recognition"):
   * Transformer-XL's two terms with R not projected and no scaling,
   * (q_s + u)·k_t + (q_s + v)·R'_{s−t}, R'_δ = [sin δc₀, cos δc₀, sin δc₁, cos δc₁, …] (d
   * entries, c_i = base^(−2i/d), the paper's interleaved layout): a `transformer_xl` whose W_R
   * interleaves R's halves (a fixed permutation, per head) and whose `default_scale` is 1.
   * @param u, v heads × d. @throws shape_error (d odd, sizes), as the constructor otherwise.
   */
  [[nodiscard]] static transformer_xl tener(index_t d, row_matrix<T> u, row_matrix<T> v, double base = 10000.0) {
    lrpe::detail::require_shape(d >= 2 && d % 2 == 0, "lrpe::canonical::transformer_xl::tener", "d",
                                "must be even and >= 2 (R's sin and cos pairs)", d);
    const index_t heads = u.rows();
    row_matrix<T> w_r = row_matrix<T>::Zero(heads * d, d);
    for (index_t h = 0; h < heads; ++h) {
      for (index_t i = 0; i < d / 2; ++i) {
        w_r(h * d + 2 * i, i) = T(1);              // sin δc_i
        w_r(h * d + 2 * i + 1, d / 2 + i) = T(1);  // cos δc_i
      }
    }
    transformer_xl x(d, std::move(u), std::move(v), std::move(w_r), base);
    x.scaled_ = false;
    return x;
  }

  [[nodiscard]] auto canonical() const {
    auto column = [x = *this](position_t delta, T* a) { x.position_vector(delta, a); };
    return canonical_form(
        term(shift_map<T>(p_->u.row(h_).transpose()), identity_op<T>(d_), identity_map<T>(d_)),
        term(shift_map<T>(p_->v.row(h_).transpose()), column_op<T, decltype(column)>(d_, column), one_map<T>(d_)));
  }

  /// This head's parameter count: u_h, v_h and W_R's d rows, 2d + d·D.
  [[nodiscard]] index_t parameter_count() const noexcept { return d_ * (2 + model_dim()); }
  /// A zeroed gradient of this head's parameters (the layout of the file comment).
  [[nodiscard]] std::vector<double> make_gradient() const {
    return std::vector<double>(static_cast<std::size_t>(parameter_count()), 0.0);
  }
  /// Every head's gradient (`make_gradient()` of heads 0 … heads() − 1, or one for a
  /// single-head encoding) as u, v and W_R shaped as the constructor takes them.
  [[nodiscard]] transformer_xl_gradient gradient_tables(std::span<const std::vector<double>> per_head) const {
    constexpr const char* where = "lrpe::canonical::transformer_xl::gradient_tables";
    const index_t heads = this->heads(), dm = model_dim();
    lrpe::detail::require_shape(static_cast<index_t>(per_head.size()) == heads, where, "per_head.size()",
                                lrpe::detail::lazy_concat("must equal heads() = ", heads), per_head.size());
    transformer_xl_gradient out{row_matrix<double>(heads, d_), row_matrix<double>(heads, d_),
                                row_matrix<double>(heads * d_, dm)};
    for (index_t h = 0; h < heads; ++h) {
      const auto& g = per_head[static_cast<std::size_t>(h)];
      lrpe::detail::require_shape(static_cast<index_t>(g.size()) == parameter_count(), where, "per_head[h].size()",
                                  lrpe::detail::lazy_concat("must equal parameter_count() = ", parameter_count()),
                                  g.size());
      for (index_t i = 0; i < d_; ++i) {
        out.u(h, i) = g[static_cast<std::size_t>(i)];
        out.v(h, i) = g[static_cast<std::size_t>(d_ + i)];
        for (index_t j = 0; j < dm; ++j) out.w_r(h * d_ + i, j) = g[static_cast<std::size_t>(2 * d_ + i * dm + j)];
      }
    }
    return out;
  }

  /// d + D.
  [[nodiscard]] index_t feature_dim() const noexcept { return d_ + model_dim(); }
  /// φ_q(x, s) = [x + u, a_sin∘sin sω + a_cos∘cos sω, a_cos∘sin sω − a_sin∘cos sω], a = W_Rᵀ(x + v);
  /// φ_k(x, t) = [x, cos tω, sin tω].
  void features(side which, const T* x, position_t position, T* out) const {
    const index_t half = model_dim() / 2;
    const auto& inv = p_->inv_freq;
    if (which == side::key) {
      for (index_t i = 0; i < d_; ++i) out[i] = x[i];
      for (index_t k = 0; k < half; ++k) {
        const auto [c, sn] = lrpe::detail::angle_cos_sin(position, inv[k]);
        out[d_ + k] = static_cast<T>(c);
        out[d_ + half + k] = static_cast<T>(sn);
      }
      return;
    }
    const T* uu = u();
    const T* vv = v();
    for (index_t i = 0; i < d_; ++i) out[i] = x[i] + uu[i];
    const auto w = w_r();
    for (index_t k = 0; k < half; ++k) {
      double a_sin = 0, a_cos = 0;
      for (index_t i = 0; i < d_; ++i) {
        const double qv = static_cast<double>(x[i]) + vv[i];
        a_sin += static_cast<double>(w(i, k)) * qv;
        a_cos += static_cast<double>(w(i, half + k)) * qv;
      }
      const auto [cs, sn] = lrpe::detail::angle_cos_sin(position, inv[k]);
      out[d_ + k] = static_cast<T>(a_sin * sn + a_cos * cs);
      out[d_ + half + k] = static_cast<T>(a_cos * sn - a_sin * cs);
    }
  }
  /**
   * The features' backward: dx = (∂φ(x, position)/∂x)ᵀ g (d entries from d + D) and, for the
   * query side with `grad` not null, this head's du, dv, dW_R added to `grad`. With (g₁, g₂) the
   * position half of g: da_sin = g₁∘sin − g₂∘cos, da_cos = g₁∘cos + g₂∘sin; then
   * dx = g[0:d) + W_R (da_sin, da_cos), du = g[0:d), dv = W_R (da_sin, da_cos),
   * dW_R += (x + v)(da_sin, da_cos)ᵀ. The key side has no parameters.
   */
  void features_backward(side which, const T* x, const T* g, position_t position, T* dx, double* grad) const {
    if (which == side::key) {
      for (index_t i = 0; i < d_; ++i) dx[i] = g[i];
      return;
    }
    const index_t dm = model_dim(), half = dm / 2;
    lrpe::detail::small_buffer<double> da(dm);  // (da_sin, da_cos)
    for (index_t k = 0; k < half; ++k) {
      const auto [cs, sn] = lrpe::detail::angle_cos_sin(position, p_->inv_freq[k]);
      const double g1 = g[d_ + k], g2 = g[d_ + half + k];
      da[k] = g1 * sn - g2 * cs;
      da[half + k] = g1 * cs + g2 * sn;
    }
    const auto w = w_r();
    const T* vv = v();
    for (index_t i = 0; i < d_; ++i) {
      double through_w = 0;
      for (index_t j = 0; j < dm; ++j) through_w += static_cast<double>(w(i, j)) * da[j];
      dx[i] = static_cast<T>(static_cast<double>(g[i]) + through_w);
      if (grad == nullptr) continue;
      grad[i] += g[i];
      grad[d_ + i] += through_w;
      const double xv = static_cast<double>(x[i]) + vv[i];
      double* dw = grad + 2 * d_ + i * dm;
      for (index_t j = 0; j < dm; ++j) dw[j] += xv * da[j];
    }
  }

 private:
  struct params {
    row_matrix<T> u, v, w_r;
    dense_vector<double> inv_freq;
  };
  index_t d_;
  detail_::shared_table<params> p_;
  index_t h_ = 0;
  bool scaled_ = true;
};

/**
 * Transformer-XL with `clamp_len` = c: f_rel(q_s, k_t) = (q_s + u)·k_t + (q_s + v)·r_{clip(t−s, c)},
 * r_δ = W_R R_{−δ}, the distances beyond c read R at ±c (the reference code's `pos_seq.clamp_`
 * for the causal s − t ≥ 0; both signs as XLNet). A table of r_δ per head and offset is formed
 * once (heads·(2c + 1)·d scalars). Not linearizable; a `differentiable_score`.
 *
 * Gradient of a head: [u_h (d), v_h (d), G ((2c + 1) × d)] with G_δ = Σ g·(q + v) over the pairs
 * at the clipped offset δ (row δ + c); `gradient_tables` turns it into dW_R = Σ_δ G_δ R_{−δ}ᵀ in
 * `transformer_xl`'s shapes.
 */
template <real_scalar T>
class clamped_transformer_xl {
 public:
  using scalar = T;
  static constexpr bool is_linearizable = false;

  /**
   * @param xl        the encoding (every head).
   * @param clamp_len c in [1, 2^20] (the reference code's 0 means no clamp: use `xl` itself).
   * @throws parameter_error (clamp_len).
   */
  clamped_transformer_xl(transformer_xl<T> xl, position_t clamp_len) : xl_(std::move(xl)), c_(clamp_len) {
    lrpe::detail::require_parameter(clamp_len >= 1 && clamp_len <= (position_t{1} << 20),
                                    "lrpe::canonical::clamped_transformer_xl", "clamp_len",
                                    "must be in [1, 2^20] (0, the reference's 'off', is transformer_xl itself)",
                                    clamp_len);
    const index_t d = xl_.dim(), rows = 2 * c_ + 1, heads = xl_.heads();
    row_matrix<T> r(heads * rows, d);
    for (index_t h = 0; h < heads; ++h) {
      const auto head = xl_.head(h);
      for (index_t j = 0; j < rows; ++j) head.position_vector(j - c_, r.row(h * rows + j).data());
    }
    r_ = detail_::share(std::move(r));
  }

  [[nodiscard]] index_t dim() const noexcept { return xl_.dim(); }
  [[nodiscard]] index_t heads() const noexcept { return xl_.heads(); }
  [[nodiscard]] index_t head_index() const noexcept { return xl_.head_index(); }
  [[nodiscard]] position_t clamp_len() const noexcept { return c_; }
  [[nodiscard]] const transformer_xl<T>& unclamped() const noexcept { return xl_; }
  [[nodiscard]] clamped_transformer_xl head(index_t h) const {
    clamped_transformer_xl x = *this;
    x.xl_ = xl_.head(h);
    return x;
  }
  [[nodiscard]] double default_scale(index_t d) const noexcept { return xl_.default_scale(d); }

  /// r_{clip(δ, c)} = W_R R_{−clip(δ, c)} (d entries) for the offset δ = t − s.
  [[nodiscard]] const T* position_vector(position_t delta) const noexcept {
    return r_->row(head_index() * (2 * c_ + 1) + clip(delta, c_) + c_).data();
  }

  /// (q + u)·k + (q + v)·r_{clip(t−s, c)}, unscaled.
  [[nodiscard]] double score(const T* q, position_t s, const T* k, position_t t) const noexcept {
    const T* r = position_vector(saturating_offset(s, t));
    const T *u = xl_.u(), *v = xl_.v();
    double acc = 0;
    for (index_t i = 0; i < dim(); ++i) {
      const double qi = q[i];
      acc += (qi + u[i]) * static_cast<double>(k[i]) + (qi + v[i]) * static_cast<double>(r[i]);
    }
    return acc;
  }

  /// 2d + (2c + 1)·d: u_h, v_h and G (the class comment).
  [[nodiscard]] index_t parameter_count() const noexcept { return (2 + 2 * c_ + 1) * dim(); }
  [[nodiscard]] std::vector<double> make_gradient() const {
    return std::vector<double>(static_cast<std::size_t>(parameter_count()), 0.0);
  }
  /// dq += g(k + r), dk += g(q + u); du += g·k, dv += g·r, G_δ += g(q + v).
  void score_backward(const T* q, position_t s, const T* k, position_t t, double g, T* dq, T* dk,
                      double* grad) const noexcept {
    const position_t delta = clip(saturating_offset(s, t), c_);
    const T* r = position_vector(delta);
    const T *u = xl_.u(), *v = xl_.v();
    const index_t d = dim();
    for (index_t i = 0; i < d; ++i) {
      const double qi = q[i], ki = k[i], ri = r[i];
      dq[i] += static_cast<T>(g * (ki + ri));
      dk[i] += static_cast<T>(g * (qi + u[i]));
      if (grad == nullptr) continue;
      grad[i] += g * ki;
      grad[d + i] += g * ri;
      grad[2 * d + (delta + c_) * d + i] += g * (qi + v[i]);
    }
  }
  /// Every head's gradient (`make_gradient()` of heads 0 … heads() − 1, or one for a
  /// single-head encoding) as u, v and W_R in `transformer_xl`'s shapes.
  [[nodiscard]] transformer_xl_gradient gradient_tables(std::span<const std::vector<double>> per_head) const {
    constexpr const char* where = "lrpe::canonical::clamped_transformer_xl::gradient_tables";
    const index_t heads = this->heads(), d = dim(), dm = xl_.model_dim(), rows = 2 * c_ + 1;
    lrpe::detail::require_shape(static_cast<index_t>(per_head.size()) == heads, where, "per_head.size()",
                                lrpe::detail::lazy_concat("must equal heads() = ", heads), per_head.size());
    transformer_xl_gradient out{row_matrix<double>(heads, d), row_matrix<double>(heads, d),
                                row_matrix<double>::Zero(heads * d, dm)};
    std::vector<double> big_r(static_cast<std::size_t>(dm));  // R_{−δ}
    for (index_t h = 0; h < heads; ++h) {
      const auto& g = per_head[static_cast<std::size_t>(h)];
      lrpe::detail::require_shape(static_cast<index_t>(g.size()) == parameter_count(), where, "per_head[h].size()",
                                  lrpe::detail::lazy_concat("must equal parameter_count() = ", parameter_count()),
                                  g.size());
      for (index_t i = 0; i < d; ++i) {
        out.u(h, i) = g[static_cast<std::size_t>(i)];
        out.v(h, i) = g[static_cast<std::size_t>(d + i)];
      }
      for (index_t j = 0; j < rows; ++j) {
        xl_.sinusoid(j - c_, big_r.data());
        for (index_t m = 0; m < dm / 2; ++m) big_r[static_cast<std::size_t>(m)] = -big_r[static_cast<std::size_t>(m)];
        const double* gj = g.data() + 2 * d + j * d;
        for (index_t i = 0; i < d; ++i)
          for (index_t m = 0; m < dm; ++m) out.w_r(h * d + i, m) += gj[i] * big_r[static_cast<std::size_t>(m)];
      }
    }
    return out;
  }

  [[nodiscard]] auto canonical() const {
    auto column = [x = *this](position_t delta, T* a) {
      const T* r = x.position_vector(delta);
      std::copy(r, r + x.dim(), a);
    };
    const index_t d = dim();
    return canonical_form(
        term(shift_map<T>(Eigen::Map<const dense_vector<T>>(xl_.u(), d)), identity_op<T>(d), identity_map<T>(d)),
        term(shift_map<T>(Eigen::Map<const dense_vector<T>>(xl_.v(), d)), column_op<T, decltype(column)>(d, column),
             one_map<T>(d)));
  }

 private:
  transformer_xl<T> xl_;
  position_t c_;
  detail_::shared_table<row_matrix<T>> r_;
};

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
