// SPDX-License-Identifier: MIT
// A tiny causal transformer layer with LRPE in linear attention (pre-LN, 4 heads):
//   x → LN → fused QKV projection [seq, 3·heads·d] → per-head strided views (BSNH, no copies)
//     → causal linear attention with LRPE Type 1, φ = 1 + elu, no denominator (the reference
//       code's NormAttention) → per-head LayerNorm → output projection → residual → FFN → residual.
// Checks that the layer is causal (changing future tokens leaves earlier rows unchanged) and
// that its attention equals the quadratic form q̃_sᵀ W_{t−s} k̃_t; returns non-zero otherwise.
#include <lrpe/lrpe.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>

namespace {
using T = float;
using mat = lrpe::row_matrix<T>;

mat random_weights(lrpe::generator& g, lrpe::index_t r, lrpe::index_t c) {
  mat m(r, c);
  const double s = 1.0 / std::sqrt(static_cast<double>(r));
  for (auto& x : m.reshaped()) x = static_cast<T>(s * g.normal());
  return m;
}

void layer_norm_rows(mat& x, lrpe::index_t group) {  // normalise each group of `group` columns
  for (lrpe::index_t i = 0; i < x.rows(); ++i)
    for (lrpe::index_t c0 = 0; c0 < x.cols(); c0 += group) {
      auto seg = x.row(i).segment(c0, group);
      const T mean = seg.mean();
      seg.array() -= mean;
      const T var = seg.squaredNorm() / static_cast<T>(group);
      seg /= std::sqrt(var + T(1e-5));
    }
}

struct layer {
  lrpe::index_t model, heads, head_dim;
  mat w_qkv, w_o, w_1, w_2;
  lrpe::type1<T> lrpe_encoder;

  layer(lrpe::generator& g, lrpe::index_t model_, lrpe::index_t heads_)
      : model(model_), heads(heads_), head_dim(model_ / heads_), w_qkv(random_weights(g, model_, 3 * model_)),
        w_o(random_weights(g, model_, model_)), w_1(random_weights(g, model_, 4 * model_)),
        w_2(random_weights(g, 4 * model_, model_)), lrpe_encoder(model_ / heads_) {}

  mat forward(const mat& x) const {
    const lrpe::index_t n = x.rows();
    mat h = x;
    layer_norm_rows(h, model);
    mat qkv = h * w_qkv;  // n × [Q | K | V], each [heads, head_dim]: a BSNH layout with row stride 3·model
    mat attn(n, model);
    auto heads_of = [&](T* base, lrpe::index_t row_stride) {
      lrpe::heads_view<T> hv = lrpe::bsnh(base, 1, n, heads, head_dim);
      hv.seq_stride = row_stride;  // rows of the fused projection are 3·model apart
      hv.batch_stride = n * row_stride;
      return hv;
    };
    lrpe::linear_options opt{.causal = true, .norm = lrpe::normalisation::none, .chunk = 32};
    lrpe::linear_attention(heads_of(qkv.data(), 3 * model), heads_of(qkv.data() + model, 3 * model),
                           heads_of(qkv.data() + 2 * model, 3 * model), heads_of(attn.data(), model), lrpe_encoder,
                           lrpe::feature_maps::elu_plus_one{}, opt);
    layer_norm_rows(attn, head_dim);  // NormAttention: per-head LayerNorm instead of a denominator
    mat y = x + attn * w_o;
    mat z = y;
    layer_norm_rows(z, model);
    mat ff = (z * w_1).cwiseMax(T(0)) * w_2;
    return y + ff;
  }
};
}  // namespace

int main() {
  lrpe::generator g(2024);
  const lrpe::index_t n = 256, model = 64, heads = 4;
  const layer l(g, model, heads);
  mat x(n, model);
  for (auto& v : x.reshaped()) v = static_cast<T>(g.normal());

  const auto t0 = std::chrono::steady_clock::now();
  const mat y = l.forward(x);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("layer forward: n = %ld, d_model = %ld, %ld heads: %.2f ms\n", static_cast<long>(n),
              static_cast<long>(model), static_cast<long>(heads), ms);

  int failures = 0;
  // causality: perturb tokens from 100 on; rows 0..99 must not change
  mat x2 = x;
  x2.bottomRows(n - 100).array() += T(3);
  const mat y2 = l.forward(x2);
  const T past = (y2.topRows(100) - y.topRows(100)).cwiseAbs().maxCoeff();
  const T future = (y2.bottomRows(n - 100) - y.bottomRows(n - 100)).cwiseAbs().maxCoeff();
  std::printf("causal: max change of earlier rows %.3g, of later rows %.3g\n", static_cast<double>(past),
              static_cast<double>(future));
  failures += past == T(0) && future > T(0) ? 0 : 1;

  // head 0's attention against the quadratic form Σ_t φ(q_s)ᵀ W_{t−s} φ(k_t) v_t (paper Eq. 39)
  mat h = x;
  layer_norm_rows(h, model);
  const mat qkv = h * l.w_qkv;
  const mat q0 = qkv.leftCols(l.head_dim), k0 = qkv.middleCols(model, l.head_dim), v0 = qkv.middleCols(2 * model, l.head_dim);
  mat out0(n, l.head_dim);
  lrpe::linear_attention(q0, k0, v0, out0, l.lrpe_encoder, lrpe::feature_maps::elu_plus_one{},
                         lrpe::linear_options{.causal = true});
  const lrpe::feature_maps::elu_plus_one phi;
  double worst = 0;
  for (lrpe::index_t s : {lrpe::index_t{0}, lrpe::index_t{17}, n - 1}) {
    Eigen::VectorXd acc = Eigen::VectorXd::Zero(l.head_dim);
    const Eigen::VectorXd a = q0.row(s).transpose().unaryExpr(phi).cast<double>();
    for (lrpe::index_t t = 0; t <= s; ++t) {
      const Eigen::VectorXd b = k0.row(t).transpose().unaryExpr(phi).cast<double>();
      const double w = a.dot(l.lrpe_encoder.relative_matrix(t - s).cast<double>() * b);
      acc += w * v0.row(t).transpose().cast<double>();
    }
    worst = std::max(worst, (acc - out0.row(s).transpose().cast<double>()).cwiseAbs().maxCoeff() / (1 + acc.cwiseAbs().maxCoeff()));
  }
  std::printf("linear attention vs quadratic W_{t-s} form: relative error %.2e\n", worst);
  failures += worst < 1e-4 ? 0 : 1;
  return failures == 0 ? 0 : 1;
}
