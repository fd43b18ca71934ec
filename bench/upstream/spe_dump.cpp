// SPDX-License-Identifier: MIT
// lrpe's sineSPE and convSPE codes on the case bench/upstream/spe_compare.py writes as text;
// prints, as JSON on stdout, the random numbers each draw used (regenerated with lrpe's
// documented generator in the draw's documented order, so that the script can hand the same
// numbers to the reference code) and the features φ_q, φ_k of the given q and k. Not a test.
//
// Input (whitespace-separated):
//   D K R n seed                         features, sines, realizations, positions, seed
//   freqs offsets gains (D·K each) gate (D)   sineSPE's raw parameters (row-major)
//   taps  q_filters k_filters (D·taps each)    convSPE's filters; the same gate
//   q k (n·D each)                       queries and keys (row-major)
// Output: {"sine_z", "sine_eps", "sine_phi_q", "sine_phi_k", "conv_z", "conv_eps",
//          "conv_phi_q", "conv_phi_k"} (flat, row-major; φ: n × R)
#include <lrpe/lrpe.hpp>

#include "text_reader.hpp"

#include <cstdio>
#include <vector>

namespace {

void print_numbers(const char* name, const double* x, std::size_t n, bool& first) {
  std::printf("%s\"%s\": [", first ? "" : ", ", name);
  for (std::size_t i = 0; i < n; ++i) std::printf("%s%.17g", i == 0 ? "" : ", ", x[i]);
  std::printf("]");
  first = false;
}

lrpe::row_matrix<double> read_rows(upstream::text_reader& in, lrpe::index_t rows, lrpe::index_t cols) {
  lrpe::row_matrix<double> m(rows, cols);
  for (lrpe::index_t i = 0; i < m.size(); ++i) m.data()[i] = in.number();
  return m;
}

/// The draw's normals: `first` of them for the code's noise, then D·R for the gate's ε.
void print_noise(const char* z_name, const char* eps_name, std::uint64_t seed, std::size_t first_count,
                 std::size_t eps_count, bool& first) {
  lrpe::generator g(seed);
  std::vector<double> z(first_count), eps(eps_count);
  for (double& x : z) x = g.normal();
  for (double& x : eps) x = g.normal();
  print_numbers(z_name, z.data(), z.size(), first);
  print_numbers(eps_name, eps.data(), eps.size(), first);
}

void print_features(const char* q_name, const char* k_name, const lrpe::canonical::spe_code<double>& code,
                    const lrpe::row_matrix<double>& q, const lrpe::row_matrix<double>& k, bool& first) {
  namespace cn = lrpe::canonical;
  const lrpe::index_t n = q.rows(), r = code.feature_dim();
  const std::vector<lrpe::position_t> pos = [&] {
    std::vector<lrpe::position_t> p(static_cast<std::size_t>(n));
    for (lrpe::index_t i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = i;
    return p;
  }();
  const lrpe::row_matrix<double> fq = cn::features(code, cn::side::query, q, pos);
  const lrpe::row_matrix<double> fk = cn::features(code, cn::side::key, k, pos);
  print_numbers(q_name, fq.data(), static_cast<std::size_t>(n * r), first);
  print_numbers(k_name, fk.data(), static_cast<std::size_t>(n * r), first);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: spe_dump <inputs.txt>\n");
    return 2;
  }
  namespace cn = lrpe::canonical;
  upstream::text_reader in(argv[1]);
  const auto d = static_cast<lrpe::index_t>(in.integer()), kk = static_cast<lrpe::index_t>(in.integer());
  const auto r = static_cast<lrpe::index_t>(in.integer()), n = static_cast<lrpe::index_t>(in.integer());
  const auto seed = static_cast<std::uint64_t>(in.integer());
  const auto freqs = read_rows(in, d, kk), offsets = read_rows(in, d, kk), gains = read_rows(in, d, kk);
  const std::vector<double> gate = in.numbers(d);
  const auto taps = static_cast<lrpe::index_t>(in.integer());
  const auto a = read_rows(in, d, taps), b = read_rows(in, d, taps);
  const auto q = read_rows(in, n, d), k = read_rows(in, n, d);
  const cn::sine_spe<double> sine(freqs, offsets, gains, gate);
  const cn::conv_spe<double> conv(a, b, gate);
  bool first = true;
  std::printf("{");
  print_noise("sine_z", "sine_eps", seed, static_cast<std::size_t>(d * 2 * kk * r), static_cast<std::size_t>(d * r),
              first);
  print_features("sine_phi_q", "sine_phi_k", sine.draw(n, r, seed), q, k, first);
  print_noise("conv_z", "conv_eps", seed, static_cast<std::size_t>(d * r * (n + taps - 1)),
              static_cast<std::size_t>(d * r), first);
  print_features("conv_phi_q", "conv_phi_k", conv.draw(n, r, seed), q, k, first);
  std::printf("}\n");
  return 0;
}
