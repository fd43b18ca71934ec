// SPDX-License-Identifier: MIT
// Streaming linear attention: linear_attention_state (append k, v, position; query in O(d_f·d_v))
// equals batched causal linear attention; export / flat serialisation / resume at an arbitrary
// split, and segment-by-segment calls (sequence sharding) equal one call on the whole sequence.
#include <lrpe/lrpe.hpp>

#include "attention_helpers.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace {

using attention_test::kernel_vs_kernel;
using attention_test::random_matrix;

using lrpe::index_t;
using lrpe::position_t;
template <class T>
using rm = lrpe::row_matrix<T>;

template <class T>
double max_rel(const rm<T>& a, const rm<T>& b) {
  return static_cast<double>((a - b).cwiseAbs().maxCoeff()) / (1.0 + static_cast<double>(b.cwiseAbs().maxCoeff()));
}

}  // namespace

TEST_CASE_TEMPLATE("streaming: append/query per token equals batched causal linear attention", T, float, double) {
  const std::uint64_t seed = 0x57AE'0001;
  MESSAGE("seed = " << seed);
  lrpe::generator g(seed);
  const index_t n = 90, d = 8, dv = 5;
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, dv);
  const lrpe::type8<T> enc(d);  // complex encoder: feature_dim = 2d through the real view
  const lrpe::feature_maps::elu_plus_one phi;
  for (double decay : {1.0, 0.9}) {
    for (auto norm : {lrpe::normalisation::none, lrpe::normalisation::denominator}) {
      CAPTURE(decay);
      const position_t p0 = 12345;
      lrpe::linear_options o{.causal = true, .norm = norm, .eps = 0.5, .chunk = 16, .decay = decay, .q_positions = p0, .k_positions = p0};
      rm<T> batched(n, dv), streamed(n, dv);
      lrpe::linear_attention(q, k, v, batched, enc, phi, o);
      lrpe::linear_attention_state<T> st(enc.feature_dim(), dv, decay);
      for (index_t i = 0; i < n; ++i) {
        st.append(enc, phi, k.row(i).data(), v.row(i).data(), p0 + i);
        st.query(enc, phi, q.row(i).data(), p0 + i, streamed.row(i).data(), norm, o.eps);
      }
      CHECK(st.count() == n);
      CHECK(st.last_position() == p0 + n - 1);
      CHECK(max_rel(streamed, batched) <= kernel_vs_kernel<T>());
    }
  }
}

TEST_CASE_TEMPLATE("streaming: export, flat serialisation and resume at an arbitrary split", T, float, double) {
  const std::uint64_t seed = 0x57AE'0002;
  MESSAGE("seed = " << seed);
  lrpe::generator g(seed);
  const index_t n = 77, d = 6, dv = 3;
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, dv);
  const lrpe::type1<T> enc(d);
  const lrpe::feature_maps::relu_eps phi;
  const double decay = 0.93;
  const lrpe::linear_options whole_opt{.causal = true, .chunk = 8, .decay = decay, .q_positions = 5, .k_positions = 5};
  rm<T> whole(n, dv);
  lrpe::linear_attention(q, k, v, whole, enc, phi, whole_opt);

  for (int rep = 0; rep < 4; ++rep) {
    const index_t split = rep == 0 ? 0 : (rep == 1 ? n : 1 + static_cast<index_t>(g.below(static_cast<std::uint64_t>(n - 1))));
    CAPTURE(split);
    // shard 1: batched segment call, then export → flat → resume in a "new process"
    lrpe::linear_attention_state<T> st(enc.feature_dim(), dv, decay);
    rm<T> out(n, dv);
    lrpe::linear_attention(q.topRows(split), k.topRows(split), v.topRows(split), out.topRows(split), enc, phi, st,
                           lrpe::linear_options{.causal = true, .chunk = 5, .decay = decay, .q_positions = 5, .k_positions = 5});
    const std::vector<double> flat = st.export_state().to_flat();
    lrpe::linear_attention_state<T> resumed(lrpe::linear_attention_snapshot<T>::from_flat(flat));
    CHECK(resumed.count() == split);
    CHECK(resumed.kv() == st.kv());
    CHECK(resumed.k_sum() == st.k_sum());
    // shard 2: half per-token streaming, half a batched segment with another chunk size
    const index_t mid = split + (n - split) / 2;
    for (index_t i = split; i < mid; ++i) {
      resumed.append(enc, phi, k.row(i).data(), v.row(i).data(), 5 + i);
      resumed.query(enc, phi, q.row(i).data(), 5 + i, out.row(i).data());
    }
    lrpe::linear_attention(q.bottomRows(n - mid), k.bottomRows(n - mid), v.bottomRows(n - mid), out.bottomRows(n - mid),
                           enc, phi, resumed,
                           lrpe::linear_options{.causal = true, .chunk = 7, .decay = decay, .q_positions = 5 + mid, .k_positions = 5 + mid});
    CHECK(max_rel(out, whole) <= kernel_vs_kernel<T>());
    CHECK(resumed.count() == n);
  }
}

TEST_CASE("streaming: snapshot round trip is exact, including extreme positions") {
  lrpe::linear_attention_state<float> st(4, 2, 0.5);
  const float k[4] = {1, -2, 3, 0.25f}, v[2] = {7, -1};
  const position_t far = -(position_t{1} << 62) + 3;
  st.append_features(k, v, far);
  st.append_features(k, v, far + 2);
  const auto snap = st.export_state();
  const auto back = lrpe::linear_attention_snapshot<float>::from_flat(snap.to_flat());
  CHECK(back.last_position == far + 2);
  CHECK(back.count == 2);
  CHECK(back.decay == 0.5);
  CHECK(back.kv == snap.kv);
  CHECK(back.k_sum == snap.k_sum);
  CHECK(snap.kv[0] == doctest::Approx(7 * 1 * 0.25 + 7));  // λ² · k vᵀ + k vᵀ
  // copies are independent
  auto copy = st;
  copy.append_features(k, v, far + 3);
  CHECK(copy.count() == 3);
  CHECK(st.count() == 2);
}

TEST_CASE("streaming: carried decay factors multiply to λ^N within one float rounding; fl(λ)^N drifts") {
  // detail::carried_decay: the product of the factors it returns tracks the exact product
  constexpr double u = 0x1p-24;  // float's unit roundoff
  for (const double lambda : {0.9999, 0.999, 0.9, 0.5 + 0x1p-30}) {
    CAPTURE(lambda);
    const int steps = 20000;
    double carry = 1.0, carried = 1.0, plain = 1.0;
    bool carried_ok = true;
    for (int i = 1; i <= steps; ++i) {
      carried *= static_cast<double>(lrpe::detail::carried_decay<float>(lambda, carry));
      plain *= static_cast<double>(static_cast<float>(lambda));
      const double exact = std::pow(lambda, i);
      if (exact < 0x1p-100) break;  // both far below anything a float state holds
      carried_ok = carried_ok && std::abs(carried / exact - 1) <= 2 * u;
      if (i == 5000 && lambda > 0.99) CHECK(std::abs(plain / exact - 1) > 50 * u);  // what the carry removes
    }
    CHECK(carried_ok);
    CHECK(std::abs(carry - 1) <= u);
  }
  // Δ = 0 applies exactly 1 and leaves the carry; a factor below float's normal range restarts it
  double carry = 1.0;
  (void)lrpe::detail::carried_decay<float>(0.9999, carry);
  const double before = carry;
  CHECK(lrpe::detail::carried_decay<float>(1.0, carry) == 1.0f);
  CHECK(carry == before);
  CHECK(lrpe::detail::carried_decay<float>(1e-300, carry) == 0.0f);
  CHECK(carry == 1.0);
  // double states: λ^Δ rounded once, nothing carried
  CHECK(lrpe::detail::carried_decay<double>(0.9999, carry) == 0.9999);
  CHECK(carry == 1.0);
}

TEST_CASE("streaming: a long float decode with λ close to 1 stays at float's rounding floor (no fl(λ)^Δ drift)") {
  // λ = 0.9999 (a window of 10^4 tokens): rounding λ to float every token drifted by ~Δ·1.7e-8
  // (8e-5 at n = 12000, measured before the carry); what is left is the rounding of S each
  // step, 4.6e-6 here, the same as with λ = fl(0.9999), which has no rounding to drift.
  const auto c = attention_test::make_decay_drift_case(12000, 4, 4, 0.9999, 0x57AE'0003);
  const index_t n = c.q.rows(), d = c.q.cols(), dv = c.v.cols();
  constexpr double bound = 1.5e-5;
  rm<float> streamed(n, dv), batched(n, dv);
  lrpe::linear_attention_state<float> st(d, dv, 0.9999);
  for (index_t t = 0; t < n; ++t) {
    st.append_features(c.k.row(t).data(), c.v.row(t).data(), t);
    st.query_features(c.q.row(t).data(), t, streamed.row(t).data());
  }
  CHECK(attention_test::rel_error(streamed, c.exact) <= bound);
  lrpe::linear_attention(c.q, c.k, c.v, batched, lrpe::no_encoding{}, lrpe::feature_maps::identity{},
                         lrpe::linear_options{.causal = true, .decay = 0.9999});
  CHECK(attention_test::rel_error(batched, c.exact) <= bound);
}

TEST_CASE("streaming: export and resume continue a float state with a decay bit for bit (the decay carry travels)") {
  const auto c = attention_test::make_decay_drift_case(600, 4, 3, 0.9999, 0x57AE'0004);
  const index_t n = c.q.rows(), d = c.q.cols(), dv = c.v.cols();
  rm<float> whole(n, dv), resumed_out(n, dv);
  lrpe::linear_attention_state<float> st(d, dv, 0.9999), part(d, dv, 0.9999);
  for (index_t t = 0; t < n; ++t) {
    st.append_features(c.k.row(t).data(), c.v.row(t).data(), t);
    st.query_features(c.q.row(t).data(), t, whole.row(t).data());
  }
  CHECK(st.decay_carry() != 1.0);  // it carries something: the resume below must keep it
  for (index_t t = 0; t < n; ++t) {
    if (t == n / 2) part = lrpe::linear_attention_state<float>(
                        lrpe::linear_attention_snapshot<float>::from_flat(part.export_state().to_flat()));
    part.append_features(c.k.row(t).data(), c.v.row(t).data(), t);
    part.query_features(c.q.row(t).data(), t, resumed_out.row(t).data());
  }
  CHECK(resumed_out == whole);
  CHECK(part.kv() == st.kv());
  CHECK(part.decay_carry() == st.decay_carry());
  // version 1 (no carry) still reads, with carry 1
  std::vector<double> v1 = st.export_state().to_flat();
  v1.erase(v1.begin() + 7);
  v1[0] = 1;
  const auto old = lrpe::linear_attention_snapshot<float>::from_flat(v1);
  CHECK(old.decay_carry == 1.0);
  CHECK(old.kv == st.export_state().kv);
  CHECK(old.count == n);
}

TEST_CASE("streaming: a decay carry out of range is an error naming it") {
  using T = float;
  lrpe::linear_attention_state<T> st(2, 2, 0.9);
  const T k[2] = {1, 2}, v[2] = {3, 4};
  st.append_features(k, v, 0);
  st.append_features(k, v, 1);
  const auto good = st.export_state().to_flat();
  for (const double bad : {1.5, 0.0, double(NAN), double(INFINITY), 1 + 0x1p-15}) {
    CAPTURE(bad);
    std::vector<double> flat = good;
    flat[7] = bad;
    CHECK_THROWS_WITH_AS(lrpe::linear_attention_snapshot<T>::from_flat(flat),
                         doctest::Contains("'flat[7] (decay_carry)' must be within 2^-16 of 1"), lrpe::parameter_error);
    auto snap = st.export_state();
    snap.decay_carry = bad;
    CHECK_THROWS_WITH_AS(lrpe::linear_attention_state<T>{snap}, doctest::Contains("'snapshot.decay_carry'"),
                         lrpe::parameter_error);
    const auto kv_before = st.kv();
    CHECK_THROWS_WITH_AS(st.assign(st.kv().data(), 2, st.k_sum().data(), 2, 3, bad),
                         doctest::Contains("'decay_carry'"), lrpe::parameter_error);
    CHECK(st.count() == 2);  // unchanged by the failed call
    CHECK(st.kv() == kv_before);
  }
  std::vector<double> flat = good;
  flat[7] = 1 + 0x1p-17;  // within the range: accepted
  CHECK(lrpe::linear_attention_state<T>(lrpe::linear_attention_snapshot<T>::from_flat(flat)).decay_carry() ==
        1 + 0x1p-17);
}

TEST_CASE("streaming: errors") {
  using T = double;
  const lrpe::type1<T> enc(4);
  const lrpe::feature_maps::identity phi;
  lrpe::linear_attention_state<T> st(4, 2);
  const T x[4] = {1, 2, 3, 4}, v[2] = {1, 1};
  T out[2];
  st.append(enc, phi, x, v, 10);
  CHECK_THROWS_WITH_AS(st.append(enc, phi, x, v, 9), doctest::Contains("'t'"), lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(st.query(enc, phi, x, 9, out), doctest::Contains("'s'"), lrpe::parameter_error);
  CHECK_NOTHROW(st.query(enc, phi, x, 10, out));
  CHECK_THROWS_AS(st.query(enc, phi, x, 10, out, lrpe::normalisation::denominator, 0.0), lrpe::parameter_error);
  const lrpe::type8<T> complex_enc(4);  // feature_dim 8 ≠ 4
  CHECK_THROWS_WITH_AS(st.append(complex_enc, phi, x, v, 11), doctest::Contains("'encoding.feature_dim()'"), lrpe::shape_error);
  CHECK_THROWS_AS(lrpe::linear_attention_state<T>(0, 2), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::linear_attention_state<T>(4, 2, 1.5), doctest::Contains("'decay'"), lrpe::parameter_error);
  std::vector<double> flat = st.export_state().to_flat();
  flat.pop_back();
  CHECK_THROWS_WITH_AS(lrpe::linear_attention_snapshot<T>::from_flat(flat), doctest::Contains("'flat.size()'"), lrpe::shape_error);
  CHECK_THROWS_AS(lrpe::linear_attention_snapshot<T>::from_flat(std::vector<double>{2, 0, 0}), lrpe::shape_error);
  // a corrupted header is an error naming the entry, never an out-of-range conversion
  const auto good = st.export_state().to_flat();  // [2, 4, 2, 1, 0, 10, 1, carry 1, S (8), z (4)]
  const auto corrupt = [&](std::size_t i, double x) {
    std::vector<double> f = good;
    f[i] = x;
    return f;
  };
  CHECK_NOTHROW(lrpe::linear_attention_snapshot<T>::from_flat(good));
  for (const double bad : {double(NAN), -1.0, 2.5, 1e300, double(INFINITY)}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(lrpe::linear_attention_snapshot<T>::from_flat(corrupt(1, bad)),
                         doctest::Contains("'flat[1] (feature_dim)' must be a whole number"), lrpe::shape_error);
    CHECK_THROWS_WITH_AS(lrpe::linear_attention_snapshot<T>::from_flat(corrupt(2, bad)),
                         doctest::Contains("'flat[2] (value_dim)'"), lrpe::shape_error);
    CHECK_THROWS_WITH_AS(lrpe::linear_attention_snapshot<T>::from_flat(corrupt(4, bad)),
                         doctest::Contains("'flat[4] (last_position, high half)'"), lrpe::shape_error);
    CHECK_THROWS_WITH_AS(lrpe::linear_attention_snapshot<T>::from_flat(corrupt(6, bad)),
                         doctest::Contains("'flat[6] (count)'"), lrpe::shape_error);
  }
  CHECK_THROWS_WITH_AS(lrpe::linear_attention_snapshot<T>::from_flat(corrupt(5, 4294967296.0)),
                       doctest::Contains("'flat[5] (last_position, low half)'"), lrpe::shape_error);
  // another value_dim: the length no longer fits 8 + f·(dv + 1)
  CHECK_THROWS_WITH_AS(lrpe::linear_attention_snapshot<T>::from_flat(corrupt(2, 3.0)), doctest::Contains("'flat.size()'"),
                       lrpe::shape_error);
  // S and z entries must fit the state's type (a finite double past float's range would turn into
  // ±∞); NaN and ±∞ are what a state that met them holds, and round-trip
  CHECK_THROWS_WITH_AS(lrpe::linear_attention_snapshot<float>::from_flat(corrupt(8, 1e300)),
                       doctest::Contains("'flat' must hold S and z entries within the state type's range (entry 8)"),
                       lrpe::parameter_error);
  CHECK_NOTHROW(lrpe::linear_attention_snapshot<T>::from_flat(corrupt(8, 1e300)));  // fits double
  {
    const auto s = lrpe::linear_attention_snapshot<float>::from_flat(corrupt(9, double(NAN)));
    CHECK(std::isnan(lrpe::linear_attention_state<float>(s).kv()(0, 1)));
  }
  // A snapshot's sizes are checked before anything is allocated for it (and f·dv never formed).
  {
    lrpe::linear_attention_snapshot<T> huge;
    huge.feature_dim = lrpe::index_t{1} << 40;
    huge.value_dim = 4;
    CHECK_THROWS_WITH_AS(lrpe::linear_attention_state<T>{huge}, doctest::Contains("'snapshot.kv'"), lrpe::shape_error);
    huge.feature_dim = lrpe::index_t{1} << 62;
    CHECK_THROWS_WITH_AS(lrpe::linear_attention_state<T>{huge}, doctest::Contains("'snapshot.kv'"), lrpe::shape_error);
    huge.feature_dim = 0;
    CHECK_THROWS_WITH_AS(lrpe::linear_attention_state<T>{huge}, doctest::Contains("'snapshot.feature_dim'"), lrpe::shape_error);
    auto bad_sum = st.export_state();
    bad_sum.k_sum.pop_back();
    CHECK_THROWS_WITH_AS(lrpe::linear_attention_state<T>{bad_sum}, doctest::Contains("'snapshot.k_sum'"), lrpe::shape_error);
  }
  // segment calls: state shape, decay and positions must match
  const rm<T> q = rm<T>::Ones(3, 4), vv = rm<T>::Ones(3, 2);
  rm<T> o(3, 2);
  lrpe::linear_attention_state<T> wrong(4, 3);
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(q, q, vv, o, enc, phi, wrong, lrpe::linear_options{.causal = true}),
                       doctest::Contains("'state'"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(q, q, vv, o, enc, phi, st, lrpe::linear_options{.causal = true, .decay = 0.5}),
                       doctest::Contains("'options.decay'"), lrpe::parameter_error);
  // the expectations are formatted only on failure (lazy_concat), and then in full
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(q, q, vv, o, enc, phi, wrong, lrpe::linear_options{.causal = true}),
                       "lrpe::linear_attention: argument 'state' must be 4x2 (feature_dim x v.cols); got 4x3",
                       lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(q, q, vv, o, enc, phi, st, lrpe::linear_options{.causal = true, .decay = 0.5}),
                       "lrpe::linear_attention: argument 'options.decay' must equal state.decay() = 1; got 0.5",
                       lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(q, q, vv, o, enc, phi, st, lrpe::linear_options{.causal = true, .q_positions = 3, .k_positions = 11}),
                       doctest::Contains("'options.q_positions[0]'"), lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(lrpe::linear_attention(q, q, vv, o, enc, phi, st, lrpe::linear_options{}),
                       doctest::Contains("'options.causal'"), lrpe::parameter_error);
}

TEST_CASE("streaming: assign replaces S, z, position and count in place; bad arguments throw") {
  using T = float;
  lrpe::linear_attention_state<T> st(3, 2, 0.5);
  const T k[3] = {1, 2, 3}, v[2] = {4, 5};
  st.append_features(k, v, 7);
  const T kv[3 * 4] = {1, 2, -1, -1, 3, 4, -1, -1, 5, 6, -1, -1};  // rows 4 apart: the last 2 are padding
  const T z[3] = {7, 8, 9};
  st.assign(kv, 4, z, 9, 3);
  CHECK(st.count() == 3);
  CHECK(st.last_position() == 9);
  CHECK(st.decay() == 0.5);
  CHECK(st.kv()(0, 0) == 1);
  CHECK(st.kv()(1, 1) == 4);
  CHECK(st.kv()(2, 0) == 5);
  CHECK(st.k_sum()[2] == 9);
  CHECK_THROWS_WITH_AS(st.assign(kv, 1, z, 9, 3), doctest::Contains("'kv_stride' must be >= value_dim() = 2; got 1"),
                       lrpe::shape_error);
  CHECK_THROWS_WITH_AS(st.assign(kv, 4, z, 9, 2), doctest::Contains("'count' must be >= count() = 3; got 2"),
                       lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(st.assign(kv, 4, z, 8, 4), doctest::Contains("'last_position'"), lrpe::parameter_error);
  CHECK(st.count() == 3);  // unchanged by the failed calls
  CHECK(st.last_position() == 9);
  // the same count: S and z replaced, the position kept
  st.assign(kv, 2, z, 100, 3);
  CHECK(st.last_position() == 9);
  CHECK(st.kv()(1, 0) == -1);
}

TEST_CASE("streaming: t - last must fit in int64") {
  using T = double;
  constexpr lrpe::position_t top = std::numeric_limits<lrpe::position_t>::max();
  constexpr lrpe::position_t bottom = std::numeric_limits<lrpe::position_t>::min();
  const lrpe::no_encoding none;
  const lrpe::feature_maps::identity phi;
  lrpe::linear_attention_state<T> st(4, 2, 0.5);
  const T x[4] = {1, 2, 3, 4}, v[2] = {1, 1};
  T out[2];
  st.append(none, phi, x, v, bottom);
  CHECK_THROWS_WITH_AS(st.append(none, phi, x, v, 0),
                       "lrpe::linear_attention_state::append: argument 't' must be within 2^63 - 1 of last_position() = "
                       "-9223372036854775808 (t - last must fit in int64); got 0",
                       lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(st.query(none, phi, x, top, out), doctest::Contains("argument 's' must be within 2^63 - 1"),
                       lrpe::parameter_error);
  CHECK(st.count() == 1);
  // the farthest reachable position: λ^(2^63 − 1) underflows to an exact 0
  st.query(none, phi, x, -1, out);
  CHECK(out[0] == 0);
  CHECK(out[1] == 0);
  st.append(none, phi, x, v, -1);
  CHECK(st.last_position() == -1);
  st.query(none, phi, x, -1, out);
  CHECK(out[0] == 30);  // the old key decayed to 0: q·k of the new one, 1 + 4 + 9 + 16

  // a block of keys: its own span, and non-decreasing positions, checked even on an empty state
  lrpe::linear_attention_state<T> fresh(2, 2, 0.5);
  const lrpe::row_matrix<T> ones = lrpe::row_matrix<T>::Ones(2, 2), three = lrpe::row_matrix<T>::Ones(3, 2);
  const std::vector<lrpe::position_t> wide{bottom, top}, back{0, -1, 2};
  CHECK_THROWS_WITH_AS(fresh.append_block(ones, ones, lrpe::positions(wide), 0),
                       doctest::Contains("argument 't' must span at most 2^63 - 1"), lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(fresh.append_block(three, three, lrpe::positions(back), 0),
                       doctest::Contains("argument 't' must be non-decreasing within a block"), lrpe::parameter_error);
  CHECK(fresh.empty());
  const std::vector<lrpe::position_t> far{bottom, -1};
  fresh.append_block(ones, ones, lrpe::positions(far), 0);  // a span of exactly 2^63 − 1
  CHECK(fresh.last_position() == -1);

  // the block's shapes and its rows of an array of positions (it read past them, or hit an Eigen
  // assertion, before)
  lrpe::linear_attention_state<T> blocks(2, 2);
  const lrpe::row_matrix<T> wide_k = lrpe::row_matrix<T>::Ones(2, 3), narrow_v = lrpe::row_matrix<T>::Ones(2, 1);
  const std::string ab = "lrpe::linear_attention_state::append_block: argument ";
  CHECK_THROWS_WITH_AS(blocks.append_block(wide_k, ones, lrpe::positions(0), 0),
                       (ab + "'k_features.cols()' must equal feature_dim() = 2; got 3").c_str(), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(blocks.append_block(ones, three, lrpe::positions(0), 0),
                       (ab + "'v.rows()' must equal k_features.rows() = 2; got 3").c_str(), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(blocks.append_block(ones, narrow_v, lrpe::positions(0), 0),
                       (ab + "'v.cols()' must equal value_dim() = 2; got 1").c_str(), lrpe::shape_error);
  const std::vector<lrpe::position_t> two_pos{4, 5};
  CHECK_THROWS_WITH_AS(blocks.append_block(ones, ones, lrpe::positions(two_pos), 1),
                       (ab + "'first' must be >= 0 with first + rows <= positions.size() = 2 (rows = 2); got 1").c_str(),
                       lrpe::shape_error);
  CHECK_THROWS_AS(blocks.append_block(ones, ones, lrpe::positions(two_pos), -1), lrpe::shape_error);
  // offset positions: offset + first + rows − 1 must be a position (it overflowed before)
  const lrpe::position_t most = std::numeric_limits<lrpe::position_t>::max();
  CHECK_THROWS_WITH_AS(blocks.append_block(ones, ones, lrpe::positions(most - 1), 1),
                       (ab + "'first' must be >= 0 with offset + first + rows - 1 <= 2^63 - 1 (offset = "
                             "9223372036854775806, rows = 2); got 1").c_str(),
                       lrpe::parameter_error);
  CHECK_THROWS_AS(blocks.append_block(ones, ones, lrpe::positions(0), most), lrpe::parameter_error);
  CHECK_THROWS_AS(blocks.append_block(ones, ones, lrpe::positions(0), -1), lrpe::parameter_error);
  CHECK(blocks.empty());
  blocks.append_block(ones, ones, lrpe::positions(two_pos), 0);
  CHECK(blocks.count() == 2);
  CHECK(blocks.last_position() == 5);
}
