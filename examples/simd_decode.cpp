// SPDX-License-Identifier: MIT
// A streaming decode loop: 8 heads of causal linear attention (1+elu, RoPE in the NeoX pairing,
// a TransNormer-style per-head decay). The prompt runs as one multi-head segment call on the
// SIMD backend, leaving one linear_attention_state per head; then every new token costs
// O(heads·d²), whatever its position, two ways:
//  - per head, the state's own append + query (scalar code, any backend's state);
//  - one multi-head segment call per token on the SIMD backend: the token's features by the
//    SIMD encoder with direct tables (angles evaluated once for all heads, q and k) and the
//    state recurrence in place.
// Prints tokens/s of each, and checks both against one batched reference call over the whole
// sequence (returns non-zero if they differ).
#include <lrpe/lrpe.hpp>
#include <lrpe/simd.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  using T = float;
  const lrpe::index_t heads = 8, d = 64, prompt = 256, steps = 768, n = prompt + steps;
  lrpe::generator g(11);
  // q, k, v of every token, [seq, heads, d] (a decoder would compute them from its hidden state)
  std::vector<T> q(n * heads * d), k(q.size()), v(q.size()), out(q.size()), appended(q.size()), batched(q.size());
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
  using clock = std::chrono::steady_clock;
  const auto seconds = [](clock::time_point since) {
    return std::chrono::duration<double>(clock::now() - since).count();
  };

  // [simd-decode]
  std::vector<lrpe::linear_attention_state<T>> states;  // state b·heads + h for head (b, h)
  for (lrpe::index_t h = 0; h < heads; ++h) states.emplace_back(rope.feature_dim(), d, decay[h]);
  // prefill: the prompt in one call
  lrpe::linear_attention(rows(q, 0, prompt), rows(k, 0, prompt), rows(v, 0, prompt), rows(out, 0, prompt), rope, phi,
                         states, lrpe::linear_options{.causal = true, .head_decays = decay}, lrpe::backend::simd<>{});
  // decode: one call per token at its position, every head
  const auto t0 = clock::now();
  for (lrpe::index_t t = prompt; t < n; ++t) {
    const lrpe::linear_options step{.causal = true, .q_positions = t, .k_positions = t, .head_decays = decay};
    lrpe::linear_attention(rows(q, t, 1), rows(k, t, 1), rows(v, t, 1), rows(out, t, 1), rope, phi, states, step,
                           lrpe::backend::simd<>{});
  }
  // [simd-decode]
  const double segment_s = seconds(t0);

  // the same tokens through each head's state (prefilled again, on the reference backend):
  // append the token's k, v at its position, then answer its query
  std::vector<lrpe::linear_attention_state<T>> per_head;
  for (lrpe::index_t h = 0; h < heads; ++h) per_head.emplace_back(rope.feature_dim(), d, decay[h]);
  lrpe::linear_attention(rows(q, 0, prompt), rows(k, 0, prompt), rows(v, 0, prompt), rows(appended, 0, prompt), rope,
                         phi, per_head, lrpe::linear_options{.causal = true, .head_decays = decay});
  auto at = [&](lrpe::index_t t, lrpe::index_t h) { return (t * heads + h) * d; };
  const auto t1 = clock::now();
  for (lrpe::index_t t = prompt; t < n; ++t) {
    for (lrpe::index_t h = 0; h < heads; ++h) {
      per_head[h].append(rope, phi, &k[at(t, h)], &v[at(t, h)], t);
      per_head[h].query(rope, phi, &q[at(t, h)], t, &appended[at(t, h)]);
    }
  }
  const double append_s = seconds(t1);
  std::printf("decoded %ld tokens after a %ld-token prompt (%ld heads, d = %ld): %.0f tokens/s by multi-head SIMD "
              "segment calls, %.0f tokens/s by append + query per head\n",
              static_cast<long>(steps), static_cast<long>(prompt), static_cast<long>(heads), static_cast<long>(d),
              static_cast<double>(steps) / segment_s, static_cast<double>(steps) / append_s);

  // the same sequence in one batched call on the reference backend
  lrpe::linear_attention(rows(q, 0, n), rows(k, 0, n), rows(v, 0, n), rows(batched, 0, n), rope, phi,
                         lrpe::linear_options{.causal = true, .head_decays = decay});
  const auto relative = [&](const std::vector<T>& got) {
    double err = 0, mag = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      err = std::max(err, static_cast<double>(std::abs(got[i] - batched[i])));
      mag = std::max(mag, static_cast<double>(std::abs(batched[i])));
    }
    return err / (1 + mag);
  };
  const double e_segment = relative(out), e_append = relative(appended);
  std::printf("vs one batched call: max relative difference %.2e (SIMD segment calls), %.2e (reference prefill, "
              "append + query)\n",
              e_segment, e_append);
  return e_segment < 1e-4 && e_append < 1e-4 ? 0 : 1;
}
