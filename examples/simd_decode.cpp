// Prefill and decode steps on the SIMD backend: 8 heads of causal linear attention (1+elu, RoPE
// in the NeoX pairing, a per-head decay), the prompt in one multi-head segment call and then one
// multi-head call per token, each continuing one linear_attention_state per head. A decode
// step's features take the SIMD encoder with direct tables (the token's angles evaluated once
// for every head, q and k) and the state recurrence in place. Prints tokens/s and checks the
// outputs against one batched reference call (returns non-zero if they differ).
#include <lrpe/lrpe.hpp>
#include <lrpe/simd.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  using T = float;
  const lrpe::index_t heads = 8, d = 64, prompt = 256, steps = 768, n = prompt + steps;
  lrpe::generator g(12);
  // q, k, v of every token, [seq, heads, d] (a decoder would compute them from its hidden state)
  std::vector<T> q(n * heads * d), k(q.size()), v(q.size()), out(q.size()), batched(q.size());
  for (auto* buf : {&q, &k, &v})
    for (auto& x : *buf) x = static_cast<T>(g.normal());
  const lrpe::rope_neox<T> rope(d);
  const lrpe::feature_maps::elu_plus_one phi;
  std::vector<double> decay(heads);
  for (lrpe::index_t h = 0; h < heads; ++h) decay[h] = 1.0 - std::pow(2.0, -5.0 - static_cast<double>(h));
  // tokens [t, t + m) of every head: a BSNH view into the [seq, heads, d] buffers
  const auto rows = [&](auto& buf, lrpe::index_t t, lrpe::index_t m) {
    return lrpe::bsnh(buf.data() + t * heads * d, 1, m, heads, d);
  };

  const auto t0 = std::chrono::steady_clock::now();
  // [simd-decode]
  std::vector<lrpe::linear_attention_state<T>> states;  // state b·heads + h for head (b, h)
  for (lrpe::index_t h = 0; h < heads; ++h) states.emplace_back(rope.feature_dim(), d, decay[h]);
  // prefill: the prompt in one call
  lrpe::linear_attention(rows(q, 0, prompt), rows(k, 0, prompt), rows(v, 0, prompt), rows(out, 0, prompt), rope, phi,
                         states, lrpe::linear_options{.causal = true, .head_decays = decay}, lrpe::backend::simd<>{});
  // decode: one call per token at its position, every head
  for (lrpe::index_t t = prompt; t < n; ++t) {
    const lrpe::linear_options step{.causal = true, .q_positions = t, .k_positions = t, .head_decays = decay};
    lrpe::linear_attention(rows(q, t, 1), rows(k, t, 1), rows(v, t, 1), rows(out, t, 1), rope, phi, states, step,
                           lrpe::backend::simd<>{});
  }
  // [simd-decode]
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("prefilled %ld tokens and decoded %ld (%ld heads, d = %ld) in %.2f ms: %.0f tokens/s overall\n",
              static_cast<long>(prompt), static_cast<long>(steps), static_cast<long>(heads), static_cast<long>(d),
              sec * 1e3, static_cast<double>(steps) / sec);

  // the same sequence in one batched call on the reference backend
  lrpe::linear_attention(rows(q, 0, n), rows(k, 0, n), rows(v, 0, n), rows(batched, 0, n), rope, phi,
                         lrpe::linear_options{.causal = true, .head_decays = decay});
  double err = 0, mag = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    err = std::max(err, static_cast<double>(std::abs(out[i] - batched[i])));
    mag = std::max(mag, static_cast<double>(std::abs(batched[i])));
  }
  std::printf("prefill + decode steps vs one batched call: max relative difference %.2e\n", err / (1 + mag));
  return err / (1 + mag) < 1e-4 ? 0 : 1;
}
