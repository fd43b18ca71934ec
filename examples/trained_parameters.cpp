// SPDX-License-Identifier: MIT
// A trained model's positional parameters loaded into the presets (docs/api.md, Presets): the
// Householder vector v, the learned θ and the permutation π that the LRPE reference code keeps in
// its state dict (plain arrays here, as read from a checkpoint), the reference's "mixed" core, and
// PermuteFormer's per-head π and decay. Returns non-zero if a check fails.
#include <lrpe/lrpe.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  using T = double;
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    std::printf("%-64s %s\n", what, ok ? "ok" : "FAILED");
    failures += ok ? 0 : 1;
  };

  // [trained]
  // From a checkpoint, d = 8: v (any length, normalised here), the learned θ (d/2 entries), π.
  const std::vector<T> v = {0.3, -1.2, 0.8, 0.1, -0.5, 0.9, 0.2, -0.7};
  const std::vector<double> theta = {0.9, 0.31, 0.087, 0.012};
  const std::vector<lrpe::index_t> pi = {3, 0, 6, 1, 7, 2, 5, 4};
  const lrpe::type3<T> learned(v, theta);  // Householder learnable × rotation learnable
  const lrpe::type4<T> fixed(v, pi);       // Householder × permutation powers: x̃_s[j] = (Px)[π^s(j)]
  // the reference's "mixed" core over the same P: features 0..3 rotated, 4..7 left as they are
  const lrpe::mixed<T, lrpe::p::householder<T>> mixed(lrpe::p::householder<T>{v});
  // [trained]
  const lrpe::index_t d = 8;
  expect(lrpe::check::relative(learned, 3, 40) && lrpe::check::relative(fixed, 3, 40) &&
             lrpe::check::relative(mixed, 3, 40),
         "W_s^T W_t = W_{t-s} for each loaded encoder");

  // By hand: Px = x − 2 (u·x) u with u = v/‖v‖, then the row at s = 1 gathered by π.
  lrpe::row_matrix<T> x(1, d);
  for (lrpe::index_t j = 0; j < d; ++j) x(0, j) = std::sin(1.0 + static_cast<double>(j));
  double vv = 0, vx = 0;
  for (lrpe::index_t j = 0; j < d; ++j) {
    vv += v[j] * v[j];
    vx += v[j] * x(0, j);
  }
  std::vector<double> px(d);
  for (lrpe::index_t j = 0; j < d; ++j) px[j] = x(0, j) - 2 * vx / vv * v[j];
  const auto y = fixed.encode(x, 1);
  const auto z = mixed.encode(x, 123);
  double worst = 0;
  for (lrpe::index_t j = 0; j < d; ++j) worst = std::max(worst, std::abs(y(0, j) - px[pi[j]]));
  for (lrpe::index_t j = lrpe::mixed_rotated_dim(d); j < d; ++j) worst = std::max(worst, std::abs(z(0, j) - px[j]));
  expect(worst < 1e-12, "Type 4 row = (Px)[pi(j)]; mixed passes features 4..7 of Px through");

  // PermuteFormer: one π per head, φ = ReLU + 1e-3, decay r_h = sigmoid(3h/H + 2) by recurrence
  const lrpe::index_t heads = 2, n = 24;
  const std::vector<std::vector<lrpe::index_t>> head_pi = {{1, 2, 3, 4, 5, 6, 7, 0}, pi};
  const std::vector<double> r = lrpe::permuteformer_decays(heads);  // 0.881, 0.971
  lrpe::generator g(11);
  lrpe::row_matrix<T> q(n, d), k(n, d), val(n, d), out(n, d);
  for (auto* m : {&q, &k, &val})
    for (auto& e : m->reshaped()) e = g.normal();
  for (lrpe::index_t h = 0; h < heads; ++h) {
    const lrpe::permuteformer<T> enc(head_pi[h]);
    lrpe::linear_attention(q, k, val, out, enc, lrpe::feature_maps::relu_eps{1e-3},
                           lrpe::linear_options{.causal = true, .decay = r[h]});
    // The last row by hand: Σ_t r^{n−1−t} (φ(q̃)·φ(k̃_t)) v_t, the features gathered by π^s.
    double err = 0;
    for (lrpe::index_t c = 0; c < d; ++c) {
      double want = 0;
      for (lrpe::index_t t = 0; t < n; ++t) {
        double dot = 0;
        for (lrpe::index_t j = 0; j < d; ++j) {
          const double qf = std::max(q(n - 1, enc.lambda().power(n - 1, j)), 0.0) + 1e-3;
          const double kf = std::max(k(t, enc.lambda().power(t, j)), 0.0) + 1e-3;
          dot += qf * kf;
        }
        want += std::pow(r[h], static_cast<double>(n - 1 - t)) * dot * val(t, c);
      }
      err = std::max(err, std::abs(out(n - 1, c) - want) / (1 + std::abs(want)));
    }
    expect(err < 1e-12, h == 0 ? "PermuteFormer head 0 (r = 0.881) == direct sum" : "PermuteFormer head 1 == direct sum");
  }
  return failures == 0 ? 0 : 1;
}
