// Properties of every preset encoder in float and double, each against an independent
// long-double reference (tests/reference.hpp) and the algebraic identities of docs/math.md.
#include "reference.hpp"

#include <doctest/doctest.h>

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
      lrpe::permuteformer<T>

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
