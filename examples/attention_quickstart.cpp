// SPDX-License-Identifier: MIT
// The snippets of docs/attention.md, compiled and checked: softmax attention with an LRPE
// encoder, ALiBi and URPE; linear attention (causal, decay); a streaming state exported and
// resumed; multi-head BSNH views. Returns non-zero if a check fails.
#include <lrpe/lrpe.hpp>
#include <lrpe/canonical/canonical.hpp>

#include <cstdio>
#include <vector>

int main() {
  using T = float;
  const lrpe::index_t n = 64, d = 32;
  lrpe::generator g(7);
  auto random = [&](lrpe::index_t r, lrpe::index_t c) {
    lrpe::row_matrix<T> m(r, c);
    for (auto& x : m.reshaped()) x = static_cast<T>(g.normal());
    return m;
  };
  const lrpe::row_matrix<T> q = random(n, d), k = random(n, d), v = random(n, d);
  lrpe::row_matrix<T> out(n, d);
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    std::printf("%-60s %s\n", what, ok ? "ok" : "FAILED");
    failures += ok ? 0 : 1;
  };

  // [softmax]
  const lrpe::type1<T> lrpe_type1(d);  // any encoder: Q and K are encoded once, then dot products
  lrpe::softmax_attention(q, k, v, out, lrpe_type1, lrpe::softmax_options<>{.causal = true});

  const auto alibi = lrpe::canonical::alibi<T>::for_heads(d, 8).head(0);  // additive bias per tile
  lrpe::softmax_attention(q, k, v, out, alibi, lrpe::softmax_options<>{.causal = true});

  // URPE: A = softmax(QKᵀ/√d + B) ⊙ C, C a callable c(s, t) (or canonical::urpe)
  auto c = [](lrpe::position_t s, lrpe::position_t t) { return t == s ? 1.5 : 1.0; };
  lrpe::softmax_attention(q, k, v, out, lrpe::no_encoding{}, lrpe::softmax_options<decltype(c)>{.reweight = c});
  // [softmax]
  expect(out.allFinite(), "softmax: encoder, ALiBi, URPE");

  // [kv-cache]
  // 10 new queries at positions 54..63 over all 64 cached keys at 0..63
  lrpe::row_matrix<T> out_new(10, d);
  lrpe::softmax_attention(q.bottomRows(10), k, v, out_new, lrpe_type1,
                          lrpe::softmax_options<>{.causal = true, .q_positions = 54, .k_positions = 0});
  // [kv-cache]
  lrpe::softmax_attention(q, k, v, out, lrpe_type1, lrpe::softmax_options<>{.causal = true});
  expect((out_new - out.bottomRows(10)).cwiseAbs().maxCoeff() < 1e-5f, "softmax: KV-cache offsets == full causal rows");

  // [linear]
  lrpe::linear_options opt;
  opt.causal = true;
  opt.norm = lrpe::normalisation::none;  // the reference code's choice with LRPE (then a LayerNorm)
  opt.chunk = 16;
  opt.decay = 0.95;  // λ^{s−t}, by recurrence
  lrpe::linear_attention(q, k, v, out, lrpe_type1, lrpe::feature_maps::elu_plus_one{}, opt);
  // [linear]
  expect(out.allFinite(), "linear: causal, chunked, decay");

  // [streaming]
  lrpe::linear_attention_state<T> state(lrpe_type1.feature_dim(), d, opt.decay);
  lrpe::row_matrix<T> streamed(n, d);
  for (lrpe::index_t t = 0; t < n; ++t) {
    if (t == n / 2) {  // move the sequence to another shard: export, serialise, resume
      const std::vector<double> flat = state.export_state().to_flat();
      state = lrpe::linear_attention_state<T>(lrpe::linear_attention_snapshot<T>::from_flat(flat));
    }
    state.append(lrpe_type1, lrpe::feature_maps::elu_plus_one{}, k.row(t).data(), v.row(t).data(), t);
    state.query(lrpe_type1, lrpe::feature_maps::elu_plus_one{}, q.row(t).data(), t, streamed.row(t).data());
  }
  // [streaming]
  expect((streamed - out).cwiseAbs().maxCoeff() <= 1e-4f * (1 + out.cwiseAbs().maxCoeff()),
         "streaming (export/resume at n/2) == batched causal");

  // [multihead]
  // a fused projection output [batch, seq, heads, head_dim]: heads are strided views, no copies
  const lrpe::index_t batch = 2, heads = 4, hd = 8;
  std::vector<T> qs(batch * n * heads * hd, 0.5f), ks(qs.size(), 0.25f), vs(qs.size(), 1.0f), os(qs.size());
  const std::vector<double> decays{1.0, 0.99, 0.9, 0.5};  // one λ per head
  lrpe::linear_options mh{.causal = true, .head_decays = decays};
  lrpe::linear_attention(lrpe::bsnh(qs.data(), batch, n, heads, hd), lrpe::bsnh(ks.data(), batch, n, heads, hd),
                         lrpe::bsnh(vs.data(), batch, n, heads, hd), lrpe::bsnh(os.data(), batch, n, heads, hd),
                         lrpe::rope_neox<T>(hd), lrpe::feature_maps::elu_plus_one{}, mh);
  // [multihead]
  bool finite = true;
  for (T x : os) finite = finite && std::isfinite(x);
  expect(finite, "multi-head BSNH linear attention with per-head decay");

  // [gqa]
  // grouped-query attention: 4 query heads share 2 K/V heads (query head h reads K/V head h / 2)
  const lrpe::index_t kv_heads = 2;
  std::vector<T> kg(batch * n * kv_heads * hd), vg(kg.size()), og(qs.size());
  for (std::size_t i = 0; i < kg.size(); ++i) kg[i] = vg[i] = 0.01f * static_cast<T>(i % 97);
  lrpe::softmax_attention(lrpe::bsnh(qs.data(), batch, n, heads, hd), lrpe::bsnh(kg.data(), batch, n, kv_heads, hd),
                          lrpe::bsnh(vg.data(), batch, n, kv_heads, hd), lrpe::bsnh(og.data(), batch, n, heads, hd),
                          lrpe::rope_neox<T>(hd), lrpe::softmax_options<>{.causal = true});
  // [gqa]
  // the same as K and V repeated to every query head
  std::vector<T> kr(qs.size()), vr(qs.size()), orep(qs.size());
  for (lrpe::index_t b = 0; b < batch; ++b)
    for (lrpe::index_t s = 0; s < n; ++s)
      for (lrpe::index_t h = 0; h < heads; ++h)
        for (lrpe::index_t i = 0; i < hd; ++i) {
          kr[((b * n + s) * heads + h) * hd + i] = kg[((b * n + s) * kv_heads + h / 2) * hd + i];
          vr[((b * n + s) * heads + h) * hd + i] = vg[((b * n + s) * kv_heads + h / 2) * hd + i];
        }
  lrpe::softmax_attention(lrpe::bsnh(qs.data(), batch, n, heads, hd), lrpe::bsnh(kr.data(), batch, n, heads, hd),
                          lrpe::bsnh(vr.data(), batch, n, heads, hd), lrpe::bsnh(orep.data(), batch, n, heads, hd),
                          lrpe::rope_neox<T>(hd), lrpe::softmax_options<>{.causal = true});
  expect(og == orep, "grouped-query attention == K and V repeated to every head");
  return failures == 0 ? 0 : 1;
}
