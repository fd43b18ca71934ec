// SPDX-License-Identifier: MIT
// What positional encodings are compared against (Yun et al. 2020, "Are Transformers universal
// approximators of sequence-to-sequence functions?"): self-attention alone is permutation
// equivariant, so a Transformer needs positions; the paper's trainable positional matrix E makes
// it a universal approximator, and its cheaper token mixers, the bi-linear projection and the
// depth-wise separable convolution, carry positions in their weights. Each is a small layer here
// on rows = tokens (the paper's X is d × n: its columns are our rows), with the properties that
// tell them apart checked numerically: permutation equivariance, invariance to a shift of every
// position (relative encodings), parameters that grow with n. Returns non-zero if a check fails.
#include <lrpe/lrpe.hpp>

#include <cmath>
#include <cstdio>
#include <span>
#include <vector>

namespace {

using T = double;
using rows = lrpe::row_matrix<T>;
constexpr lrpe::index_t n = 12, d = 8, k = 3;  // tokens, features, convolution taps

rows random(lrpe::generator& g, lrpe::index_t r, lrpe::index_t c, double s = 1.0) {
  rows m(r, c);
  for (auto& e : m.reshaped()) e = s * g.normal();
  return m;
}

/// One head of self-attention with a residual: X + softmax(X W_Q (X W_K)ᵀ/√d) X W_V, at `pos`,
/// with the encoding `enc` (lrpe::no_encoding: none).
template <class E>
rows attention_layer(const rows& x, const rows& wq, const rows& wk, const rows& wv, const E& enc, lrpe::position_t pos) {
  const rows q = x * wq, kk = x * wk, v = x * wv;
  rows out(n, d);
  lrpe::softmax_options<> o;
  o.q_positions = o.k_positions = pos;
  lrpe::softmax_attention(q, kk, v, out, enc, o);
  return x + out;
}

/// BProj(X) = X + W_O X W_P (the paper's layout), here X + W_Pᵀ X W_Oᵀ: W_P (n × n) mixes tokens.
rows bilinear_projection(const rows& x, const rows& w_o, const rows& w_p) {
  return x + w_p.transpose() * x * w_o.transpose();
}

/// SepConv(X) = X + W_O (X ∗ W_C): feature c convolved along the tokens with its own k taps
/// (zero padding, centred), then mixed by W_O.
rows separable_convolution(const rows& x, const rows& w_o, const rows& w_c) {
  rows conv = rows::Zero(n, d);
  for (lrpe::index_t t = 0; t < n; ++t)
    for (lrpe::index_t c = 0; c < d; ++c)
      for (lrpe::index_t j = 0; j < k; ++j) {
        const lrpe::index_t src = t + j - k / 2;
        if (src >= 0 && src < n) conv(t, c) += w_c(c, j) * x(src, c);
      }
  return x + conv * w_o.transpose();
}

/// Average attention (the paper's baseline): each token takes the mean of the others' X W_V.
/// Softmax attention with zero logits weighs its visible keys equally; "every key but the
/// query's own" is DiSAN's diagonal-disabled mask: the strict causal and anti-causal calls merged.
rows average_attention(const rows& x, const rows& wv) {
  const rows zero = rows::Zero(n, d), v = x * wv;
  rows before(n, d), after(n, d);
  std::vector<T> lse_before(n), lse_after(n);
  lrpe::softmax_options<> o;
  o.causal = o.exclude_self = true;
  lrpe::softmax_attention_lse(zero, zero, v, before, std::span<T>(lse_before), lrpe::no_encoding{}, o);
  o.causal = false;
  o.anti_causal = true;
  lrpe::softmax_attention_lse(zero, zero, v, after, std::span<T>(lse_after), lrpe::no_encoding{}, o);
  lrpe::merge_attention_states(before, std::span<T>(lse_before), after, std::span<const T>(lse_after));
  return x + before;
}

/// Rows of x in the order `perm` (row i of the result is row perm[i] of x).
rows permuted(const rows& x, const std::vector<lrpe::index_t>& perm) {
  rows out(x.rows(), x.cols());
  for (lrpe::index_t i = 0; i < x.rows(); ++i) out.row(i) = x.row(perm[static_cast<std::size_t>(i)]);
  return out;
}

bool close(const rows& a, const rows& b) { return (a - b).cwiseAbs().maxCoeff() <= 1e-10 * (1 + b.cwiseAbs().maxCoeff()); }

}  // namespace

int main() {
  int failures = 0;
  const auto expect = [&](bool ok, const char* what) {
    std::printf("%-78s %s\n", what, ok ? "ok" : "FAILED");
    failures += ok ? 0 : 1;
  };
  lrpe::generator g(2020);
  const rows x = random(g, n, d);
  const rows wq = random(g, d, d, 0.4), wk = random(g, d, d, 0.4), wv = random(g, d, d, 0.4), w_o = random(g, d, d, 0.4);
  const rows w_p = random(g, n, n, 0.3), w_c = random(g, d, k, 0.5);
  const std::vector<lrpe::index_t> perm = g.permutation(n);
  const auto same_after_permuting = [&](const auto& layer) { return close(layer(permuted(x, perm)), permuted(layer(x), perm)); };

  // 1. Without positions, self-attention is permutation equivariant: it cannot tell token order.
  const auto plain = [&](const rows& in) { return attention_layer(in, wq, wk, wv, lrpe::no_encoding{}, 0); };
  expect(same_after_permuting(plain), "self-attention, no positions: permutation equivariant");

  // 2. Yun et al.'s trainable E: X + E. Their construction puts token j in the cube [j, j + 1]^d
  //    (E's row j = j·1 for inputs in [0, 1]^d), so every token is told apart by its position.
  rows e(n, d);
  for (lrpe::index_t j = 0; j < n; ++j) e.row(j).setConstant(static_cast<T>(j));
  const lrpe::absolute::learned_positions<T> positional(e);
  const auto with_e = [&](const rows& in) {
    rows y = in;
    positional.add_to(lrpe::view(y));
    return attention_layer(y, wq, wk, wv, lrpe::no_encoding{}, 0);
  };
  expect(!same_after_permuting(with_e), "self-attention on X + E: not permutation equivariant");
  const rows unit = (random(g, n, d).array().tanh() + 1) / 2;  // inputs in [0, 1]^d
  rows placed = unit;
  positional.add_to(lrpe::view(placed));
  bool cubes = true;
  for (lrpe::index_t j = 0; j < n; ++j)
    cubes = cubes && placed.row(j).minCoeff() >= T(j) && placed.row(j).maxCoeff() <= T(j + 1);
  expect(cubes, "E's construction: token j lies in [j, j + 1]^d");

  // 3. A relative encoding (RoPE) also breaks the symmetry, but a shift of every position
  //    changes nothing; an absolute one (E read at shifted rows) does.
  const lrpe::rope_neox<T> rope(d);
  const auto with_rope = [&](const rows& in) { return attention_layer(in, wq, wk, wv, rope, 0); };
  expect(!same_after_permuting(with_rope), "self-attention with RoPE: not permutation equivariant");
  expect(close(attention_layer(x, wq, wk, wv, rope, 1000), with_rope(x)), "with RoPE: positions 1000.. give positions 0..'s output");
  const lrpe::absolute::learned_positions<T> longer(random(g, 2 * n, d));
  rows at0 = x, at5 = x;
  longer.add_to(lrpe::view(at0), 0);
  longer.add_to(lrpe::view(at5), 5);
  expect(!close(plain(at5), plain(at0)), "with a learned E: positions 5.. differ from positions 0..");

  // 4. The bi-linear projection: tokens mixed by a fixed n × n matrix (n² parameters, tied to n).
  const auto bproj = [&](const rows& in) { return bilinear_projection(in, w_o, w_p); };
  expect(!same_after_permuting(bproj), "bi-linear projection: not permutation equivariant (W_P reads positions)");

  // 5. The depth-wise separable convolution: d·k + d² parameters whatever n; equivariant to a
  //    shift of the tokens away from the borders, as any convolution.
  const auto sepconv = [&](const rows& in) { return separable_convolution(in, w_o, w_c); };
  rows shifted = rows::Zero(n, d);
  shifted.bottomRows(n - 1) = x.topRows(n - 1);
  const rows a = sepconv(x), b = sepconv(shifted);
  expect(close(b.middleRows(k, n - 2 * k), a.middleRows(k - 1, n - 2 * k)), "separable convolution: a shifted input, a shifted output");
  expect(!same_after_permuting(sepconv), "separable convolution: not permutation equivariant");

  // 6. Average attention (the paper's weakest baseline): the mean of the other tokens.
  const rows avg = average_attention(x, wv), v = x * wv;
  rows mean(n, d);
  for (lrpe::index_t s = 0; s < n; ++s) mean.row(s) = x.row(s) + (v.colwise().sum() - v.row(s)) / T(n - 1);
  expect(close(avg, mean), "average attention == X + the mean of the other tokens' X W_V");
  expect(same_after_permuting([&](const rows& in) { return average_attention(in, wv); }),
         "average attention: permutation equivariant");

  std::printf("parameters at n = %ld, d = %ld: E %ld, bi-linear W_P %ld, separable W_C %ld (+ W_O %ld each)\n",
              static_cast<long>(n), static_cast<long>(d), static_cast<long>(n * d), static_cast<long>(n * n),
              static_cast<long>(d * k), static_cast<long>(d * d));
  return failures == 0 ? 0 : 1;
}
