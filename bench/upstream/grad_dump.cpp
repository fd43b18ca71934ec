// SPDX-License-Identifier: MIT
// Small softmax-attention problems and lrpe's gradients of them (reference backend, double), as
// JSON on stdout, for bench/upstream/grad_compare.py: it recomputes every gradient with PyTorch
// autograd through Hugging Face's own RoPE and T5-bucket code and prints the agreement. Not a
// test: torch is never a dependency of lrpe or its tests.
//
// Cases (n = 12 rows, d = 8, d_v = 6, loss L = Σ dO∘O):
//   rope       causal, rope_neox (Llama's rotate_half pairing, base 10000, scale 1/√d): dQ, dK, dV, dθ
//   t5         bidirectional T5 buckets (8 buckets, max distance 20), no scaling: dQ, dK, dV, d(table)
//   t5_causal  the decoder's causal buckets, causal attention: the same
//   urpe       URPE (Luo et al. 2022): the T5 bias above, then the softmax weights times
//              C_st = c[bucket(t − s)] (a second table over the same buckets): also d(C)
//   deberta    DeBERTa-v2's disentangled attention, 2 heads of d = 8, log buckets (8, 24), c2p and
//              p2c, K_r and Q_r projected from 20 relative embeddings (pos_key_proj,
//              pos_query_proj, with biases): dQ, dK, dV, dE, dW_k, db_k, dW_q, db_q
//   deberta_shared  the same with share_att_key (the content projections project E)
#include <lrpe/lrpe.hpp>

#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace {

using lrpe::index_t;
using M = lrpe::row_matrix<double>;
constexpr index_t n = 12, d = 8, dv = 6;

void put(const char* name, const M& m, bool comma = true) {
  std::printf("\"%s\": [", name);
  for (index_t i = 0; i < m.rows(); ++i) {
    std::printf("%s[", i ? ", " : "");
    for (index_t j = 0; j < m.cols(); ++j) std::printf("%s%.17g", j ? ", " : "", m(i, j));
    std::printf("]");
  }
  std::printf("]%s\n", comma ? "," : "");
}

void put(const char* name, const std::vector<double>& x, bool comma = true) {
  std::printf("\"%s\": [", name);
  for (std::size_t i = 0; i < x.size(); ++i) std::printf("%s%.17g", i ? ", " : "", x[i]);
  std::printf("]%s\n", comma ? "," : "");
}

M normal(lrpe::generator& g, index_t rows, index_t cols) {
  M m(rows, cols);
  for (index_t i = 0; i < m.size(); ++i) m.data()[i] = g.normal();
  return m;
}

/// The forward (with its log-sum-exps), then the backward; prints the gradients as one object.
template <class E>
void run(const char* name, const E& enc, bool causal, const M& q, const M& k, const M& v, const M& d_out,
         bool last = false) {
  lrpe::softmax_options<> opt;
  opt.causal = causal;
  M out(n, dv), dq(n, d), dk(n, d), dvv(n, dv);
  std::vector<double> lse(n);
  lrpe::softmax_attention_lse(q, k, v, out, std::span<double>(lse), enc, opt);
  auto grad = enc.make_gradient();
  lrpe::softmax_attention_backward(q, k, v, out, d_out, std::span<const double>(lse), dq, dk, dvv, enc, opt, &grad);
  std::printf("\"%s\": {\n", name);
  put("out", out);
  put("dq", dq);
  put("dk", dk);
  put("dv", dvv);
  if constexpr (requires { grad.lambda; }) put("dparams", grad.lambda, false);
  else put("dparams", grad, false);
  std::printf("}%s\n", last ? "" : ",");
}

/// URPE: softmax(QKᵀ/√d + T5 bias) ∘ C, then V; the T5 table's gradient and C's.
void run_urpe(const lrpe::canonical::t5_bias<double>& bias, const lrpe::canonical::urpe<double>& c, const M& q,
              const M& k, const M& v, const M& d_out) {
  lrpe::softmax_options<lrpe::canonical::urpe<double>> opt;
  opt.scale = 1.0 / std::sqrt(static_cast<double>(d));
  opt.reweight = c;
  std::vector<double> dc = c.make_gradient();
  opt.reweight_gradient = dc.data();
  M out(n, dv), dq(n, d), dk(n, d), dvv(n, dv);
  std::vector<double> lse(n);
  lrpe::softmax_attention_lse(q, k, v, out, std::span<double>(lse), bias, opt);
  auto grad = bias.make_gradient();
  lrpe::softmax_attention_backward(q, k, v, out, d_out, std::span<const double>(lse), dq, dk, dvv, bias, opt, &grad);
  std::printf("\"urpe\": {\n");
  put("out", out);
  put("dq", dq);
  put("dk", dk);
  put("dv", dvv);
  put("dparams", grad);
  put("dc", dc, false);
  std::printf("},\n");
}

/**
 * DeBERTa-v2 over 2 heads: the tables from the embeddings, the multi-head forward and backward
 * (one gradient per head), then the tables' gradients through the projections. The scale is
 * Hugging Face's: 1/√(3d) with the root taken in float32 (`scaled_size_sqrt`).
 */
void run_deberta(const char* name, lrpe::generator& g, bool last = false) {
  constexpr index_t heads = 2, rows = 20;
  const lrpe::canonical::deberta_buckets cfg{8, 24};
  const M q = normal(g, heads * n, d), k = normal(g, heads * n, d), v = normal(g, heads * n, d);
  const M d_out = normal(g, heads * n, d), e = normal(g, rows, heads * d);
  const lrpe::canonical::linear_projection<double> key{normal(g, heads * d, heads * d), normal(g, heads * d, 1)};
  const lrpe::canonical::linear_projection<double> query{normal(g, heads * d, heads * d), normal(g, heads * d, 1)};
  const auto deberta = lrpe::canonical::deberta_v2<double>::from_embeddings(d, heads, cfg, e, key, query);
  lrpe::softmax_options<> opt;
  opt.scale = 1.0 / static_cast<double>(std::sqrt(static_cast<float>(3 * d)));
  M out(heads * n, d), dq(heads * n, d), dk(heads * n, d), dvv(heads * n, d);
  const auto bnsh = [](const M& m) { return lrpe::bnsh(m.data(), 1, heads, n, d); };
  const auto mut = [](M& m) { return lrpe::bnsh(m.data(), 1, heads, n, d); };
  lrpe::softmax_attention(bnsh(q), bnsh(k), bnsh(v), mut(out), deberta, opt);
  std::vector<std::vector<double>> grads{deberta.head(0).make_gradient(), deberta.head(1).make_gradient()};
  lrpe::softmax_attention_backward(bnsh(q), bnsh(k), bnsh(v), bnsh(out), bnsh(d_out), {}, mut(dq), mut(dk), mut(dvv),
                                   deberta, opt, std::span(grads));
  const auto tables = deberta.gradient_tables(grads);
  const auto eg = lrpe::canonical::deberta_v2<double>::embeddings_backward(d, heads, cfg, e, key, query, tables);
  std::printf("\"%s\": {\n", name);
  for (const auto& [label, m] : {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v}, std::pair{"d_out", &d_out},
                                 std::pair{"e", &e}, std::pair{"wk", &key.weight}, std::pair{"wq", &query.weight}})
    put(label, *m);
  put("bk", std::vector<double>(key.bias.data(), key.bias.data() + key.bias.size()));
  put("bq", std::vector<double>(query.bias.data(), query.bias.data() + query.bias.size()));
  put("out", out);
  put("dq", dq);
  put("dk", dk);
  put("dv", dvv);
  put("de", eg.rel_embeddings);
  put("dwk", eg.key.weight);
  put("dbk", std::vector<double>(eg.key.bias.data(), eg.key.bias.data() + eg.key.bias.size()));
  put("dwq", eg.query.weight);
  put("dbq", std::vector<double>(eg.query.bias.data(), eg.query.bias.data() + eg.query.bias.size()), false);
  std::printf("}%s\n", last ? "" : ",");
}

}  // namespace

int main() {
  lrpe::generator g(2026);
  const M q = normal(g, n, d), k = normal(g, n, d), v = normal(g, n, dv), d_out = normal(g, n, dv);
  const lrpe::canonical::t5_buckets bidirectional{8, 20, true}, causal_cfg{8, 20, false};
  const M table = normal(g, 1, 8);
  M c_table(1, 8);
  for (index_t j = 0; j < 8; ++j) c_table(0, j) = 1.0 + 0.25 * g.normal();
  std::printf("{\n\"n\": %ld, \"d\": %ld, \"dv\": %ld,\n", static_cast<long>(n), static_cast<long>(d), static_cast<long>(dv));
  put("q", q);
  put("k", k);
  put("v", v);
  put("d_out", d_out);
  put("t5_table", table);
  put("urpe_table", c_table);
  std::printf("\"t5_buckets\": [8, 20],\n");
  run_urpe(lrpe::canonical::t5_bias<double>(d, bidirectional, table), lrpe::canonical::urpe<double>(bidirectional, c_table),
           q, k, v, d_out);
  run("rope", lrpe::rope_neox<double>(d), true, q, k, v, d_out);
  run("t5", lrpe::canonical::t5_bias<double>(d, bidirectional, table), false, q, k, v, d_out);
  run("t5_causal", lrpe::canonical::t5_bias<double>(d, causal_cfg, table), true, q, k, v, d_out);
  run_deberta("deberta", g);
  run_deberta("deberta_shared", g, true);
  std::printf("}\n");
}
