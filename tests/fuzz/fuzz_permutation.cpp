// SPDX-License-Identifier: MIT
// libFuzzer target: permutations from raw int64 arrays.
//
// `p::permutation` and `lambda::permutation_power` validate an index array as a bijection of
// 0..d−1 (duplicates, out-of-range and negative entries, empty arrays are lrpe::errors). What
// they accept must act as that permutation:
//   - p::permutation: y[j] = x[π(j)], apply_adjoint(apply(x)) = x exactly, matrix() is it;
//   - permutation_power: power(s, j) = π^s(j) for raw int64 s (checked against repeated
//     application for small |s|), apply(s) then apply(−s) = identity exactly, Λ⁽ˢ⁾Λ⁽ᵗ⁾ = Λ⁽ˢ⁺ᵗ⁾;
//   - the seeded constructors and `generator::permutation` give bijections for raw seeds and d;
//   - an encoder with a permutation P (Type 4-like) and a permutation-power Λ (PermuteFormer)
//     keeps the norm of a row at any position.
//
// Input: a mode byte, then the array (a length byte and int64 entries) or seeds and sizes.
#include "fuzz_common.hpp"

#include <numeric>
#include <vector>

namespace {

using namespace lrpe_fuzz;

/// An index array: mostly a permutation of 0..d−1 with a few raw edits, so that both accepted
/// and rejected arrays are common.
std::vector<index_t> index_array(input& in) {
  const index_t d = in.small(0, 64);
  std::vector<index_t> pi(static_cast<std::size_t>(d));
  std::iota(pi.begin(), pi.end(), index_t{0});
  // a shuffle driven by the input
  for (index_t i = d - 1; i > 0; --i) std::swap(pi[static_cast<std::size_t>(i)], pi[in.u8() % static_cast<std::size_t>(i + 1)]);
  const index_t edits = in.small(0, 3);
  for (index_t e = 0; e < edits && d > 0; ++e) {
    const std::size_t place = in.u8() % static_cast<std::size_t>(d);
    pi[place] = in.edgy_i64();
  }
  return pi;
}

bool is_bijection(const std::vector<index_t>& pi) {
  const auto d = static_cast<index_t>(pi.size());
  std::vector<bool> seen(pi.size(), false);
  for (index_t v : pi) {
    if (v < 0 || v >= d || seen[static_cast<std::size_t>(v)]) return false;
    seen[static_cast<std::size_t>(v)] = true;
  }
  return d >= 1;
}

void p_permutation(input& in) {
  const std::vector<index_t> pi = index_array(in);
  const bool bijection = is_bijection(pi);
  const lrpe::p::permutation<double> p(pi);  // must throw unless pi is a bijection
  LRPE_FUZZ_CHECK(bijection, "p::permutation accepted an array that is not a bijection");
  const auto d = static_cast<std::size_t>(p.dim());
  std::vector<double> x(d), y(d), back(d);
  for (auto& v : x) v = in.value<double>();
  p.apply(x.data(), y.data());
  for (std::size_t j = 0; j < d; ++j) LRPE_FUZZ_CHECK(y[j] == x[static_cast<std::size_t>(pi[j])], "apply is not x[pi(j)]");
  p.apply_adjoint(y.data(), back.data());
  LRPE_FUZZ_CHECK(back == x, "apply_adjoint(apply(x)) != x");
  const auto m = p.matrix();
  const Eigen::Map<const lrpe::dense_vector<double>> xv(x.data(), p.dim());
  const lrpe::dense_vector<double> mx = m * xv;
  for (std::size_t j = 0; j < d; ++j) LRPE_FUZZ_CHECK(mx[static_cast<index_t>(j)] == y[j], "matrix() x != apply(x)");
}

void permutation_power(input& in) {
  const std::vector<index_t> pi = index_array(in);
  const bool bijection = is_bijection(pi);
  const lrpe::lambda::permutation_power<double> l(pi);
  LRPE_FUZZ_CHECK(bijection, "permutation_power accepted an array that is not a bijection");
  const index_t d = l.dim();
  const position_t s = in.edgy_i64(), t = in.edgy_i64();
  // power(s, j) against repeated application, for small |s|
  if (s >= -70 && s <= 70) {
    std::vector<index_t> inverse(static_cast<std::size_t>(d));
    for (index_t j = 0; j < d; ++j) inverse[static_cast<std::size_t>(pi[static_cast<std::size_t>(j)])] = j;
    for (index_t j = 0; j < d; ++j) {
      index_t r = j;
      for (position_t k = 0; k < (s < 0 ? -s : s); ++k)
        r = s < 0 ? inverse[static_cast<std::size_t>(r)] : pi[static_cast<std::size_t>(r)];
      LRPE_FUZZ_CHECK(l.power(s, j) == r, "power(s, j) != pi^s(j)");
    }
  }
  std::vector<double> x(static_cast<std::size_t>(d)), y(x.size()), back(x.size()), z(x.size()), w(x.size());
  for (auto& v : x) v = in.value<double>();
  l.apply(s, x.data(), y.data());
  for (index_t j = 0; j < d; ++j)
    LRPE_FUZZ_CHECK(y[static_cast<std::size_t>(j)] == x[static_cast<std::size_t>(l.power(s, j))], "apply(s) != x[pi^s(j)]");
  if (s != std::numeric_limits<position_t>::min()) {
    l.apply(-s, y.data(), back.data());
    LRPE_FUZZ_CHECK(back == x, "apply(-s, apply(s, x)) != x");
  }
  position_t sum;
  if (!__builtin_add_overflow(s, t, &sum)) {
    l.apply(t, y.data(), z.data());
    l.apply(sum, x.data(), w.data());
    LRPE_FUZZ_CHECK(z == w, "Lambda^(t) Lambda^(s) != Lambda^(s+t)");
  }
  index_t bad_j = in.edgy_i64();
  if (bad_j >= 0 && bad_j < d) bad_j = d;
  (void)l.power(s, bad_j);  // must throw: j outside [0, d)
  LRPE_FUZZ_CHECK(false, "power(s, j) accepted j outside [0, d)");
}

void seeded(input& in) {
  const auto seed = static_cast<std::uint64_t>(in.i64());
  index_t d = in.edgy_i64();
  if (d > 4096) d = 1 + d % 4096;  // valid but large sizes only cost memory
  const std::vector<index_t> pi = lrpe::generator(seed).permutation(d);
  LRPE_FUZZ_CHECK(static_cast<index_t>(pi.size()) == d && (d == 0 || is_bijection(pi)), "generator::permutation");
  const auto p = lrpe::p::permutation<float>::seeded(d, seed);
  const auto l = lrpe::lambda::permutation_power<float>::seeded(d, seed);
  LRPE_FUZZ_CHECK(p.dim() == d && l.dim() == d, "seeded sizes");
  // PermuteFormer-style encoder: a permutation P and Λ = powers of another; M_s keeps the norm
  if (d <= 64) {
    const lrpe::encoder e(p, l);
    std::vector<float> x(static_cast<std::size_t>(d)), y(x.size());
    for (auto& v : x) v = in.value<float>();
    e.encode_row(in.edgy_i64(), x.data(), y.data());
    std::sort(x.begin(), x.end());
    std::sort(y.begin(), y.end());
    LRPE_FUZZ_CHECK(x == y, "a permutation encoder does not permute the row");
  }
  const auto below = lrpe::generator(seed).below(static_cast<std::uint64_t>(in.i64()));  // 0: parameter_error
  (void)below;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return lrpe_fuzz::run_one(
      [](lrpe_fuzz::input& in) {
        switch (in.u8() % 3) {
          case 0: p_permutation(in); break;
          case 1: permutation_power(in); break;
          default: seeded(in); break;
        }
      },
      data, size);
}
