// SPDX-License-Identifier: MIT
// Policy-level tests: each P and Λ against its textbook definition, parameters and generators,
// and every error path of the foundation (type and message).
#include "reference.hpp"

#include <doctest/doctest.h>

#include <Eigen/QR>
#include <Eigen/SVD>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

using lrpe::index_t;
using lrpe::position_t;

TEST_CASE("generator: xoshiro256** seeded by splitmix64 reproduces an independent implementation") {
  // Values from an independent Python implementation of the documented algorithm.
  lrpe::generator g(42);
  CHECK(g.next() == 0x15780b2e0c2ec716ULL);
  CHECK(g.next() == 0x6104d9866d113a7eULL);
  CHECK(g.next() == 0xae17533239e499a1ULL);
  const auto p = lrpe::generator(7).permutation(8);
  CHECK(p == std::vector<index_t>{1, 3, 7, 5, 4, 0, 6, 2});
  // uniform01 in [0, 1), normal has roughly unit variance.
  lrpe::generator h(1);
  double sum = 0, sum2 = 0;
  for (int i = 0; i < 20000; ++i) {
    const double u = h.uniform01();
    REQUIRE((u >= 0 && u < 1));
    const double z = h.normal();
    sum += z;
    sum2 += z * z;
  }
  CHECK(std::abs(sum / 20000) < 0.05);
  CHECK(std::abs(sum2 / 20000 - 1) < 0.05);
}

TEST_CASE_TEMPLATE("P policies apply and apply_adjoint match their textbook matrices", T, float, double) {
  const long double eps = 64 * std::numeric_limits<T>::epsilon();
  for (index_t d : {1, 2, 5, 16, 33, 64, 100}) {
    CAPTURE(d);
    const auto x = ref::random_rows<T>(1, d, 11 + std::uint64_t(d));
    auto check_p = [&](const auto& p) {
      using P = std::decay_t<decltype(p)>;
      using O = typename P::output_type;
      const ref::mat pm = ref::P(p);
      std::vector<O> y(static_cast<std::size_t>(d)), back(static_cast<std::size_t>(d));
      p.apply(x.data(), y.data());
      const Eigen::Matrix<ref::cld, Eigen::Dynamic, 1> expect = pm * x.row(0).transpose().template cast<ref::cld>();
      for (index_t i = 0; i < d; ++i) CHECK(std::abs(ref::cld(y[std::size_t(i)]) - expect(i)) <= eps * d);
      p.apply_adjoint(y.data(), back.data());  // Pᴴ P x = x
      for (index_t i = 0; i < d; ++i) CHECK(std::abs(ref::cld(back[std::size_t(i)]) - ref::cld(x(0, i))) <= eps * d);
      CHECK(ref::max_abs_diff(p.matrix(), pm) <= eps * d);
    };
    check_p(lrpe::p::identity<T>(d));
    check_p(lrpe::p::householder<T>::seeded(d, 3));
    check_p(lrpe::p::permutation<T>::seeded(d, 4));
    check_p(lrpe::p::odd_even<T>(d));
    check_p(lrpe::p::dct<T>(d));
    check_p(lrpe::p::dft<T>(d, lrpe::p::dft_method::dense));
    check_p(lrpe::p::dft<T>(d, lrpe::p::dft_method::fft));
    check_p(lrpe::p::dense<T>(lrpe::p::householder<T>::seeded(d, 5).matrix()));
    check_p(lrpe::p::dense<std::complex<T>>(lrpe::p::dft<T>(d).matrix()));
  }
}

namespace {
/// A random d×d orthogonal matrix (QR of a normal matrix, in long double).
Eigen::Matrix<long double, Eigen::Dynamic, Eigen::Dynamic> random_orthogonal(index_t d, std::uint64_t seed) {
  lrpe::generator g(seed);
  Eigen::Matrix<long double, Eigen::Dynamic, Eigen::Dynamic> a(d, d);
  for (index_t i = 0; i < d; ++i)
    for (index_t j = 0; j < d; ++j) a(i, j) = static_cast<long double>(g.normal());
  Eigen::HouseholderQR<Eigen::Matrix<long double, Eigen::Dynamic, Eigen::Dynamic>> qr(a);
  return qr.householderQ();
}
}  // namespace

TEST_CASE_TEMPLATE("p::dense: the m accepted becomes its unitary polar factor, so encoders on it pass lrpe::check", T,
                   float, double) {
  using ldm = Eigen::Matrix<long double, Eigen::Dynamic, Eigen::Dynamic>;
  constexpr long double eps = std::numeric_limits<T>::epsilon();
  const index_t d = 64;
  const ldm q = random_orthogonal(d, 77);
  const auto unitarity_error = [](const auto& m) {
    const ldm x = m.template cast<long double>();
    return (x.transpose() * x - ldm::Identity(x.rows(), x.cols())).cwiseAbs().maxCoeff();
  };
  // m = (1 + c)·Q: mᴴm − I = 9·d·ε on the diagonal, under the default 10·d·ε. Its polar factor is Q.
  const long double c = std::sqrt(1 + 9 * d * eps) - 1;
  const lrpe::dense_matrix<T> m = (q * (1 + c)).template cast<T>();
  const lrpe::p::dense<T> p(m);
  CHECK(p.input_unitarity_error() >= 8.5 * d * eps);
  CHECK(p.input_unitarity_error() <= p.default_tolerance(d));
  CHECK(unitarity_error(p.matrix()) <= 2 * std::sqrt(double(d)) * eps);  // the rounding of a unitary matrix
  CHECK((p.matrix().template cast<long double>() - q).cwiseAbs().maxCoeff() <= 2 * eps);
  // m itself: W_sᴴW_s − I ≈ 18·d·ε, which lrpe::check's 16·d·ε rejected
  const lrpe::encoder e{p, lrpe::lambda::rotation<T>(d, lrpe::freq::theta_a(d))};
  const auto u = lrpe::check::unitarity(e, {0, 7, -1000, 1000});
  CHECK_MESSAGE(u.passed, u.max_error);
  CHECK(u.max_error <= 2 * d * eps);
  const auto r = lrpe::check::relative(e, -1000, 1000);
  CHECK_MESSAGE(r.passed, r.max_error);

  // A general perturbation under a user tolerance: P equals the polar factor UVᴴ of m computed
  // here by an SVD in long double.
  {
    lrpe::generator g(78);
    ldm noisy = q;
    for (index_t i = 0; i < d; ++i)
      for (index_t j = 0; j < d; ++j) noisy(i, j) += 1e-4L * static_cast<long double>(g.normal());
    const lrpe::dense_matrix<T> mn = noisy.template cast<T>();
    const lrpe::p::dense<T> pn(mn, 0.05);
    const Eigen::JacobiSVD<ldm> svd(mn.template cast<long double>(), Eigen::ComputeFullU | Eigen::ComputeFullV);
    const ldm polar = svd.matrixU() * svd.matrixV().transpose();
    CHECK(pn.input_unitarity_error() > 1e-4);
    CHECK((pn.matrix().template cast<long double>() - polar).cwiseAbs().maxCoeff() <= 8 * eps);
    CHECK(unitarity_error(pn.matrix()) <= 2 * std::sqrt(double(d)) * eps);
  }
  // Far from unitary (a large tolerance): scaled Newton steps first. The polar factor of Q·D,
  // D > 0 diagonal, is Q; of the m rounded to T, the long-double SVD's UVᴴ, which P must equal
  // to rounding for float and to d·ε for double (the steps run in double for both).
  {
    ldm dq = q;
    dq.col(0) *= 2.5L;
    dq.col(1) *= 0.3L;
    const lrpe::dense_matrix<T> mf = dq.template cast<T>();
    const lrpe::p::dense<T> pf(mf, 10.0);
    CHECK(pf.input_unitarity_error() >= 5.24);
    const Eigen::JacobiSVD<ldm> svd(mf.template cast<long double>(), Eigen::ComputeFullU | Eigen::ComputeFullV);
    const ldm polar = svd.matrixU() * svd.matrixV().transpose();
    MESSAGE("far from unitary: |P - UV^H| = " << double((pf.matrix().template cast<long double>() - polar).cwiseAbs().maxCoeff() / eps)
            << " eps, |UV^H - Q| = " << double((polar - q).cwiseAbs().maxCoeff() / eps) << " eps");
    CHECK((pf.matrix().template cast<long double>() - polar).cwiseAbs().maxCoeff() <=
          (std::is_same_v<T, float> ? 2 * eps : d * eps));
    CHECK(unitarity_error(pf.matrix()) <= 2 * std::sqrt(double(d)) * eps);
  }
  // A residual whose largest entry grows on the first step although the steps converge (column 0
  // at an angle ε to every other column: (E²)₀₀ = (d − 1)ε² > ε); the steps stop on ‖E‖_F, so P
  // is still the polar factor (it was m itself when they stopped on the largest entry).
  {
    const double star = 0.01;  // > 4/(3d)
    ldm ms = ldm::Identity(d, d);
    for (index_t j = 1; j < d; ++j) ms(j, 0) = star;
    ms(0, 0) = std::sqrt(1 - (d - 1) * star * star);
    const lrpe::dense_matrix<T> mf = ms.template cast<T>();
    const lrpe::p::dense<T> ps(mf, 0.05);
    const Eigen::JacobiSVD<ldm> svd(mf.template cast<long double>(), Eigen::ComputeFullU | Eigen::ComputeFullV);
    CHECK(ps.input_unitarity_error() >= 0.9 * star);
    CHECK(unitarity_error(ps.matrix()) <= 2 * std::sqrt(double(d)) * eps);
    // to the rounding of the steps' d-term products (float: of the result to float)
    CHECK((ps.matrix().template cast<long double>() - svd.matrixU() * svd.matrixV().transpose()).cwiseAbs().maxCoeff() <=
          2 * std::sqrt(double(d)) * eps);
  }
  // Singular m (only a tolerance ≥ 1 accepts one): an SVD's UVᴴ, unitary.
  {
    const lrpe::p::dense<T> pz(lrpe::dense_matrix<T>::Zero(d, d), 1.0);
    CHECK(unitarity_error(pz.matrix()) <= 2 * std::sqrt(double(d)) * eps);
  }
  // Complex: the unitary DFT scaled by (1 + c) comes back as the DFT.
  {
    const lrpe::p::dft<T> dft(d);
    const lrpe::dense_matrix<std::complex<T>> mc = dft.matrix() * std::complex<T>(T(1 + c));
    const lrpe::p::dense<std::complex<T>> pc(mc);
    CHECK(pc.input_unitarity_error() >= 8.5 * d * eps);
    CHECK((pc.matrix() - dft.matrix()).cwiseAbs().maxCoeff() <= 4 * eps);
  }
}

TEST_CASE("odd_even interleaves the halves (REFERENCE.md: out[2k] = x[k], out[2k+1] = x[h+k])") {
  CHECK(lrpe::p::odd_even_indices(6) == std::vector<index_t>{0, 3, 1, 4, 2, 5});
  CHECK(lrpe::p::odd_even_indices(5) == std::vector<index_t>{0, 3, 1, 4, 2});
  CHECK(lrpe::p::odd_even_indices(1) == std::vector<index_t>{0});
}

TEST_CASE("Householder normalises v, is seeded reproducibly, and is an involution") {
  const std::vector<double> v{3, 0, 4};
  const lrpe::p::householder<double> h(v);
  CHECK(h.vector()[0] == doctest::Approx(0.6));
  CHECK(h.vector()[2] == doctest::Approx(0.8));
  const auto a = lrpe::p::householder<float>::seeded(64, 7);
  const auto b = lrpe::p::householder<float>::seeded(64, 7);
  const auto c = lrpe::p::householder<float>::seeded(64, 8);
  CHECK(std::equal(a.vector().begin(), a.vector().end(), b.vector().begin()));
  CHECK(!std::equal(a.vector().begin(), a.vector().end(), c.vector().begin()));
  const auto m = h.matrix();
  CHECK((m * m - Eigen::MatrixXd::Identity(3, 3)).cwiseAbs().maxCoeff() < 1e-15);
}

TEST_CASE("frequency schedules reproduce the published values") {
  // REFERENCE.md: e = 8, L = 16.
  const auto b = lrpe::freq::theta_b(8, 16);
  const auto c = lrpe::freq::theta_c(8, 16);
  const double b_expect[] = {0.0245437, 0.0490874, 0.0736311, 0.0981748};
  const double c_expect[] = {0.0981748, 0.0490874, 0.0327249, 0.0245437};
  for (int k = 0; k < 4; ++k) {
    CHECK(b[std::size_t(k)] == doctest::Approx(b_expect[k]).epsilon(1e-6));
    CHECK(c[std::size_t(k)] == doctest::Approx(c_expect[k]).epsilon(1e-6));
  }
  const auto a = lrpe::freq::theta_a(8);
  CHECK(a[0] == 1.0);
  CHECK(a[1] == doctest::Approx(0.1));
  CHECK(a[3] == doctest::Approx(0.001));
  const auto cp = lrpe::freq::complex_phase(4);  // 10000^(-2j/4), j = 0..3
  CHECK(cp.size() == 4);
  CHECK(cp[1] == doctest::Approx(0.01));
  // High-frequency part of a width-64 schedule for 8 pairs: θ_k = 10000^(-2k/64).
  const auto hf = lrpe::freq::rope(8, 10000, 64);
  CHECK(hf[7] == doctest::Approx(std::pow(10000.0, -14.0 / 64)));
}

TEST_CASE_TEMPLATE("partial rotation leaves the tail untouched; split-half pairs (k, k + e/2)", T, float, double) {
  const lrpe::rope_neox<T> neox(10, 10000, 4);  // rotate 4 of 10 features
  const lrpe::rope_gptj<T> gptj(10, 10000, 4);
  const auto x = ref::random_rows<T>(1, 10, 3);
  for (const auto* enc : {static_cast<const lrpe::encoder<lrpe::p::identity<T>, lrpe::lambda::rotation<T>>*>(&neox),
                          static_cast<const lrpe::encoder<lrpe::p::identity<T>, lrpe::lambda::rotation<T>>*>(&gptj)}) {
    const auto y = enc->encode(x, 123);
    for (index_t i = 4; i < 10; ++i) CHECK(y(0, i) == x(0, i));
  }
  // NeoX with e = 4: pairs (0, 2) at θ_0 = 1 and (1, 3) at θ_1 = 10000^(-1/2).
  const auto y = neox.encode(x, 5);
  const long double c = std::cos(5.0L), s = std::sin(5.0L);
  CHECK(std::abs(y(0, 0) - (x(0, 0) * c - x(0, 2) * s)) < 1e-6L);
  CHECK(std::abs(y(0, 2) - (x(0, 2) * c + x(0, 0) * s)) < 1e-6L);
}

TEST_CASE("angles: cos and sin of the exact s·θ at every int64 position (long-double reference)") {
  // detail::angle_cos_sin, the trigonometry of every rotation and phase, against ref::cis (s cut
  // into 11-bit chunks, each chunk·θ exact in long double). Stated bound: 4 double ulps of 1.
  // One rounded product fl(s·θ) is off by up to |s|·θ·2⁻⁵³; the check that it fails the bound
  // shows the test can tell the two apart.
  lrpe::generator g(ref::seed(20261123) + 1);
  std::vector<lrpe::position_t> positions = {0, 1, -1, 999'983, 1'000'000, -1'000'000, 2'147'483'647,
                                             lrpe::position_t{1} << 40, (lrpe::position_t{1} << 53) - 1,
                                             lrpe::position_t{1} << 53, (lrpe::position_t{1} << 53) + 1,
                                             -(lrpe::position_t{1} << 53) - 1, (lrpe::position_t{1} << 62) + 12'345,
                                             std::numeric_limits<lrpe::position_t>::max(),
                                             std::numeric_limits<lrpe::position_t>::min()};
  for (int i = 0; i < 200; ++i) {  // every magnitude: 2^b plus random low bits, either sign
    const auto b = 1 + static_cast<int>(g.below(62));  // 1..62
    const auto v = static_cast<lrpe::position_t>((std::uint64_t{1} << b) | (g.next() >> (64 - b)));
    positions.push_back(g.below(2) ? v : -v);
  }
  std::vector<double> theta = lrpe::freq::theta_a(64);
  for (int i = 0; i < 16; ++i) theta.push_back(std::ldexp(1.0 + g.uniform01(), -static_cast<int>(g.below(20))) * 3.0);
  const long double bound = 4 * std::numeric_limits<double>::epsilon();
  long double worst = 0, worst_rounded = 0;
  for (const auto s : positions) {
    for (const double th : theta) {
      const auto [c, sn] = lrpe::detail::angle_cos_sin(s, th);
      const ref::cld want = ref::cis(s, th);
      const long double err = std::max(std::abs(c - want.real()), std::abs(sn - want.imag()));
      if (err > bound) FAIL_CHECK("s = " << s << ", theta = " << th << ": error " << static_cast<double>(err));
      worst = std::max(worst, err);
      const double a = static_cast<double>(s) * th;  // the one-rounding angle, for contrast
      worst_rounded = std::max(worst_rounded, std::abs(std::cos(a) - want.real()));
    }
  }
  MESSAGE("max error " << static_cast<double>(worst) << "; fl(s*theta) would be off by "
                       << static_cast<double>(worst_rounded));
  CHECK(worst <= bound);
  CHECK(worst_rounded > 1e-3L);
  // The reference itself, where long double holds s·θ exactly (|s| < 2^11): the plain formula.
  for (lrpe::position_t s : {1, -7, 2047}) {
    const long double a = static_cast<long double>(s) * static_cast<long double>(theta[1]);
    CHECK(std::abs(ref::cis(s, theta[1]) - ref::cld(std::cos(a), std::sin(a))) <= 2 * std::numeric_limits<long double>::epsilon());
  }
}

// ---- a user-written Λ: works with encoder and check, and check catches a broken one ----
namespace {
template <class T>
struct quadratic_rotation {  // angle s²·θ: unitary, but NOT a relative family
  using scalar = T;
  static constexpr bool is_complex = false;
  lrpe::index_t dim() const { return 2; }
  template <class V>
  void apply(lrpe::position_t s, const V* x, V* y) const {
    const double a = 0.01 * double(s) * double(s);
    y[0] = x[0] * T(std::cos(a)) - x[1] * T(std::sin(a));
    y[1] = x[1] * T(std::cos(a)) + x[0] * T(std::sin(a));
  }
  lrpe::dense_matrix<T> matrix(lrpe::position_t s) const {
    const double a = 0.01 * double(s) * double(s);
    lrpe::dense_matrix<T> m = lrpe::dense_matrix<T>::Zero(2, 2);
    m(0, 0) = m(1, 1) = T(std::cos(a));
    m(1, 0) = T(std::sin(a));
    m(0, 1) = -m(1, 0);
    return m;
  }
};
}  // namespace

TEST_CASE("lrpe::check reports a non-relative Λ as failed, with where") {
  static_assert(lrpe::lambda_policy<quadratic_rotation<double>>);
  const lrpe::encoder<lrpe::p::identity<double>, quadratic_rotation<double>> e{lrpe::p::identity<double>(2), {}};
  CHECK(lrpe::check::unitarity(e, {0, 3, -100}).passed);  // unitary...
  const auto rep = lrpe::check::relative(e, 3, 10);        // ...but not relative
  CHECK_FALSE(rep.passed);
  CHECK(rep.max_error > 0.1);
  CHECK(rep.s == 3);
  CHECK(rep.t == 10);
  CHECK(rep.to_string().find("FAILED") != std::string::npos);
  CHECK_FALSE(lrpe::check::shift_invariance(e, 1, 4, 10).passed);
}

namespace {
/// A rotation whose matrix() is right but whose apply() scales by 1.5: encode (and attention)
/// run apply, so the encoder is neither unitary nor relative as it runs.
template <class T>
struct scaled_apply_rotation {
  using scalar = T;
  static constexpr bool is_complex = false;
  lrpe::index_t dim() const { return 2; }
  template <class V>
  void apply(lrpe::position_t s, const V* x, V* y) const {
    const double a = 0.25 * double(s);
    y[0] = T(1.5) * (x[0] * T(std::cos(a)) - x[1] * T(std::sin(a)));
    y[1] = T(1.5) * (x[1] * T(std::cos(a)) + x[0] * T(std::sin(a)));
  }
  lrpe::dense_matrix<T> matrix(lrpe::position_t s) const {
    const double a = 0.25 * double(s);
    lrpe::dense_matrix<T> m(2, 2);
    m << T(std::cos(a)), T(-std::sin(a)), T(std::sin(a)), T(std::cos(a));
    return m;
  }
};

/// Angle s·θ + 1e-3·(s mod 1024)²: unitary, relative nowhere, at small and at huge positions alike.
template <class T>
struct wobbly_rotation {
  using scalar = T;
  static constexpr bool is_complex = false;
  lrpe::index_t dim() const { return 2; }
  template <class V>
  void apply(lrpe::position_t s, const V* x, V* y) const {
    const auto [c0, s0] = lrpe::detail::angle_cos_sin(s, 0.5);
    const double w = 1e-3 * static_cast<double>(s & 1023) * static_cast<double>(s & 1023);
    const double c = c0 * std::cos(w) - s0 * std::sin(w), sn = s0 * std::cos(w) + c0 * std::sin(w);
    y[0] = x[0] * T(c) - x[1] * T(sn);
    y[1] = x[1] * T(c) + x[0] * T(sn);
  }
  lrpe::dense_matrix<T> matrix(lrpe::position_t s) const {
    const T e0[2] = {1, 0}, e1[2] = {0, 1};
    lrpe::dense_matrix<T> m(2, 2);
    T y[2];
    apply(s, e0, y);
    m(0, 0) = y[0];
    m(1, 0) = y[1];
    apply(s, e1, y);
    m(0, 1) = y[0];
    m(1, 1) = y[1];
    return m;
  }
};
}  // namespace

TEST_CASE("lrpe::check: an apply() that disagrees with matrix() fails unitarity, relative and identity_at_zero") {
  const lrpe::encoder<lrpe::p::identity<double>, scaled_apply_rotation<double>> e{lrpe::p::identity<double>(2), {}};
  const auto u = lrpe::check::unitarity(e, {0, 3, -100});
  CHECK_FALSE(u.passed);
  CHECK(u.max_error >= 0.25);  // 0.5·|cos| or 0.5·|sin| at one of the positions
  CHECK(u.to_string().find("encode_row(s) = M_s") != std::string::npos);
  const auto r = lrpe::check::relative(e, 3, 10);
  CHECK_FALSE(r.passed);
  CHECK(r.max_error >= 0.25);
  CHECK_FALSE(lrpe::check::identity_at_zero(e).passed);
  // the same rotation applied as its matrix says passes all three
  const lrpe::encoder<lrpe::p::identity<double>, lrpe::lambda::rotation<double>> good{
      lrpe::p::identity<double>(2), lrpe::lambda::rotation<double>(2, std::vector<double>{0.25})};
  CHECK(lrpe::check::unitarity(good, {0, 3, -100}).passed);
  CHECK(lrpe::check::relative(good, 3, 10).passed);
  CHECK(lrpe::check::identity_at_zero(good).passed);
}

TEST_CASE("lrpe::check: the default tolerance has no position term, so a non-relative Λ fails at huge positions too") {
  const lrpe::encoder<lrpe::p::identity<double>, wobbly_rotation<double>> e{lrpe::p::identity<double>(2), {}};
  constexpr position_t big = (position_t{1} << 50) + 500;  // off the wobble's period of 1024
  CHECK(lrpe::check::unitarity(e, {3, big, big + 3}).passed);
  CHECK_FALSE(lrpe::check::relative(e, 3, 10).passed);
  const auto far = lrpe::check::relative(e, big, big + 3);
  CHECK_FALSE(far.passed);  // with the old default (+ 8(|s|+|t|)ε ≈ 4) it passed
  CHECK(far.tolerance == lrpe::check::default_tolerance(e));
  CHECK_FALSE(lrpe::check::shift_invariance(e, 3, 10, big).passed);
  // The position term is still there to be asked for, and then accepts anything this far out.
  CHECK(lrpe::check::default_tolerance(e, big, big + 3) > 2.0);
  CHECK(lrpe::check::relative(e, big, big + 3, lrpe::check::default_tolerance(e, big, big + 3)).passed);
  // lrpe's own encoders meet the default at such positions (exact angles)
  const lrpe::rope_neox<double> rope(8);
  CHECK(lrpe::check::relative(rope, big, big + 3).passed);
  CHECK(lrpe::check::shift_invariance(rope, 3, 10, big).passed);
}

// ---- errors ----
namespace {
template <class E, class F>
void check_throws(F&& f, const char* needle) {
  try {
    f();
    FAIL("expected an exception containing '" << needle << "'");
  } catch (const E& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(msg.find(needle) != std::string::npos, msg);
    // Every lrpe exception is also an lrpe::error.
    CHECK(dynamic_cast<const lrpe::error*>(&e) != nullptr);
  }
}
}  // namespace

TEST_CASE("lrpe::check: positions at the ends of int64 and a NaN tolerance are errors, not undefined behaviour") {
  const lrpe::rope_neox<double> e(8);
  constexpr position_t lo = std::numeric_limits<position_t>::min(), hi = std::numeric_limits<position_t>::max();
  // t − s past int64: an error naming t (it used to overflow, then report a bogus failure)
  check_throws<lrpe::parameter_error>([&] { (void)lrpe::check::relative(e, lo, hi); }, "'t' must keep t - s within int64");
  check_throws<lrpe::parameter_error>([&] { (void)lrpe::check::relative(e, hi, lo); }, "'t' must keep t - s within int64");
  // the extremes themselves are fine: t − s = hi, and |INT64_MIN| in the default tolerance
  CHECK(lrpe::check::relative(e, lo, -1).passed);
  CHECK(lrpe::check::relative(e, 0, hi).passed);
  check_throws<lrpe::parameter_error>([&] { (void)lrpe::check::relative(e, -1, hi); }, "(s = -1)");
  CHECK(lrpe::check::unitarity(e, {lo, hi}).passed);
  // s + c past int64 (it used to wrap and report "passed")
  check_throws<lrpe::parameter_error>([&] { (void)lrpe::check::shift_invariance(e, hi, 0, 5); }, "'c' must keep s + c within int64");
  check_throws<lrpe::parameter_error>([&] { (void)lrpe::check::shift_invariance(e, 0, lo, -1); }, "'c' must keep t + c within int64");
  CHECK(lrpe::check::shift_invariance(e, hi - 5, 0, 5).passed);
  // a NaN tolerance is a domain error on every check (every comparison with it is false)
  check_throws<lrpe::domain_error>([&] { (void)lrpe::check::relative(e, 1, 2, std::nan("")); }, "'tol' must be a number");
  check_throws<lrpe::domain_error>([&] { (void)lrpe::check::unitarity(e, {0}, std::nan("")); }, "lrpe::check::unitarity");
  check_throws<lrpe::domain_error>([&] { (void)lrpe::check::identity_at_zero(e, std::nan("")); }, "'tol'");
  check_throws<lrpe::domain_error>([&] { (void)lrpe::check::shift_invariance(e, 1, 2, 3, 1, std::nan("")); }, "'tol'");
  // an infinite tolerance would pass everything: a parameter error on every check
  constexpr double inf = std::numeric_limits<double>::infinity();
  check_throws<lrpe::parameter_error>([&] { (void)lrpe::check::relative(e, 1, 2, inf); }, "'tol' must be finite");
  check_throws<lrpe::parameter_error>([&] { (void)lrpe::check::unitarity(e, {0}, inf); }, "lrpe::check::unitarity");
  check_throws<lrpe::parameter_error>([&] { (void)lrpe::check::identity_at_zero(e, inf); }, "'tol'");
  check_throws<lrpe::parameter_error>([&] { (void)lrpe::check::shift_invariance(e, 1, 2, 3, 1, inf); }, "'tol'");
}

TEST_CASE("every foundation error path throws the documented type with a message naming the argument") {
  using lrpe::domain_error;
  using lrpe::parameter_error;
  using lrpe::shape_error;
  // d = 0
  check_throws<shape_error>([] { lrpe::p::identity<float>(0); }, "'dim' must be >= 1; got 0");
  check_throws<shape_error>([] { lrpe::p::dct<float>(0); }, "lrpe::p::dct");
  check_throws<shape_error>([] { lrpe::p::dft<double>(-3); }, "got -3");
  check_throws<shape_error>([] { lrpe::type1<float>(0); }, "dim");
  check_throws<shape_error>([] { lrpe::rope_gptj<float>(1); }, "'d' must be >= 2 (RoPE rotates pairs of features); got 1");
  check_throws<shape_error>([] { lrpe::rope_neox<double>(0); }, "'d' must be >= 2");
  // Householder: zero, non-finite, empty
  check_throws<parameter_error>([] { lrpe::p::householder<float>(std::vector<float>{0, 0, 0}); }, "'v' must be a nonzero vector");
  // tiny and huge vectors are valid (Σ v² underflowed to 0 and overflowed to inf before)
  for (double m : {1e-170, 4.9e-324, 1e155, 1.7e308}) {
    CAPTURE(m);
    const lrpe::p::householder<double> h(std::vector<double>{m, -m, 0});
    const auto u = h.vector();
    CHECK(std::abs(u[0] - 1 / std::sqrt(2.0)) <= 2 * std::numeric_limits<double>::epsilon());
    CHECK(std::abs(u[1] + 1 / std::sqrt(2.0)) <= 2 * std::numeric_limits<double>::epsilon());
    CHECK(u[2] == 0);
  }
  check_throws<domain_error>([] { lrpe::p::householder<double>(std::vector<double>{1, std::nan(""), 0}); }, "'v' must be finite");
  check_throws<domain_error>([] { lrpe::p::householder<double>(std::vector<double>{1, HUGE_VAL}); }, "at index 1");
  check_throws<shape_error>([] { lrpe::p::householder<double>(std::vector<double>{}); }, "v.size()");
  // Permutations: not a bijection, out of range
  check_throws<parameter_error>([] { lrpe::p::permutation<float>(std::vector<index_t>{0, 1, 1}); }, "bijection");
  check_throws<parameter_error>([] { lrpe::p::permutation<float>(std::vector<index_t>{0, 3, 1}); }, "got 3 at index 1");
  check_throws<parameter_error>([] { lrpe::lambda::permutation_power<float>(std::vector<index_t>{-1, 0}); }, "permutation of 0..1");
  {  // power(s, j) reads the cycle tables at j: j outside [0, d) read past them
    const lrpe::lambda::permutation_power<float> pp(std::vector<index_t>{1, 2, 0});
    CHECK(pp.power(1, 0) == 1);
    CHECK(pp.power(-1, 0) == 2);
    check_throws<shape_error>([&] { (void)pp.power(1, 3); }, "argument 'j' must be in [0, dim() = 3); got 3");
    check_throws<shape_error>([&] { (void)pp.power(1, -1); }, "got -1");
  }
  // Dense P: not square, not unitary, not finite
  check_throws<shape_error>([] { lrpe::p::dense<double>(Eigen::MatrixXd::Identity(3, 2)); }, "must be square; got 3x2");
  check_throws<parameter_error>([] { lrpe::p::dense<double>(2 * Eigen::MatrixXd::Identity(3, 3)); }, "must be unitary");
  check_throws<domain_error>([] {
    Eigen::MatrixXd m = Eigen::MatrixXd::Identity(2, 2);
    m(0, 1) = std::nan("");
    lrpe::p::dense<double>{m};
  }, "'m' must be finite; got nan at (0, 1)");
  check_throws<domain_error>([] {
    Eigen::MatrixXcd m = Eigen::MatrixXcd::Identity(2, 2);
    m(1, 0) = std::complex<double>(0, INFINITY);
    lrpe::p::dense<std::complex<double>>{m};
  }, "at (1, 0)");
  // complex_phase(0) and type8(0) name 'dim' (they named freq::complex_phase's 'features')
  check_throws<shape_error>([] { lrpe::lambda::complex_phase<float>(0); }, "lrpe::lambda::complex_phase: argument 'dim'");
  check_throws<shape_error>([] { lrpe::type8<float>(0); }, "argument 'dim'");
  // type3 from a given v names 'v.size()' (it named the preset's 'dim', which the caller never passed)
  check_throws<shape_error>([] { lrpe::type3<float>(std::vector<float>{}); }, "argument 'v.size()'");
  check_throws<shape_error>([] { lrpe::type3<double>(std::vector<double>{1.0}); }, "argument 'v.size()' must be >= 2");
  check_throws<shape_error>([] { lrpe::type3<float>(0); }, "argument 'dim'");
  // Dense P's tolerance: a NaN names 'tol' (not 'm'); an infinite one would accept any matrix
  check_throws<domain_error>([] { lrpe::p::dense<double>(Eigen::MatrixXd::Identity(3, 3), std::nan("")); }, "'tol' must be a number");
  check_throws<parameter_error>([] { lrpe::p::dense<double>(Eigen::MatrixXd::Ones(3, 3), INFINITY); }, "'tol' must be finite");
  // The generator: an empty range, a negative size
  check_throws<parameter_error>([] { (void)lrpe::generator(1).below(0); }, "lrpe::generator::below: argument 'n' must be >= 1; got 0");
  check_throws<parameter_error>([] { (void)lrpe::generator(1).permutation(-1); }, "'d' must be >= 0; got -1");
  CHECK(lrpe::generator(1).permutation(0).empty());
  // Rotation: width, odd, frequencies
  check_throws<shape_error>([] { lrpe::lambda::rotation<float>(4, std::vector<double>{1, 2, 3}); }, "theta.size()");
  check_throws<shape_error>([] { lrpe::lambda::rotation<float>(4, std::vector<double>{}); }, "theta.size()");
  check_throws<domain_error>([] { lrpe::lambda::rotation<float>(4, std::vector<double>{1, INFINITY}); }, "'theta' must be finite");
  // a finite θ whose s·θ overflows at some int64 position (it gave NaN features silently)
  check_throws<parameter_error>([] { lrpe::lambda::rotation<float>(4, std::vector<double>{1, 1e300}); },
                                "'theta' must have |theta| < 2^960");
  check_throws<parameter_error>([] { lrpe::lambda::complex_phase<double>(2, std::vector<double>{-0x1p960}); }, "at index 0");
  check_throws<parameter_error>([] { (void)lrpe::freq::user(std::vector<double>{0.5, 0x1p961}); }, "at index 1");
  {  // the largest allowed θ gives finite features at both ends of int64
    const lrpe::lambda::rotation<double> r(2, std::vector<double>{std::nextafter(0x1p960, 0.0)});
    const double x[2] = {1, 0};
    double y[2];
    for (position_t s : {std::numeric_limits<position_t>::min(), std::numeric_limits<position_t>::max()}) {
      r.apply(s, x, y);
      CHECK(std::isfinite(y[0]));
      CHECK(std::isfinite(y[1]));
      CHECK(std::abs(y[0] * y[0] + y[1] * y[1] - 1) <= 4 * std::numeric_limits<double>::epsilon());
    }
  }
  // lrpe::exact_cos_sin is the library's exact angle: at s = 2^62 + 1 it differs from fl(s·θ)'s
  {
    const position_t s = (position_t{1} << 62) + 1;
    const auto [c, sn] = lrpe::exact_cos_sin(s, 0.5);
    const auto ref_cs = lrpe::detail::angle_cos_sin(s, 0.5);
    CHECK(c == ref_cs.c);
    CHECK(sn == ref_cs.s);
    // s·0.5 = 2^61 + 0.5 exactly: cos of it from cos(2^61) and cos/sin(0.5) (angle addition in long double)
    const long double a = std::cos(static_cast<long double>(0x1p61)), b = std::sin(static_cast<long double>(0x1p61));
    const long double want = a * std::cos(0.5L) - b * std::sin(0.5L);
    CHECK(std::abs(static_cast<long double>(c) - want) <= 1e-15L);
  }
  check_throws<shape_error>([] { lrpe::rope_neox<float>(64, 10000, 7); }, "'rotary_dim' must be even");
  check_throws<shape_error>([] { lrpe::rope_neox<float>(64, 10000, 66); }, "got 66");
  check_throws<shape_error>([] { lrpe::freq::theta_a(5); }, "'rotated_dim' must be even");
  check_throws<parameter_error>([] { lrpe::freq::theta_b(8, 0); }, "'length' must be > 0");
  check_throws<domain_error>([] { lrpe::freq::theta_c(8, std::nan("")); }, "'length' must be finite");
  check_throws<parameter_error>([] { lrpe::freq::rope(4, 1.0); }, "'base' must be > 1");
  check_throws<shape_error>([] { lrpe::freq::rope(0); }, "'pairs' must be >= 1");
  check_throws<shape_error>([] { lrpe::lambda::complex_phase<float>(4, std::vector<double>(5, 1.0)); }, "theta.size()");
  // Encoder: mismatched widths and block shapes
  check_throws<shape_error>([] {
    lrpe::encoder<lrpe::p::identity<float>, lrpe::lambda::rotation<float>>(lrpe::p::identity<float>(8), lrpe::lambda::rotation<float>(6));
  }, "'lambda.dim()' must equal p.dim() = 8; got 6");
  const lrpe::type8<float> e8(8);
  lrpe::row_matrix<float> x(3, 8), bad_x(3, 7), out(3, 8);
  check_throws<shape_error>([&] { e8.encode(lrpe::view(std::as_const(bad_x)), 0, lrpe::view(out)); }, "'x.cols' must equal dim() = 8; got 7");
  check_throws<shape_error>([&] { e8.encode(lrpe::view(std::as_const(x)), 0, lrpe::view(out)); }, "'out.cols' must equal feature_dim() = 16; got 8");
  const std::vector<position_t> two{1, 2};
  check_throws<shape_error>([&] { (void)e8.encode(x, two); }, "'positions' must have size 3; got 2");
  check_throws<shape_error>([&] { (void)e8.encode(bad_x, 0); }, "x.cols");
}
