// SPDX-License-Identifier: MIT
// Absolute position encodings (lrpe/absolute/): sinusoidal tables in both conventions against
// long-double formulas and published values, exact angles far from 0 (angle addition), real
// positions, the Universal Transformer's position + step, CAPE's augmentations (their ranges and
// structure, reproducible from a seed), learned and axial tables with their gradients against
// finite differences, and bad input.
#include <doctest/doctest.h>

#include <lrpe/absolute/learned.hpp>
#include <lrpe/absolute/sinusoidal.hpp>

#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace {
using lrpe::index_t;
using lrpe::position_t;
namespace ab = lrpe::absolute;
using rows = lrpe::row_matrix<double>;
using ld = long double;

/// The convention's row at position p in long double (p·ω exact in long double for p < 2^11).
std::vector<ld> sinusoid_ld(position_t p, index_t d, ab::sinusoid_convention c, double base) {
  std::vector<ld> out(static_cast<std::size_t>(d));
  const index_t half = d / 2;
  for (index_t i = 0; i < half; ++i) {
    const double w = c == ab::sinusoid_convention::vaswani ? std::pow(base, -2.0 * double(i) / double(d))
                                                           : std::pow(base, -double(i) / double(std::max<index_t>(half - 1, 1)));
    const ld a = ld(p) * ld(w);
    if (c == ab::sinusoid_convention::vaswani) {
      out[std::size_t(2 * i)] = std::sin(a);
      out[std::size_t(2 * i + 1)] = std::cos(a);
    } else {
      out[std::size_t(i)] = std::sin(a);
      out[std::size_t(half + i)] = std::cos(a);
    }
  }
  return out;
}
}  // namespace

TEST_CASE("sinusoidal: both conventions against long double, and published values") {
  for (const auto c : {ab::sinusoid_convention::vaswani, ab::sinusoid_convention::tensor2tensor}) {
    for (const index_t d : {2, 4, 16, 64}) {
      const ab::sinusoidal_options o{c, 10000.0};
      const rows pe = ab::sinusoidal(40, d, o, 1000);  // positions 1000 … 1039
      for (index_t i = 0; i < pe.rows(); ++i) {
        const auto want = sinusoid_ld(1000 + i, d, c, 10000.0);
        for (index_t j = 0; j < d; ++j) CHECK(std::abs(ld(pe(i, j)) - want[std::size_t(j)]) <= 4e-16L);
      }
    }
  }
  // "Attention is all you need", d = 4, position 1: sin 1, cos 1, sin 0.01, cos 0.01
  const rows v = ab::sinusoidal(2, 4);
  CHECK(v(0, 0) == 0.0);
  CHECK(v(0, 1) == 1.0);
  CHECK(v(1, 0) == doctest::Approx(0.8414709848078965).epsilon(1e-15));
  CHECK(v(1, 1) == doctest::Approx(0.5403023058681398).epsilon(1e-15));
  CHECK(v(1, 2) == doctest::Approx(0.009999833334166664).epsilon(1e-15));
  CHECK(v(1, 3) == doctest::Approx(0.9999500004166653).epsilon(1e-15));
  // tensor2tensor, d = 6: ω = 1, 0.01, 1e-4 (base^(−i/2)); halves [sin | cos]
  const rows t = ab::sinusoidal(2, 6, {ab::sinusoid_convention::tensor2tensor, 10000.0});
  CHECK(t(1, 1) == doctest::Approx(std::sin(0.01)).epsilon(1e-15));
  CHECK(t(1, 5) == doctest::Approx(std::cos(1e-4)).epsilon(1e-15));
  // float rows are the double rows rounded once
  const lrpe::row_matrix<float> f = ab::sinusoidal<float>(8, 16, {}, 5);
  CHECK(f == ab::sinusoidal<double>(8, 16, {}, 5).cast<float>());
}

TEST_CASE("sinusoidal: exact angles, so angle addition holds far from 0 (a rounded product fails it)") {
  const index_t d = 32;
  for (const position_t p : {position_t(1) << 40, (position_t(1) << 62) + 12345}) {
    const std::vector<position_t> at{p, 3, p + 3};
    const rows pe = ab::sinusoidal(3, d, {}, at);
    for (index_t i = 0; i < d / 2; ++i) {
      const double sp = pe(0, 2 * i), cp = pe(0, 2 * i + 1), sq = pe(1, 2 * i), cq = pe(1, 2 * i + 1);
      CHECK(std::abs(pe(2, 2 * i) - (sp * cq + cp * sq)) <= 1e-14);
      CHECK(std::abs(pe(2, 2 * i + 1) - (cp * cq - sp * sq)) <= 1e-14);
    }
  }
  // real positions: integer ones agree with the integer path; a half step is the half angle
  const std::vector<double> x{0.0, 7.0, 1e6, -3.0};
  const rows at_real = ab::sinusoidal_at(x, 8);
  const std::vector<position_t> xi{0, 7, 1000000, -3};
  CHECK((at_real - ab::sinusoidal(4, 8, {}, xi)).cwiseAbs().maxCoeff() <= 1e-15);
  const std::vector<double> half{0.5};
  CHECK(ab::sinusoidal_at(half, 2)(0, 0) == doctest::Approx(std::sin(0.5)).epsilon(1e-15));
}

TEST_CASE("Universal Transformer: the position signal plus the step signal (tensor2tensor's)") {
  const rows ut = ab::position_and_step(5, 8, 3);
  const ab::sinusoidal_options t2t{ab::sinusoid_convention::tensor2tensor, 10000.0};
  const rows pos = ab::sinusoidal(5, 8, t2t), step = ab::sinusoidal(1, 8, t2t, 3);
  for (index_t i = 0; i < 5; ++i) CHECK(ut.row(i) == pos.row(i) + step.row(0));
  CHECK_THROWS_AS((void)ab::position_and_step(5, 8, -1), lrpe::parameter_error);
}

TEST_CASE("CAPE: x_i = lambda (p_i + global + local_i); each augmentation within its range, seeded") {
  const index_t n = 50;
  ab::cape_options o;
  o.training = false;
  o.pos_scale = 0.5;
  const auto eval = ab::cape_positions(n, o);
  for (index_t i = 0; i < n; ++i) CHECK(eval[std::size_t(i)] == 0.5 * double(i));
  o.normalize = true;
  const auto centred = ab::cape_positions(n, o);
  double mean = 0;
  for (double x : centred) mean += x / double(n);
  CHECK(std::abs(mean) <= 1e-12);
  bool positive = false, negative = false;
  for (std::uint64_t seed = 0; seed < 40; ++seed) {
    ab::cape_options g;
    g.max_global_shift = 5;
    g.seed = seed;
    const auto x = ab::cape_positions(n, g);  // one shift: differences kept exactly
    const double delta = x[0];
    CHECK(std::abs(delta) <= 5);
    positive = positive || delta > 0;
    negative = negative || delta < 0;
    for (index_t i = 1; i < n; ++i) CHECK(x[std::size_t(i)] - double(i) == doctest::Approx(delta).epsilon(1e-12));
    ab::cape_options l;
    l.max_local_shift = 0.5;
    l.seed = seed;
    const auto y = ab::cape_positions(n, l);
    for (index_t i = 0; i < n; ++i) CHECK(std::abs(y[std::size_t(i)] - double(i)) <= 0.25);
    ab::cape_options s;
    s.max_global_scaling = 2;
    s.seed = seed;
    const auto z = ab::cape_positions(n, s);  // one scale λ ∈ [1/2, 2]
    const double lambda = z[1];
    CHECK((lambda >= 0.5 && lambda <= 2));
    for (index_t i = 1; i < n; ++i) CHECK(z[std::size_t(i)] == doctest::Approx(lambda * double(i)).epsilon(1e-12));
    CHECK(ab::cape_positions(n, s) == z);  // reproducible from the seed
  }
  CHECK((positive && negative));
  ab::cape_options bad;
  bad.max_global_scaling = 0.5;
  CHECK_THROWS_AS((void)ab::cape_positions(3, bad), lrpe::parameter_error);
  bad = {};
  bad.max_local_shift = std::numeric_limits<double>::infinity();
  CHECK_THROWS_AS((void)ab::cape_positions(3, bad), lrpe::parameter_error);
  bad = {};
  bad.pos_scale = 0;
  CHECK_THROWS_AS((void)ab::cape_positions(3, bad), lrpe::parameter_error);
  CHECK_THROWS_AS((void)ab::cape_positions(-1, {}), lrpe::shape_error);
}

TEST_CASE("learned and axial tables: rows added at the positions, gradients against finite differences") {
  lrpe::generator g(0xAB5);
  const auto random = [&](index_t r, index_t c) {
    rows m(r, c);
    for (index_t i = 0; i < m.size(); ++i) m.data()[i] = g.normal();
    return m;
  };
  const std::vector<position_t> pos{3, 0, 3, 11};
  const rows w = random(4, 5);  // L = Σ w ∘ (x + E[pos])
  {
    const ab::learned_positions<double> table(random(12, 5));
    rows x = rows::Zero(4, 5);
    table.add_to(lrpe::view(x), pos);
    for (index_t i = 0; i < 4; ++i) CHECK(x.row(i) == table.table().row(static_cast<index_t>(pos[std::size_t(i)])));
    std::vector<double> grad(60, 0.0);
    table.accumulate_gradient(lrpe::view(std::as_const(w)), pos, grad);
    const auto loss = [&](const rows& e) {
      rows y = rows::Zero(4, 5);
      ab::learned_positions<double>(e).add_to(lrpe::view(y), pos);
      return (w.array() * y.array()).sum();
    };
    for (index_t j = 0; j < 60; ++j) {
      rows up = table.table(), down = table.table();
      up.data()[j] += 1e-3;
      down.data()[j] -= 1e-3;
      CHECK(grad[std::size_t(j)] == doctest::Approx((loss(up) - loss(down)) / 2e-3).epsilon(1e-9));
    }
    rows y(4, 5);
    const std::vector<position_t> outside{0, 12, 1, 2};
    try {
      table.add_to(lrpe::view(y), outside);
      FAIL("no error");
    } catch (const lrpe::parameter_error& e) {
      CHECK(std::string(e.what()).find("12 at row 1") != std::string::npos);
    }
    rows narrow(4, 4);
    CHECK_THROWS_AS(table.add_to(lrpe::view(narrow), pos), lrpe::shape_error);
    CHECK_THROWS_AS((void)table.row(-1), lrpe::parameter_error);
    CHECK_THROWS_AS((void)ab::learned_positions<double>{rows(0, 3)}, lrpe::shape_error);
    rows bad = random(2, 2);
    bad(1, 1) = std::nan("");
    CHECK_THROWS_AS((void)ab::learned_positions<double>{bad}, lrpe::domain_error);
  }
  {
    // Reformer: axial_pos_shape (3, 4), d = 2 + 3; position p = 4i + j → [E1[i], E2[j]]
    const ab::axial_positions<double> axial(random(3, 2), random(4, 3));
    CHECK(axial.max_positions() == 12);
    const rows dense = axial.dense();
    for (index_t i = 0; i < 3; ++i)
      for (index_t j = 0; j < 4; ++j) {
        CHECK(dense.row(4 * i + j).head(2) == axial.first().row(i));
        CHECK(dense.row(4 * i + j).tail(3) == axial.second().row(j));
      }
    std::vector<double> grad(std::size_t(axial.parameter_count()), 0.0);
    axial.accumulate_gradient(lrpe::view(std::as_const(w)), pos, grad);
    const auto loss = [&](const rows& e1, const rows& e2) {
      rows y = rows::Zero(4, 5);
      ab::axial_positions<double>(e1, e2).add_to(lrpe::view(y), pos);
      return (w.array() * y.array()).sum();
    };
    for (index_t j = 0; j < axial.parameter_count(); ++j) {
      rows a = axial.first(), b = axial.second(), c = a, e = b;
      if (j < 6) {
        a.data()[j] += 1e-3;
        c.data()[j] -= 1e-3;
      } else {
        b.data()[j - 6] += 1e-3;
        e.data()[j - 6] -= 1e-3;
      }
      CHECK(grad[std::size_t(j)] == doctest::Approx((loss(a, b) - loss(c, e)) / 2e-3).epsilon(1e-9));
    }
    rows y(1, 5);
    const std::vector<position_t> past{12};
    CHECK_THROWS_AS(axial.add_to(lrpe::view(y), past), lrpe::parameter_error);
    std::vector<double> short_grad(3);
    CHECK_THROWS_AS(axial.accumulate_gradient(lrpe::view(std::as_const(w)), pos, short_grad), lrpe::shape_error);
  }
}

TEST_CASE("sinusoidal: bad input is a clear error") {
  CHECK_THROWS_AS((void)ab::sinusoidal(4, 5), lrpe::shape_error);
  CHECK_THROWS_AS((void)ab::sinusoidal(4, 0), lrpe::shape_error);
  CHECK_THROWS_AS((void)ab::sinusoidal(-1, 4), lrpe::shape_error);
  CHECK_THROWS_AS((void)ab::sinusoidal(4, 4, {ab::sinusoid_convention::vaswani, 1.0}), lrpe::parameter_error);
  CHECK_THROWS_AS((void)ab::sinusoidal(4, 4, {ab::sinusoid_convention::vaswani, std::nan("")}), lrpe::parameter_error);
  const std::vector<position_t> three{1, 2, 3};
  CHECK_THROWS_AS((void)ab::sinusoidal(4, 4, {}, three), lrpe::shape_error);
  const std::vector<double> nan_x{0.0, std::nan("")};
  CHECK_THROWS_AS((void)ab::sinusoidal_at(nan_x, 4), lrpe::domain_error);
}
