// SPDX-License-Identifier: MIT
// The encoders' backward (encoder::backward, encode_backward, encode_qk_backward) and
// lrpe::check::gradient: dL/dx against the long-double reference matrices of tests/reference.hpp
// (built from the policies' parameters, never from the library's apply or matrix), every
// parameter gradient against central differences of a long-double loss on those matrices, the
// raw gradient of a dense P, accumulation, in-place use, extreme positions and bad input.
#include "gradient_helpers.hpp"
#include "reference.hpp"

#include <doctest/doctest.h>

#include <limits>
#include <string>
#include <vector>

using lrpe::index_t;
using lrpe::position_t;
using ref::cld;
using ref::ld;

namespace {

using grad_test::cvec;
using grad_test::derivative;
using grad_test::householder_from;
using grad_test::native;
using grad_test::relative_error;
using grad_test::uniform;

constexpr position_t int64_max = std::numeric_limits<position_t>::max();
constexpr position_t int64_min = std::numeric_limits<position_t>::min();

/// Positions for the finite differences: near 0, negative and far (Λ's step shrinks with |s|).
const std::vector<position_t> fd_positions{0, 1, -5, 17, 1'000'003, -3'000'000'000LL};

/// L = Σ_i Re(g_iᴴ Λ(s_i) P x_i) in long double, from the reference Λ(s) and P as matrices.
template <class LofS, class T>
ld loss(const LofS& lambda_of_s, const ref::mat& p, const std::vector<position_t>& pos, const lrpe::row_matrix<T>& x,
        const std::vector<cvec>& g) {
  ld acc = 0;
  for (std::size_t i = 0; i < pos.size(); ++i) {
    const cvec px = p * x.row(index_t(i)).transpose().template cast<cld>();
    acc += (g[i].adjoint() * (lambda_of_s(pos[i]) * px))(0, 0).real();
  }
  return acc;
}

/// Tolerance on gradients computed in T against the long-double references.
template <class T>
ld grad_tol() {
  return sizeof(T) < sizeof(double) ? 2e-5L : 1e-11L;
}

/// dx and (with `parameters`) the parameter gradients of `e` at `pos` against the references
/// (see the file comment).
template <class E>
void check_against_reference(const E& e, const std::vector<position_t>& pos, std::uint64_t seed,
                             bool parameters = true) {
  using T = typename E::scalar;
  const auto n = index_t(pos.size());
  const auto x = uniform<T>(n, e.dim(), seed);
  const auto g = uniform<T>(n, e.feature_dim(), seed + 1);
  lrpe::row_matrix<T> dx(n, e.dim());
  auto grad = e.make_gradient();
  e.backward(lrpe::view(x), pos, lrpe::view(g), lrpe::view(dx), &grad);

  std::vector<cvec> gz;
  for (index_t i = 0; i < n; ++i) gz.push_back(native(e, g, i));
  // dL/dx_i = Re(M_sᴴ g_i).
  for (index_t i = 0; i < n; ++i) {
    const auto want = (ref::M(e, pos[std::size_t(i)]).adjoint() * gz[std::size_t(i)]).eval();
    ld scale = 0, err = 0;
    for (index_t k = 0; k < e.dim(); ++k) {
      scale = std::max(scale, std::abs(want(k).real()));
      err = std::max(err, std::abs(ld(dx(i, k)) - want(k).real()));
    }
    CAPTURE(pos[std::size_t(i)]);
    CHECK(err <= 16 * ld(e.dim()) * std::numeric_limits<T>::epsilon() * std::max(scale, ld(1)));
  }
  using P = typename E::p_type;
  using L = typename E::lambda_type;
  if (!parameters) return;
  if constexpr (lrpe::has_parameters<L>) {
    double far = 1;
    for (position_t s : pos) far = std::max(far, std::abs(double(s)));
    const auto theta = e.lambda().parameters();
    const ref::mat p = ref::P(e.p());
    std::vector<ld> want(theta.size());
    for (std::size_t j = 0; j < theta.size(); ++j) {
      want[j] = derivative(theta, j, 1e-4 / far, [&](const std::vector<double>& w) {
        const L l = e.lambda().with_parameters(w);
        return loss([&](position_t s) { return ref::Lambda(l, s); }, p, pos, x, gz);
      });
    }
    CHECK(relative_error(grad.lambda, want) <= grad_tol<T>());
  }
  if constexpr (std::is_same_v<P, lrpe::p::householder<T>>) {
    const auto v = e.p().parameters();  // ‖v‖·u, the vector the gradient is taken against
    std::vector<ref::mat> lambdas;
    for (position_t s : pos) lambdas.push_back(ref::Lambda(e.lambda(), s));
    const auto lambda_at = [&](position_t s) -> const ref::mat& {
      return lambdas[std::size_t(std::find(pos.begin(), pos.end(), s) - pos.begin())];
    };
    std::vector<ld> want(v.size());
    for (std::size_t j = 0; j < v.size(); ++j) {
      want[j] = derivative(v, j, 1e-4 * e.p().input_norm(), [&](const std::vector<double>& w) {
        return loss(lambda_at, householder_from(w), pos, x, gz);
      });
    }
    CHECK(relative_error(grad.p, want) <= grad_tol<T>());
  }
}

/// A preset through its encoder<P, Λ> base (presets sharing one are compiled once), against the
/// references and with the library's own check.
template <class P, class L>
void check_preset(const lrpe::encoder<P, L>& e, std::uint64_t seed) {
  // the long-double finite differences at d = 6 and 9 (at 64 they cost a minute under ASan at -O0);
  // d = 64 (the DFT's FFT path) has its dx against the reference and the library's own check
  check_against_reference(e, fd_positions, seed, e.dim() < 64);
  const auto r = lrpe::check::gradient(e, fd_positions, 7);
  CHECK_MESSAGE(r.passed, r.to_string());
}

}  // namespace

#define LRPE_PRESETS(T)                                                                    \
  lrpe::type1<T>, lrpe::type2<T>, lrpe::type3<T>, lrpe::type4<T>, lrpe::type5<T>,          \
      lrpe::type6<T>, lrpe::type7<T>, lrpe::type8<T>, lrpe::rope_gptj<T>, lrpe::rope_neox<T>, \
      lrpe::permuteformer<T>, lrpe::mixed<T>

TEST_CASE_TEMPLATE("encoder backward: every preset's dx and parameter gradients against long-double references",
                   E, LRPE_PRESETS(float), LRPE_PRESETS(double)) {
  for (index_t d : {6, 9, 64}) {  // even, odd, and a DFT above the dense limit (FFT path)
    CAPTURE(d);
    check_preset(E(d), ref::seed(20261127) + std::uint64_t(d));
  }
}

TEST_CASE_TEMPLATE("encoder backward: policy pairs beyond the presets (complex Λ after real P, real Λ after "
                   "complex P, DCT, scaled Householder vector)", T, float, double) {
  using namespace lrpe;
  const auto v = std::vector<T>{T(3.5), T(-1.25), T(0.5), T(7), T(-2), T(0.75), T(1)};  // ‖v‖ ≈ 8.3
  const encoder<p::householder<T>, lambda::complex_phase<T>> hc(p::householder<T>(v), lambda::complex_phase<T>(7));
  const encoder<p::dft<T>, lambda::rotation<T>> dr(p::dft<T>(6), lambda::rotation<T>(6, pairing::split_half));
  const encoder<p::dct<T>, lambda::rotation<T>> cr(p::dct<T>(8), lambda::rotation<T>(8, {0.5, 0.25, 0.125}));
  const encoder<p::identity<T>, lambda::complex_phase<T>> cosine(p::identity<T>(5), lambda::complex_phase<T>(5, {1.0, 0.1, 0.01}));
  CHECK(hc.p().input_norm() == doctest::Approx(std::sqrt(68.625)).epsilon(1e-6));
  check_against_reference(hc, fd_positions, 11);
  check_against_reference(dr, fd_positions, 12);
  check_against_reference(cr, fd_positions, 13);
  check_against_reference(cosine, fd_positions, 14);
  for (const auto& r : {check::gradient(hc, fd_positions), check::gradient(dr, fd_positions),
                        check::gradient(cr, fd_positions), check::gradient(cosine, fd_positions)})
    CHECK_MESSAGE(r.passed, r.to_string());
}

TEST_CASE_TEMPLATE("encoder backward: a dense P's raw gradient gy·xᵀ against central differences of the "
                   "unconstrained bilinear form", S, float, double, std::complex<float>, std::complex<double>) {
  using T = lrpe::real_t<S>;
  const index_t d = 5;
  // A unitary m without structure: a Householder reflection times a DFT (complex S) or a
  // permutation (real S).
  const auto h = lrpe::p::householder<T>::seeded(d, ref::seed(20261127) + 99).matrix();
  lrpe::dense_matrix<S> q;
  if constexpr (lrpe::is_complex_v<S>) q = h.template cast<S>() * lrpe::p::dft<T>(d).matrix();
  else q = h * lrpe::p::permutation<T>(std::vector<index_t>{2, 0, 4, 1, 3}).matrix();
  const lrpe::encoder<lrpe::p::dense<S>, lrpe::lambda::rotation<T>> e{lrpe::p::dense<S>(q), lrpe::lambda::rotation<T>(d)};
  const std::vector<position_t> pos{0, 3, -8, 100000};
  const auto n = index_t(pos.size());
  const auto x = uniform<T>(n, d, 5);
  const auto g = uniform<T>(n, e.feature_dim(), 6);
  lrpe::row_matrix<T> dx(n, d);
  auto grad = e.make_gradient();
  e.backward(lrpe::view(x), pos, lrpe::view(g), lrpe::view(dx), &grad);
  REQUIRE(grad.p.size() == std::size_t((lrpe::is_complex_v<S> ? 2 : 1) * d * d));

  std::vector<cvec> gz;
  for (index_t i = 0; i < n; ++i) gz.push_back(native(e, g, i));
  // The parameters: P's entries, (re, im) pairs for a complex P, perturbed without re-projection.
  std::vector<double> w;
  for (index_t i = 0; i < d; ++i)
    for (index_t j = 0; j < d; ++j) {
      const auto z = std::complex<double>(e.p().matrix()(i, j));
      w.push_back(z.real());
      if constexpr (lrpe::is_complex_v<S>) w.push_back(z.imag());
    }
  const index_t per = lrpe::is_complex_v<S> ? 2 : 1;
  std::vector<ld> want(w.size());
  for (std::size_t j = 0; j < w.size(); ++j) {
    want[j] = derivative(w, j, 1e-3, [&](const std::vector<double>& p) {
      ref::mat m(d, d);
      for (index_t r = 0; r < d; ++r)
        for (index_t c = 0; c < d; ++c)
          m(r, c) = per == 2 ? cld(p[std::size_t(2 * (r * d + c))], p[std::size_t(2 * (r * d + c) + 1)])
                             : cld(p[std::size_t(r * d + c)], 0);
      return loss([&](position_t s) { return ref::Lambda(e.lambda(), s); }, m, pos, x, gz);
    });
  }
  CHECK(relative_error(grad.p, want) <= grad_tol<T>());
}

TEST_CASE_TEMPLATE("encoder backward: gradients accumulate, a null gradient gives the same dx, dx may be x, and "
                   "the extreme positions ±2^63 are exact", T, float, double) {
  const lrpe::type3<T> e(8);
  const std::vector<position_t> pos{int64_min, int64_max, int64_min + 1, -1, 0, 2};
  const auto x = uniform<T>(6, 8, 21), g = uniform<T>(6, 8, 22);
  lrpe::row_matrix<T> dx1(6, 8), dx2(6, 8);
  auto once = e.make_gradient(), twice = e.make_gradient();
  e.backward(lrpe::view(x), pos, lrpe::view(g), lrpe::view(dx1), &once);
  e.backward(lrpe::view(x), pos, lrpe::view(g), lrpe::view(dx1), &twice);
  e.backward(lrpe::view(x), pos, lrpe::view(g), lrpe::view(dx2), &twice);
  // Added to, row by row: twice the sum up to the rounding of the additions.
  const auto twice_once = [](const std::vector<double>& two, const std::vector<double>& one) {
    double scale = 0;
    for (double v : one) scale = std::max(scale, std::abs(v));
    for (std::size_t j = 0; j < one.size(); ++j) CHECK(std::abs(two[j] - 2 * one[j]) <= 1e-14 * scale);
  };
  twice_once(twice.lambda, once.lambda);
  twice_once(twice.p, once.p);
  e.backward(lrpe::view(x), pos, lrpe::view(g), lrpe::view(dx2), nullptr);
  CHECK(dx1 == dx2);
  lrpe::row_matrix<T> inplace = x;
  e.backward(lrpe::view(std::as_const(inplace)), pos, lrpe::view(g), lrpe::view(inplace), nullptr);
  CHECK(inplace == dx1);
  twice.zero();
  CHECK(std::all_of(twice.lambda.begin(), twice.lambda.end(), [](double v) { return v == 0; }));
  // dx at ±2^63 against the reference matrices (Λ⁽⁻ˢ⁾ at s = −2^63 is Λ⁽¹⁾Λ⁽²⁶³⁻¹⁾).
  for (index_t i = 0; i < 6; ++i) {
    const auto want = (ref::M(e, pos[std::size_t(i)]).adjoint() * native(e, g, i)).eval();
    for (index_t k = 0; k < 8; ++k)
      CHECK(std::abs(ld(dx1(i, k)) - want(k).real()) <= 64 * std::numeric_limits<T>::epsilon());
  }
  // Λ's finite differences need a step: at |s| = 2^63 there is none, and the check says so.
  CHECK_THROWS_AS(lrpe::check::gradient(e, {int64_max}), lrpe::parameter_error);
  CHECK(lrpe::check::gradient(lrpe::type7<T>(8), {int64_max, int64_min}).passed);  // no Λ parameters
}

namespace {

/// A user Λ: rotation with a gradient that forgets the factor s — `check::gradient` must catch it.
template <class T>
struct forgetful_rotation : lrpe::lambda::rotation<T> {
  using base = lrpe::lambda::rotation<T>;
  using base::base;
  explicit forgetful_rotation(base b) : base(std::move(b)) {}
  forgetful_rotation with_parameters(std::span<const double> w) const { return forgetful_rotation(base::with_parameters(w)); }
  template <class V>
  void accumulate_gradient(lrpe::position_t, const V* y, const V* gy, double* grad) const noexcept {
    base::accumulate_gradient(1, y, gy, grad);
  }
};

/// A user Λ with no parameters: backward gives dx only.
template <class T>
struct swap_halves {
  using scalar = T;
  static constexpr bool is_complex = false;
  index_t d;
  [[nodiscard]] index_t dim() const noexcept { return d; }
  void apply(position_t s, const T* x, T* y) const noexcept {
    const bool odd = (s % 2) != 0;
    for (index_t i = 0; i < d; ++i) y[i] = odd ? x[(i + d / 2) % d] : x[i];
  }
  [[nodiscard]] lrpe::dense_matrix<T> matrix(position_t s) const {
    lrpe::dense_matrix<T> m = lrpe::dense_matrix<T>::Zero(d, d);
    for (index_t i = 0; i < d; ++i) m(i, (s % 2) != 0 ? (i + d / 2) % d : i) = 1;
    return m;
  }
};

}  // namespace

TEST_CASE("check::gradient fails a wrong user gradient and passes a user policy without parameters") {
  using namespace lrpe;
  const encoder<p::identity<double>, forgetful_rotation<double>> bad(p::identity<double>(6), forgetful_rotation<double>(6));
  const auto r = check::gradient(bad, {0, 3, -5, 40});
  CHECK_FALSE(r.passed);
  CHECK(r.property.find("Lambda") != std::string::npos);
  CHECK(r.max_error > 0.1);
  // Where every position is 1 the forgotten factor does not matter: the check passes.
  CHECK(check::gradient(bad, {1, 1, 1}).passed);

  const encoder<p::householder<double>, swap_halves<double>> user(p::householder<double>::seeded(6, 3), swap_halves<double>{6});
  const auto u = check::gradient(user, {0, 1, -7, 12});
  CHECK_MESSAGE(u.passed, u.to_string());
  CHECK(user.lambda_parameter_count() == 0);
  CHECK(user.p_parameter_count() == 6);
}

TEST_CASE("encode_qk_backward: per-head dq, dk and the parameter gradient summed over Q, K, batch and heads") {
  using T = double;
  const lrpe::type2<T> e(8);
  const index_t B = 2, H = 3, nq = 4, nk = 5, d = 8;
  std::vector<T> q(std::size_t(B * H * nq * d)), k(std::size_t(B * H * nk * d)), gq(q.size()), gk(k.size()),
      dq(q.size()), dk(k.size());
  lrpe::generator rng(31);
  for (auto* buf : {&q, &k, &gq, &gk})
    for (auto& v : *buf) v = 2 * rng.uniform01() - 1;
  const auto qv = lrpe::bnsh(std::as_const(q).data(), B, H, nq, d), kv = lrpe::bnsh(std::as_const(k).data(), B, H, nk, d);
  const auto gqv = lrpe::bnsh(std::as_const(gq).data(), B, H, nq, d), gkv = lrpe::bnsh(std::as_const(gk).data(), B, H, nk, d);
  auto grad = e.make_gradient();
  lrpe::encode_qk_backward(lrpe::backend::reference{}, e, qv, 7, kv, -2, gqv, gkv, lrpe::bnsh(dq.data(), B, H, nq, d),
                           lrpe::bnsh(dk.data(), B, H, nk, d), &grad);
  auto sum = e.make_gradient();
  lrpe::row_matrix<T> one(nq, d), onek(nk, d);
  for (index_t b = 0; b < B; ++b)
    for (index_t h = 0; h < H; ++h) {
      lrpe::encode_backward(lrpe::backend::reference{}, e, qv.head(b, h), 7, gqv.head(b, h), lrpe::view(one), &sum);
      for (index_t i = 0; i < nq; ++i)
        for (index_t j = 0; j < d; ++j) CHECK(one(i, j) == dq[std::size_t(((b * H + h) * nq + i) * d + j)]);
    }
  for (index_t b = 0; b < B; ++b)
    for (index_t h = 0; h < H; ++h) {
      lrpe::encode_backward(lrpe::backend::reference{}, e, kv.head(b, h), -2, gkv.head(b, h), lrpe::view(onek), &sum);
      for (index_t i = 0; i < nk; ++i)
        for (index_t j = 0; j < d; ++j) CHECK(onek(i, j) == dk[std::size_t(((b * H + h) * nk + i) * d + j)]);
    }
  CHECK(sum.lambda == grad.lambda);
  CHECK(sum.p == grad.p);
}

TEST_CASE("encoder backward: bad input is a clear error naming the argument") {
  const lrpe::type8<double> e(4);  // feature_dim 8
  lrpe::row_matrix<double> x(3, 4), g(3, 8), dx(3, 4), short_g(2, 8), narrow_g(3, 4);
  x.setZero();
  g.setZero();
  const auto message = [&](auto&& f) {
    try {
      f();
    } catch (const lrpe::shape_error& err) {
      return std::string(err.what());
    }
    return std::string("no error");
  };
  CHECK(message([&] { e.backward(lrpe::view(x), 0, lrpe::view(narrow_g), lrpe::view(dx)); }).find("d_out.cols") != std::string::npos);
  CHECK(message([&] { e.backward(lrpe::view(x), 0, lrpe::view(short_g), lrpe::view(dx)); }).find("d_out.rows") != std::string::npos);
  lrpe::row_matrix<double> wide(3, 5);
  CHECK(message([&] { e.backward(lrpe::view(x), 0, lrpe::view(g), lrpe::view(wide)); }).find("dx.cols") != std::string::npos);
  lrpe::encoder_gradient wrong{{}, {1.0}};
  CHECK(message([&] { e.backward(lrpe::view(x), 0, lrpe::view(g), lrpe::view(dx), &wrong); }).find("grad->lambda.size()") !=
        std::string::npos);
  const std::vector<position_t> two{1, 2};
  CHECK(message([&] { e.backward(lrpe::view(x), two, lrpe::view(g), lrpe::view(dx)); }) != "no error");
  CHECK_THROWS_AS(lrpe::check::gradient(e, std::span<const position_t>{}), lrpe::shape_error);
  CHECK_THROWS_AS(lrpe::check::gradient(e, {1, 2}, 1, std::nan("")), lrpe::domain_error);
  CHECK_THROWS_AS(lrpe::check::gradient(e, {1, 2}, 1, -1, std::numeric_limits<double>::infinity()), lrpe::domain_error);
}
