// SPDX-License-Identifier: MIT
// Properties of every preset encoder in float and double, each against an independent
// long-double reference (tests/reference.hpp) and the algebraic identities of docs/math.md; the
// presets built from explicit (trained) parameters against the dense P and Λ they were given;
// the reference code's "mixed" core; PermuteFormer's per-head decay.
#include "reference.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <limits>

namespace {

template <class E>
using scalar_of = typename E::scalar;

/// Tolerance for a comparison of float/double results against long double: 8·d·ε(T) for T's
/// rounding, at every position. The angles are exact (docs/math.md §Angles), so no term grows
/// with the position; the reference's are too (ref::cis).
template <class E>
long double tol(const E& e) {
  return 8.0L * static_cast<long double>(e.dim()) * std::numeric_limits<scalar_of<E>>::epsilon();
}

/// The encoder's W_s against the independent long-double reference (which uses the same double
/// θ, so only T's rounding of cos/sin and of the products differs); unitarity and the relative
/// property formed in long double from T's matrices; and the library's own check::relative
/// with `check_tol` (negative: its default).
template <class E>
void check_relative_pair(const E& e, lrpe::position_t s, lrpe::position_t t, double check_tol) {
  const lrpe::index_t d = e.dim();
  const auto ws = e.relative_matrix(s);
  const auto wt = e.relative_matrix(t);
  CHECK(ref::max_abs_diff(ws, ref::W(e, s)) <= tol(e));
  const ref::mat a = ws.template cast<ref::cld>(), b = wt.template cast<ref::cld>();
  CHECK(ref::max_abs_diff(a.adjoint() * a, ref::mat::Identity(d, d)) <= tol(e));
  CHECK(ref::max_abs_diff(a.adjoint() * b, ref::W(e, t - s)) <= tol(e));
  const auto rep = lrpe::check::relative(e, s, t, check_tol);
  CHECK_MESSAGE(rep.passed, rep.to_string());
}

// Widths: even, odd and a DFT size above the dense limit (FFT path).
constexpr lrpe::index_t widths[] = {6, 9, 64};

/// Random position in [-10⁶, 10⁶].
lrpe::position_t random_position(lrpe::generator& g) {
  return static_cast<lrpe::position_t>(g.below(2'000'001)) - 1'000'000;
}

}  // namespace

#define LRPE_PRESETS(T)                                                                    \
  lrpe::type1<T>, lrpe::type2<T>, lrpe::type3<T>, lrpe::type4<T>, lrpe::type5<T>,          \
      lrpe::type6<T>, lrpe::type7<T>, lrpe::type8<T>, lrpe::rope_gptj<T>, lrpe::rope_neox<T>, \
      lrpe::permuteformer<T>, lrpe::mixed<T>

TEST_CASE_TEMPLATE("preset: W_0 = I, W_s unitary, W_s^H W_t = W_{t-s} (random s, t in [-1e6, 1e6])", E,
                   LRPE_PRESETS(float), LRPE_PRESETS(double)) {
  lrpe::generator g(ref::seed(20261122));
  for (lrpe::index_t d : widths) {
    const E e(d);
    CAPTURE(d);
    // W_0 = I, against the identity itself.
    CHECK(ref::max_abs_diff(e.relative_matrix(0), ref::mat::Identity(d, d)) <= tol(e));
    for (int trial = 0; trial < 3; ++trial) {
      const lrpe::position_t s = random_position(g), t = random_position(g);
      CAPTURE(s);
      CAPTURE(t);
      check_relative_pair(e, s, t, -1);  // the library's own check with its default tolerance
      CHECK(lrpe::check::unitarity(e, {s, t}).passed);
      CHECK(lrpe::check::identity_at_zero(e).passed);
    }
  }
}

TEST_CASE_TEMPLATE("preset: exact angles — W_s, W_s^H W_t = W_{t-s} and shifted scores hold to T's rounding at "
                   "every int64 position", E, LRPE_PRESETS(float), LRPE_PRESETS(double)) {
  // Far positions, where one rounded product fl(s·θ) is off by up to |s|·θ·2⁻⁵³ (a radian near
  // 2^62): the encoder's W_s against the long-double reference, the relative property, and the
  // library's own check with the position-free tolerance. Each of these fails on an angle
  // formed as fl(s·θ) (with that angle the float error at 2^62 reaches ~1).
  using T = typename E::scalar;
  constexpr lrpe::position_t top = std::numeric_limits<lrpe::position_t>::max();
  constexpr lrpe::position_t bottom = std::numeric_limits<lrpe::position_t>::min();
  lrpe::generator g(ref::seed(20261123));
  for (lrpe::index_t d : {lrpe::index_t{9}, lrpe::index_t{64}}) {
    const E e(d);
    for (lrpe::position_t base : {(lrpe::position_t{1} << 53) - 40, -(lrpe::position_t{1} << 53) - 3,
                                  lrpe::position_t{1'000'000'007'000'000}, (lrpe::position_t{1} << 62) + 12'345,
                                  top - 100, bottom}) {
      const lrpe::position_t s = base + static_cast<lrpe::position_t>(g.below(50));
      const lrpe::position_t t = base + static_cast<lrpe::position_t>(g.below(50));
      CAPTURE(d);
      CAPTURE(s);
      CAPTURE(t);
      check_relative_pair(e, s, t, lrpe::check::default_tolerance(e));
      // The score at (s, t) is the score at (s − base, t − base), near 0.
      const auto q = ref::random_rows<T>(1, d, g.next());
      const auto k = ref::random_rows<T>(1, d, g.next());
      const double far = e.score(q.data(), s, k.data(), t);
      const double near = e.score(q.data(), s - base, k.data(), t - base);
      CHECK(std::abs(far - near) <= static_cast<double>(tol(e)) * d);
    }
  }
}

TEST_CASE_TEMPLATE("preset: encode equals the dense M_s product and scores are shift invariant", E,
                   LRPE_PRESETS(float), LRPE_PRESETS(double)) {
  using T = typename E::scalar;
  lrpe::generator g(ref::seed(20261122) + 1);
  for (lrpe::index_t d : widths) {
    const E e(d);
    const lrpe::index_t n = 5;
    const auto x = ref::random_rows<T>(n, d, g.next());
    const lrpe::position_t offset = random_position(g);
    CAPTURE(d);
    CAPTURE(offset);
    // Block encode at an offset, and at an explicit array of positions.
    const auto feats = e.encode(x, offset);
    std::vector<lrpe::position_t> pos(n);
    for (auto& p : pos) p = random_position(g);
    const auto feats_arr = e.encode(x, pos);
    REQUIRE(feats.cols() == e.feature_dim());
    for (lrpe::index_t i = 0; i < n; ++i) {
      for (auto [row_feats, s] : {std::pair{feats.row(i), offset + i}, std::pair{feats_arr.row(i), pos[std::size_t(i)]}}) {
        const ref::mat m = ref::M(e, s);
        const Eigen::Matrix<ref::cld, Eigen::Dynamic, 1> expect =
            m * x.row(i).transpose().template cast<ref::cld>();
        // Rebuild the native row from the real view [Re, Im].
        Eigen::Matrix<ref::cld, Eigen::Dynamic, 1> got(d);
        for (lrpe::index_t j = 0; j < d; ++j)
          got(j) = E::is_complex ? ref::cld(row_feats(j), row_feats(d + j)) : ref::cld(row_feats(j), 0);
        CHECK(ref::max_abs_diff(got, expect) <= tol(e));
      }
    }
    // Shift invariance of the score, and score = Re(q^T W_{t-s} k) against the reference.
    for (int trial = 0; trial < 3; ++trial) {
      const lrpe::position_t s = random_position(g), t = random_position(g), c = random_position(g);
      const auto q = ref::random_rows<T>(1, d, g.next());
      const auto k = ref::random_rows<T>(1, d, g.next());
      const double f = e.score(q.data(), s, k.data(), t);
      const double f_shift = e.score(q.data(), s + c, k.data(), t + c);
      const ref::cld expect = (q.template cast<ref::cld>() * ref::W(e, t - s) * k.transpose().template cast<ref::cld>())(0, 0);
      CHECK(std::abs(static_cast<long double>(f) - expect.real()) <= tol(e) * d);
      CHECK(std::abs(f - f_shift) <= static_cast<double>(tol(e)) * d);
      CHECK(lrpe::check::shift_invariance(e, s, t, c, g.next()).passed);
    }
  }
}

TEST_CASE_TEMPLATE("backend-tagged encode / encode_qk on backend::reference (the CPU library alone) == dense M_s per "
                   "(batch, head)", T, float, double) {
  lrpe::generator g(ref::seed(20261124));
  const lrpe::index_t B = 2, H = 3, nq = 4, nk = 5, d = 6;
  const lrpe::type1<T> e(d);
  const auto q = ref::random_rows<T>(B * H * nq, d, g.next());
  const auto k = ref::random_rows<T>(B * H * nk, d, g.next());
  lrpe::row_matrix<T> qo(B * H * nq, d), ko(B * H * nk, d);
  const std::vector<lrpe::position_t> kpos = {9, -4, 1'000'003, 0, 2};
  // BSNH: row (b, i, h) at ((b·seq + i)·H + h)·d
  lrpe::encode_qk(lrpe::backend::reference{}, e, lrpe::bsnh(q.data(), B, nq, H, d), 7, lrpe::bsnh(k.data(), B, nk, H, d),
                  kpos, lrpe::bsnh(qo.data(), B, nq, H, d), lrpe::bsnh(ko.data(), B, nk, H, d));
  const auto expect_row = [&](const lrpe::row_matrix<T>& x, lrpe::index_t row, lrpe::position_t s) {
    return Eigen::Matrix<ref::cld, Eigen::Dynamic, 1>(ref::M(e, s) * x.row(row).transpose().template cast<ref::cld>());
  };
  for (lrpe::index_t b = 0; b < B; ++b)
    for (lrpe::index_t h = 0; h < H; ++h) {
      for (lrpe::index_t i = 0; i < nq; ++i) {
        const lrpe::index_t row = (b * nq + i) * H + h;
        CHECK(ref::max_abs_diff(qo.row(row).transpose().template cast<ref::cld>().eval(), expect_row(q, row, 7 + i)) <=
              tol(e));
      }
      for (lrpe::index_t i = 0; i < nk; ++i) {
        const lrpe::index_t row = (b * nk + i) * H + h;
        CHECK(ref::max_abs_diff(ko.row(row).transpose().template cast<ref::cld>().eval(),
                                expect_row(k, row, kpos[std::size_t(i)])) <= tol(e));
      }
    }
  lrpe::row_matrix<T> one(nq, d);
  lrpe::encode(lrpe::backend::reference{}, e, lrpe::matrix_view<const T>(q.data(), nq, d), -3, lrpe::view(one));
  for (lrpe::index_t i = 0; i < nq; ++i)
    CHECK(ref::max_abs_diff(one.row(i).transpose().template cast<ref::cld>().eval(), expect_row(q, i, -3 + i)) <= tol(e));
  // K's output with the wrong head count names k_out
  CHECK_THROWS_WITH_AS(lrpe::encode_qk(lrpe::backend::reference{}, e, lrpe::bnsh(q.data(), B, H, nq, d), 0,
                                       lrpe::bnsh(k.data(), B, H, nk, d), 0, lrpe::bnsh(qo.data(), B, H, nq, d),
                                       lrpe::bnsh(ko.data(), B, H - 1, nk, d)),
                       doctest::Contains("k_out"), lrpe::shape_error);
}

TEST_CASE_TEMPLATE("rope_neox equals type5 and a plain split-half (rotate_half) RoPE", T, float, double) {
  constexpr lrpe::index_t d = 64;
  const lrpe::rope_neox<T> neox(d);
  const lrpe::type5<T> t5(d);
  const lrpe::rope_gptj<T> gptj(d);
  lrpe::generator g(ref::seed(20261122) + 2);
  // HF LLaMA: inv_freq_k = 10000^(-2k/d); cos = cat(f, f); q' = q cos + rotate_half(q) sin.
  auto plain_neox = [&](const lrpe::row_matrix<T>& x, lrpe::position_t s) {
    std::vector<long double> out(d);
    for (lrpe::index_t i = 0; i < d; ++i) {
      const lrpe::index_t k = i % (d / 2);
      const long double a = static_cast<long double>(s) * std::pow(10000.0L, -2.0L * k / d);
      const long double rot = i < d / 2 ? -static_cast<long double>(x(0, i + d / 2)) : static_cast<long double>(x(0, i - d / 2));
      out[std::size_t(i)] = x(0, i) * std::cos(a) + rot * std::sin(a);
    }
    return out;
  };
  long double worst_gptj_vs_neox = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const auto q = ref::random_rows<T>(1, d, g.next());
    const auto k = ref::random_rows<T>(1, d, g.next());
    const lrpe::position_t s = static_cast<lrpe::position_t>(g.below(4096)), t = static_cast<lrpe::position_t>(g.below(4096));
    const auto pq = plain_neox(q, s), pk = plain_neox(k, t);
    long double plain = 0;
    for (lrpe::index_t i = 0; i < d; ++i) plain += pq[std::size_t(i)] * pk[std::size_t(i)];
    const double a = neox.score(q.data(), s, k.data(), t);
    const double b = t5.score(q.data(), s, k.data(), t);
    const long double eps = 64 * d * std::numeric_limits<T>::epsilon();
    CHECK(std::abs(a - plain) <= eps);
    CHECK(std::abs(b - plain) <= eps);
    // The rows themselves: NeoX encode matches plain split-half RoPE.
    const auto enc = neox.encode(q, s);
    for (lrpe::index_t i = 0; i < d; ++i) CHECK(std::abs(enc(0, i) - pq[std::size_t(i)]) <= eps);
    worst_gptj_vs_neox = std::max(worst_gptj_vs_neox, std::abs(static_cast<long double>(gptj.score(q.data(), s, k.data(), t)) - plain));
  }
  // The test can tell the pairings apart: GPT-J scores differ from split-half ones.
  CHECK(worst_gptj_vs_neox > 1e-2L);
}

TEST_CASE_TEMPLATE("permutation powers at s = ±1e9 equal π applied along its cycles", T, float, double) {
  for (lrpe::index_t d : {1, 7, 33, 64}) {
    const auto l = lrpe::lambda::permutation_power<T>::seeded(d, 99 + std::uint64_t(d));
    const auto x = ref::random_rows<T>(1, d, 5);
    for (lrpe::position_t s : {lrpe::position_t{1'000'000'000}, lrpe::position_t{-1'000'000'000}, lrpe::position_t{0},
                               lrpe::position_t{1}, lrpe::position_t{-1}, std::numeric_limits<lrpe::position_t>::min(),
                               std::numeric_limits<lrpe::position_t>::max()}) {
      CAPTURE(d);
      CAPTURE(s);
      std::vector<T> y(std::size_t(d), T(-7));
      l.apply(s, x.data(), y.data());
      for (lrpe::index_t j = 0; j < d; ++j) {
        const lrpe::index_t src = ref::cycle_power(l.indices(), s, j);
        CHECK(y[std::size_t(j)] == x(0, src));
        CHECK(l.power(s, j) == src);
      }
    }
  }
  // Negative powers invert positive ones: π^{-s}(π^{s}(j)) = j, checked by plain iteration for small s.
  const auto l = lrpe::lambda::permutation_power<T>::seeded(12, 3);
  for (lrpe::index_t j = 0; j < 12; ++j) {
    lrpe::index_t x = j;
    for (int i = 0; i < 5; ++i) x = l.indices()[std::size_t(x)];
    CHECK(l.power(5, j) == x);
    CHECK(l.power(-5, x) == j);
  }
}

TEST_CASE("angles at position 1e6 in float match a long-double reference") {
  // θ_k = 10000^(-2k/64); the float encoder forms s·θ in double, so its cos/sin at s = 10⁶ are
  // within float rounding (a few 1e-8) of the long-double values. Stated tolerance: 2.5e-7.
  constexpr lrpe::index_t d = 64;
  constexpr lrpe::position_t s = 1'000'000;
  const lrpe::lambda::rotation<float> rot(d);
  const auto m = rot.matrix(s);
  long double worst = 0, worst_naive = 0;
  for (lrpe::index_t k = 0; k < d / 2; ++k) {
    const long double theta = std::pow(10000.0L, -2.0L * k / d);
    const long double c = std::cos(static_cast<long double>(s) * theta);
    const long double sn = std::sin(static_cast<long double>(s) * theta);
    worst = std::max({worst, std::abs(m(2 * k, 2 * k) - c), std::abs(m(2 * k + 1, 2 * k) - sn)});
    // What a float-only implementation gets: θ and s·θ rounded to float.
    const float naive = std::cos(static_cast<float>(s) * static_cast<float>(theta));
    worst_naive = std::max(worst_naive, std::abs(naive - c));
  }
  MESSAGE("float encoder max error " << static_cast<double>(worst) << ", float-only angles "
                                      << static_cast<double>(worst_naive));
  CHECK(worst <= 2.5e-7L);
  CHECK(worst_naive > 1e-3L);  // the test can tell exact angles from float ones
  // The same through encode: x = e_0 maps to (cos, sin) in the first pair.
  const lrpe::rope_gptj<float> rope(d);
  lrpe::row_matrix<float> x = lrpe::row_matrix<float>::Zero(1, d);
  x(0, 0) = 1;
  const auto y = rope.encode(x, s);
  CHECK(std::abs(y(0, 0) - std::cos(1e6L)) <= 2.5e-7L);
  CHECK(std::abs(y(0, 1) - std::sin(1e6L)) <= 2.5e-7L);
}

// ---- explicit parameters (a trained model's v, π, θ) --------------------------------------

namespace {

using ref::ld;

/// I − 2vvᵀ/‖v‖² from the v the caller gave (not the preset's normalised copy).
template <class T>
ref::mat householder_given(const std::vector<T>& v) {
  const auto d = static_cast<lrpe::index_t>(v.size());
  ld n2 = 0;
  for (T x : v) n2 += ld(x) * ld(x);
  ref::mat m = ref::mat::Identity(d, d);
  for (lrpe::index_t i = 0; i < d; ++i)
    for (lrpe::index_t j = 0; j < d; ++j) m(i, j) -= 2 * ld(v[std::size_t(i)]) * ld(v[std::size_t(j)]) / n2;
  return m;
}

/// Interleaved rotation blocks over the first 2·θ.size() of d features at the exact angles s·θ_k.
ref::mat rotation_given(lrpe::index_t d, const std::vector<double>& theta, lrpe::position_t s) {
  ref::mat m = ref::mat::Identity(d, d);
  for (std::size_t k = 0; k < theta.size(); ++k) {
    const ref::cld z = ref::cis(s, theta[k]);
    const auto i = static_cast<lrpe::index_t>(2 * k);
    m(i, i) = z.real(); m(i, i + 1) = -z.imag();
    m(i + 1, i) = z.imag(); m(i + 1, i + 1) = z.real();
  }
  return m;
}

/// (Λ⁽ˢ⁾x)[j] = x[π^s(j)] from the π the caller gave.
ref::mat permutation_power_given(const std::vector<lrpe::index_t>& pi, lrpe::position_t s) {
  const auto d = static_cast<lrpe::index_t>(pi.size());
  ref::mat m = ref::mat::Zero(d, d);
  for (lrpe::index_t j = 0; j < d; ++j) m(j, ref::cycle_power(pi, s, j)) = 1;
  return m;
}

/// The paper's odd-even P: out[2k] = x[k], out[2k+1] = x[h+k], h = d − ⌊d/2⌋ (odd d: x[h−1] last).
ref::mat odd_even_given(lrpe::index_t d) {
  const lrpe::index_t h = d - d / 2;
  ref::mat m = ref::mat::Zero(d, d);
  for (lrpe::index_t k = 0; k < d / 2; ++k) {
    m(2 * k, k) = 1;
    m(2 * k + 1, h + k) = 1;
  }
  if (d % 2) m(d - 1, h - 1) = 1;
  return m;
}

/// θ type a on the rotated width e, in long double then rounded to the double a schedule holds.
std::vector<double> type_a_given(lrpe::index_t e) {
  std::vector<double> theta(std::size_t(e / 2));
  for (lrpe::index_t k = 0; k < e / 2; ++k) theta[std::size_t(k)] = double(std::pow(10000.0L, -2.0L * k / e));
  return theta;
}

/// max |M_s − expected(s)| over positions near 0 and, with `far`, far away (where only an
/// expected Λ built from the encoder's own double θ can agree to T's rounding).
template <class E, class F>
long double worst_transform_error(const E& e, F expected, bool far = true) {
  long double worst = 0;
  for (lrpe::position_t s : {lrpe::position_t{0}, lrpe::position_t{1}, lrpe::position_t{-3}, lrpe::position_t{1000},
                             lrpe::position_t{-987'654}, lrpe::position_t{1} << 40}) {
    if (!far && std::abs(s) > 1000) continue;
    worst = std::max(worst, ref::max_abs_diff(e.transform_matrix(s), expected(s)));
  }
  return worst;
}

template <class T>
std::vector<T> random_vector(lrpe::index_t d, lrpe::generator& g, double scale) {
  std::vector<T> v(static_cast<std::size_t>(d));
  for (auto& x : v) x = static_cast<T>(scale * g.normal());
  return v;
}

}  // namespace

TEST_CASE_TEMPLATE("explicit parameters: type1-4, type7 and permuteformer equal the dense P and Λ they were given", T,
                   float, double) {
  lrpe::generator g(ref::seed(20261125));
  for (lrpe::index_t d : {lrpe::index_t{6}, lrpe::index_t{9}, lrpe::index_t{16}}) {
    CAPTURE(d);
    // A trained v of any length (normalised by the preset), a learned θ, a π.
    const std::vector<T> v = random_vector<T>(d, g, 3.7);
    std::vector<double> theta(std::size_t(d / 2));
    for (auto& t : theta) t = 2 * g.uniform01() - 0.5;  // any sign
    std::vector<lrpe::index_t> pi = g.permutation(d);
    const ref::mat h = householder_given(v);
    const long double eps = 8.0L * d * std::numeric_limits<T>::epsilon();
    const auto rot = [&](lrpe::position_t s) { return ref::mat(rotation_given(d, theta, s) * h); };
    CHECK(worst_transform_error(lrpe::type1<T>(v, theta), rot) <= eps);
    CHECK(worst_transform_error(lrpe::type2<T>(v, theta), rot) <= eps);
    CHECK(worst_transform_error(lrpe::type3<T>(v, theta), rot) <= eps);
    // θ left out: type a over the even part of d, formed here in long double; the library's
    // double θ may differ by a few ulps, a few 1e-13 radians at |s| ≤ 1000.
    const auto type_a = type_a_given(d - d % 2);
    CHECK(worst_transform_error(
              lrpe::type1<T>(v), [&](lrpe::position_t s) { return ref::mat(rotation_given(d, type_a, s) * h); },
              false) <= eps + 1e-12L);
    CHECK(worst_transform_error(lrpe::type4<T>(v, pi), [&](lrpe::position_t s) {
            return ref::mat(permutation_power_given(pi, s) * h);
          }) <= eps);
    const ref::mat oe = odd_even_given(d);
    CHECK(worst_transform_error(lrpe::type7<T>(pi),
                                [&](lrpe::position_t s) { return ref::mat(permutation_power_given(pi, s) * oe); }) <= eps);
    CHECK(worst_transform_error(lrpe::permuteformer<T>(pi),
                                [&](lrpe::position_t s) { return permutation_power_given(pi, s); }) <= eps);
    // The relative property of what was built, by the library's own check.
    CHECK(lrpe::check::relative(lrpe::type4<T>(v, pi), -7, 12345).passed);
    CHECK(lrpe::check::relative(lrpe::type1<T>(v, theta), 3, -1'000'003).passed);
  }
}

TEST_CASE_TEMPLATE("explicit parameters: given the seeded draws, each preset equals its seeded form", T, float, double) {
  for (std::uint64_t seed : {lrpe::default_seed, std::uint64_t{12345}}) {
    for (lrpe::index_t d : {lrpe::index_t{7}, lrpe::index_t{32}}) {
      CAPTURE(seed);
      CAPTURE(d);
      const auto hs = lrpe::p::householder<T>::seeded(d, seed);
      const std::vector<T> v(hs.vector().begin(), hs.vector().end());
      const auto ls = lrpe::lambda::permutation_power<T>::seeded(d, seed + 1);
      const std::vector<lrpe::index_t> pi(ls.indices().begin(), ls.indices().end());
      // v is normalised again: equal to T's rounding; π and θ exactly.
      const long double eps = 4.0L * d * std::numeric_limits<T>::epsilon();
      const auto same = [&](const auto& a, const auto& b) {
        for (lrpe::position_t s : {lrpe::position_t{0}, lrpe::position_t{5}, lrpe::position_t{-40'000}})
          CHECK(ref::max_abs_diff(a.transform_matrix(s), b.transform_matrix(s)) <= eps);
      };
      same(lrpe::type1<T>(v), lrpe::type1<T>(d, seed));
      same(lrpe::type2<T>(v), lrpe::type2<T>(d, seed));
      same(lrpe::type3<T>(v), lrpe::type3<T>(d, seed));
      same(lrpe::type4<T>(v, pi), lrpe::type4<T>(d, seed));
      same(lrpe::type7<T>(pi), lrpe::type7<T>(d, seed));
      same(lrpe::permuteformer<T>(pi), lrpe::permuteformer<T>(d, seed));
      // The seeded π is seed + 1's, not seed's: the seed's own permutation gives another encoder
      // (the comparison above can fail).
      const auto other = lrpe::lambda::permutation_power<T>::seeded(d, seed);
      const lrpe::permuteformer<T> wrong{std::vector<lrpe::index_t>(other.indices().begin(), other.indices().end())};
      CHECK(ref::max_abs_diff(wrong.transform_matrix(1), lrpe::permuteformer<T>(d, seed).transform_matrix(1)) > 0.5L);
    }
  }
}

TEST_CASE_TEMPLATE("explicit parameters: bad v, π or θ throw lrpe errors naming the argument", T, float, double) {
  using lrpe::index_t;
  const std::vector<T> v4 = {T(1), T(-2), T(0.5), T(3)}, zero(4, T(0)), none{};
  std::vector<T> nan4 = v4;
  nan4[2] = std::numeric_limits<T>::quiet_NaN();
  const std::vector<index_t> pi4 = {2, 0, 3, 1}, pi3 = {1, 2, 0}, twice = {0, 1, 1, 2}, past = {0, 1, 2, 4}, empty{};
  CHECK_THROWS_WITH_AS((lrpe::type1<T>(none)), doctest::Contains("argument 'v.size()'"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS((lrpe::type1<T>(zero)), doctest::Contains("argument 'v'"), lrpe::parameter_error);
  CHECK_THROWS_WITH_AS((lrpe::type1<T>(nan4)), doctest::Contains("argument 'v'"), lrpe::domain_error);
  CHECK_THROWS_WITH_AS((lrpe::type1<T>(v4, {0.1, 0.2, 0.3})), doctest::Contains("argument 'theta.size()'"),
                       lrpe::shape_error);
  CHECK_THROWS_WITH_AS((lrpe::type1<T>(v4, {0.1, std::numeric_limits<double>::infinity()})),
                       doctest::Contains("argument 'theta'"), lrpe::domain_error);
  CHECK_THROWS_WITH_AS((lrpe::type2<T>(zero)), doctest::Contains("argument 'v'"), lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(lrpe::type2<T>(std::vector<T>{T(1)}), doctest::Contains("argument 'v.size()'"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS((lrpe::type3<T>(zero)), doctest::Contains("argument 'v'"), lrpe::parameter_error);
  CHECK_THROWS_WITH_AS((lrpe::type4<T>(v4, pi3)), doctest::Contains("argument 'pi.size()'"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS((lrpe::type4<T>(v4, twice)), doctest::Contains("argument 'pi'"), lrpe::parameter_error);
  CHECK_THROWS_WITH_AS((lrpe::type4<T>(v4, past)), doctest::Contains("argument 'pi'"), lrpe::parameter_error);
  CHECK_THROWS_WITH_AS((lrpe::type4<T>(zero, pi4)), doctest::Contains("argument 'v'"), lrpe::parameter_error);
  CHECK_THROWS_WITH_AS((lrpe::type7<T>(empty)), doctest::Contains("argument 'pi.size()'"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS((lrpe::type7<T>(twice)), doctest::Contains("argument 'pi'"), lrpe::parameter_error);
  CHECK_THROWS_WITH_AS((lrpe::permuteformer<T>(empty)), doctest::Contains("argument 'pi.size()'"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS((lrpe::permuteformer<T>(past)), doctest::Contains("argument 'pi'"), lrpe::parameter_error);
  // The good parameters next to them build.
  CHECK_NOTHROW((lrpe::type4<T>(v4, pi4)));
  CHECK_NOTHROW((lrpe::type7<T>(pi3)));
}

TEST_CASE_TEMPLATE("mixed: rotates the first e = floor(d/2) rounded up to even features, theta_k = 1e4^(-2k/e), "
                   "against a dense long-double construction", T, float, double) {
  // e per d, written out (the reference code's mix_rope: e = d // 2, then e += 1 if odd).
  const std::pair<lrpe::index_t, lrpe::index_t> widths_e[] = {{3, 2},  {4, 2},  {5, 2},   {6, 4},   {7, 4},
                                                              {8, 4},  {9, 4},  {10, 6},  {11, 6},  {12, 6},
                                                              {13, 6}, {14, 8}, {63, 32}, {64, 32}, {65, 32},
                                                              {66, 34}};
  for (const auto& de : widths_e) {
    const lrpe::index_t d = de.first, e = de.second;  // (CAPTURE is a lambda: clang < 16 captures no binding)
    CAPTURE(d);
    CHECK(lrpe::mixed_rotated_dim(d) == e);
    CHECK(lrpe::mixed<T>(d).lambda().rotated_dim() == e);
  }
  lrpe::generator g(ref::seed(20261126));
  for (lrpe::index_t d : {lrpe::index_t{7}, lrpe::index_t{9}, lrpe::index_t{64}, lrpe::index_t{66}}) {
    CAPTURE(d);
    const lrpe::index_t e = lrpe::mixed_rotated_dim(d);
    const lrpe::mixed<T> mix(d);
    const std::vector<T> v = random_vector<T>(d, g, 0.3);
    const lrpe::mixed<T, lrpe::p::householder<T>> mix_h(lrpe::p::householder<T>{v});
    const ref::mat h = householder_given(v);
    // Λ⁽ˢ⁾ by hand: θ and the angle s·θ in long double. The encoder's θ is a double, a few ulps
    // off (its exponent −2k/e and the power are rounded), hence the |s|·2⁻⁴⁸ term (θ ≤ 1).
    const auto expected = [&](lrpe::position_t s, lrpe::index_t width) {
      ref::mat m = ref::mat::Identity(d, d);
      for (lrpe::index_t k = 0; k < width / 2; ++k) {
        const ld a = ld(s) * std::pow(10000.0L, -2.0L * k / width);
        m(2 * k, 2 * k) = std::cos(a); m(2 * k, 2 * k + 1) = -std::sin(a);
        m(2 * k + 1, 2 * k) = std::sin(a); m(2 * k + 1, 2 * k + 1) = std::cos(a);
      }
      return m;
    };
    long double worst_d_normalised = 0;
    for (lrpe::position_t s : {lrpe::position_t{0}, lrpe::position_t{1}, lrpe::position_t{-1}, lrpe::position_t{17},
                               lrpe::position_t{-513}, lrpe::position_t{4096}, lrpe::position_t{100'000}}) {
      CAPTURE(s);
      const long double eps = tol(mix) + std::abs(ld(s)) * 0x1p-48L;
      const ref::mat want = expected(s, e);
      CHECK(ref::max_abs_diff(mix.transform_matrix(s), want) <= eps);
      CHECK(ref::max_abs_diff(mix_h.transform_matrix(s), ref::mat(want * h)) <= eps);
      // θ normalised by d instead of e (freq::rope(e/2, 1e4, d)) is another encoder.
      ref::mat by_d = ref::mat::Identity(d, d);
      for (lrpe::index_t k = 0; k < e / 2; ++k) {
        const ld a = ld(s) * std::pow(10000.0L, -2.0L * k / d);
        by_d(2 * k, 2 * k) = std::cos(a); by_d(2 * k, 2 * k + 1) = -std::sin(a);
        by_d(2 * k + 1, 2 * k) = std::sin(a); by_d(2 * k + 1, 2 * k + 1) = std::cos(a);
      }
      worst_d_normalised = std::max(worst_d_normalised, ref::max_abs_diff(mix.transform_matrix(s), by_d));
    }
    CHECK(worst_d_normalised > 0.1L);
    // With P = identity it is GPT-J RoPE with rotary_dim = e (the same frequencies, bit for bit).
    const lrpe::rope_gptj<T> rope(d, 10000.0, e);
    CHECK(std::ranges::equal(mix.lambda().frequencies(), rope.lambda().frequencies()));
    // Properties, by the library's own checks.
    for (int trial = 0; trial < 3; ++trial) {
      const lrpe::position_t s = random_position(g), t = random_position(g), c = random_position(g);
      CHECK(lrpe::check::relative(mix, s, t).passed);
      CHECK(lrpe::check::relative(mix_h, s, t).passed);
      CHECK(lrpe::check::unitarity(mix_h, {s, t}).passed);
      CHECK(lrpe::check::shift_invariance(mix_h, s, t, c, g.next()).passed);
    }
    CHECK(lrpe::check::identity_at_zero(mix_h).passed);
    // A given θ (here type b with L = 512) replaces type a on the same e features.
    const auto theta_b = lrpe::freq::theta_b(e, 512);
    const lrpe::mixed<T, lrpe::p::householder<T>> mix_b(lrpe::p::householder<T>{v}, theta_b);
    CHECK(ref::max_abs_diff(mix_b.transform_matrix(-77), ref::mat(rotation_given(d, theta_b, -77) * h)) <= tol(mix));
  }
  // Errors name the argument.
  CHECK_THROWS_WITH_AS(lrpe::mixed<T>(2), doctest::Contains("argument 'd'"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::mixed<T>(0), doctest::Contains("argument 'd'"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::mixed_rotated_dim(-4), doctest::Contains("argument 'd'"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS((lrpe::mixed<T, lrpe::p::dct<T>>(lrpe::p::dct<T>(8), {0.5, 0.25, 0.125})),
                       doctest::Contains("argument 'theta.size()'"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS((lrpe::mixed<T, lrpe::p::dct<T>>(lrpe::p::dct<T>(8), {0.5, std::nan("")})),
                       doctest::Contains("argument 'theta'"), lrpe::domain_error);
}

TEST_CASE("permuteformer_decay: r_h = sigmoid(3h/H + 2), as PermuteFormer's ratio buffer") {
  for (lrpe::index_t heads : {1, 2, 7, 8, 12}) {
    const auto all = lrpe::permuteformer_decays(heads);
    REQUIRE(all.size() == std::size_t(heads));
    for (lrpe::index_t h = 0; h < heads; ++h) {
      CAPTURE(heads);
      CAPTURE(h);
      const ld want = 1 / (1 + std::exp(-(3.0L * h / heads + 2)));
      CHECK(std::abs(lrpe::permuteformer_decay(h, heads) - want) <= 4 * std::numeric_limits<double>::epsilon());
      CHECK(all[std::size_t(h)] == lrpe::permuteformer_decay(h, heads));
    }
  }
  // REFERENCE.md's range for 8 heads: 0.881 … 0.990.
  const auto r8 = lrpe::permuteformer_decays(8);
  CHECK(std::abs(r8.front() - 0.881) < 5e-4);
  CHECK(std::abs(r8.back() - 0.990) < 5e-4);
  CHECK_THROWS_WITH_AS(lrpe::permuteformer_decay(0, 0), doctest::Contains("argument 'heads'"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::permuteformer_decay(-1, 8), doctest::Contains("argument 'head'"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::permuteformer_decay(8, 8), doctest::Contains("argument 'head'"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::permuteformer_decays(0), doctest::Contains("argument 'heads'"), lrpe::shape_error);
}
