// A streaming decode loop: 8 heads of causal linear attention with LRPE (RoPE, NeoX pairing) and
// a TransNormer-style per-head decay, one token at a time through linear_attention_state: each
// token costs O(heads·d²), whatever the position. Prints tokens/s, and checks the decoded
// outputs against one batched causal call over the whole sequence (returns non-zero if not equal).
#include <lrpe/lrpe.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  using T = float;
  const lrpe::index_t heads = 8, d = 64, prompt = 256, steps = 768, n = prompt + steps;
  lrpe::generator g(11);
  // q, k, v of every token, [seq, heads, d] (a decoder would compute them from its hidden state)
  std::vector<T> q(n * heads * d), k(q.size()), v(q.size()), out(q.size()), batched(q.size());
  for (auto* buf : {&q, &k, &v})
    for (auto& x : *buf) x = static_cast<T>(g.normal());

  const lrpe::rope_neox<T> rope(d);
  const lrpe::feature_maps::elu_plus_one phi;
  std::vector<double> decay(heads);
  for (lrpe::index_t h = 0; h < heads; ++h) decay[h] = 1.0 - std::pow(2.0, -5.0 - static_cast<double>(h));
  auto at = [&](lrpe::index_t t, lrpe::index_t h) { return (t * heads + h) * d; };

  // prefill: the prompt in one multi-head causal call (BSNH views of its rows), leaving one
  // state per head (state h: head h's decay)
  std::vector<lrpe::linear_attention_state<T>> state;
  for (lrpe::index_t h = 0; h < heads; ++h) state.emplace_back(rope.feature_dim(), d, decay[h]);
  lrpe::linear_attention(lrpe::bsnh<const T>(q.data(), 1, prompt, heads, d),
                         lrpe::bsnh<const T>(k.data(), 1, prompt, heads, d),
                         lrpe::bsnh<const T>(v.data(), 1, prompt, heads, d), lrpe::bsnh(out.data(), 1, prompt, heads, d),
                         rope, phi, state, lrpe::linear_options{.causal = true, .head_decays = decay});

  // decode: append the new token's k, v at its position, then answer its query
  const auto t0 = std::chrono::steady_clock::now();
  for (lrpe::index_t t = prompt; t < n; ++t) {
    for (lrpe::index_t h = 0; h < heads; ++h) {
      state[h].append(rope, phi, &k[at(t, h)], &v[at(t, h)], t);
      state[h].query(rope, phi, &q[at(t, h)], t, &out[at(t, h)]);
    }
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("decoded %ld tokens after a %ld-token prompt (%ld heads, d = %ld): %.0f tokens/s\n",
              static_cast<long>(steps), static_cast<long>(prompt), static_cast<long>(heads), static_cast<long>(d),
              static_cast<double>(steps) / sec);

  // the same sequence in one batched call (multi-head BSNH view, per-head decay)
  lrpe::linear_options all{.causal = true, .head_decays = decay};
  lrpe::linear_attention(lrpe::bsnh(q.data(), 1, n, heads, d), lrpe::bsnh(k.data(), 1, n, heads, d),
                         lrpe::bsnh(v.data(), 1, n, heads, d), lrpe::bsnh(batched.data(), 1, n, heads, d), rope, phi, all);
  double err = 0, mag = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    err = std::max(err, static_cast<double>(std::abs(out[i] - batched[i])));
    mag = std::max(mag, static_cast<double>(std::abs(batched[i])));
  }
  std::printf("streamed vs batched: max relative difference %.2e\n", err / (1 + mag));
  return err / (1 + mag) < 1e-4 ? 0 : 1;
}
