// SPDX-License-Identifier: MIT
// Attention split and put back together: softmax attention over parts of the keys merged by
// their log-sum-exps (merge_attention_states), and its backward by parts (dQ summed); causal
// linear attention over shards, each started from the fold of the earlier shards' summaries
// (linear_attention_summary, append_state). Each against one call over everything.
#include <lrpe/lrpe.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <span>
#include <vector>

using lrpe::index_t;
using lrpe::position_t;

namespace {

template <class T>
using rm = lrpe::row_matrix<T>;

template <class T>
rm<T> uniform(index_t rows, index_t cols, std::uint64_t seed) {
  lrpe::generator g(seed);
  rm<T> m(rows, cols);
  for (index_t i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(2 * g.uniform01() - 1);
  return m;
}

template <class T>
double tol() {
  return sizeof(T) < sizeof(double) ? 3e-6 : 1e-14;
}

/// max |a − b| / (1 + max |b|).
template <class T>
double diff(const rm<T>& a, const rm<T>& b) {
  return double((a - b).cwiseAbs().maxCoeff()) / (1 + double(b.cwiseAbs().maxCoeff()));
}

/// The keys [cuts[p], cuts[p+1]) as part p: each part's softmax_attention_lse, merged all at
/// once and one part at a time (last to first), against the one call; then the backward by
/// parts against the one call's.
template <class T, class Encoding, class Reweight>
void check_split(const Encoding& enc, lrpe::softmax_options<Reweight> opt, const std::vector<index_t>& cuts,
                 std::uint64_t seed) {
  const index_t nq = 7, nk = cuts.back(), d = 4;
  const rm<T> q = uniform<T>(nq, d, seed), k = uniform<T>(nk, d, seed + 1), v = uniform<T>(nk, d, seed + 2);
  const rm<T> d_out = uniform<T>(nq, d, seed + 3);
  std::vector<position_t> kp(static_cast<std::size_t>(nk));
  for (index_t t = 0; t < nk; ++t) kp[std::size_t(t)] = 3 * t - 20;  // some parts hidden from early queries
  opt.k_positions = kp;
  rm<T> one(nq, d);
  std::vector<T> one_lse(static_cast<std::size_t>(nq));
  lrpe::softmax_attention_lse(q, k, v, one, std::span<T>(one_lse), enc, opt);

  const std::size_t parts = cuts.size() - 1;
  std::vector<rm<T>> outs(parts, rm<T>(nq, d));
  std::vector<std::vector<T>> lses(parts, std::vector<T>(std::size_t(nq)));
  std::vector<lrpe::matrix_view<const T>> views;
  std::vector<std::span<const T>> spans;
  const auto part_options = [&](std::size_t p) {
    auto o = opt;
    o.k_positions = std::span<const position_t>(kp).subspan(std::size_t(cuts[p]), std::size_t(cuts[p + 1] - cuts[p]));
    return o;
  };
  for (std::size_t p = 0; p < parts; ++p) {
    const index_t r0 = cuts[p], m = cuts[p + 1] - cuts[p];
    lrpe::softmax_attention_lse(q, k.middleRows(r0, m), v.middleRows(r0, m), outs[p], std::span<T>(lses[p]), enc,
                                part_options(p));
    views.push_back(lrpe::view(std::as_const(outs[p])));
    spans.push_back(lses[p]);
  }
  rm<T> merged(nq, d);
  std::vector<T> merged_lse(static_cast<std::size_t>(nq));
  lrpe::merge_attention_states<T>(views, spans, lrpe::view(merged), std::span<T>(merged_lse));
  CHECK(diff(merged, one) <= tol<T>());
  for (index_t i = 0; i < nq; ++i) {
    const T a = merged_lse[std::size_t(i)], b = one_lse[std::size_t(i)];
    if (std::isinf(b)) CHECK(a == b);
    else CHECK(std::abs(double(a - b)) <= tol<T>() * (1 + std::abs(double(b))));
  }
  // folded one at a time, last part first, into the last part's own memory
  rm<T> folded = outs.back();
  std::vector<T> folded_lse = lses.back();
  for (std::size_t p = parts - 1; p-- > 0;)
    lrpe::merge_attention_states(folded, std::span<T>(folded_lse), outs[p], std::span<const T>(lses[p]));
  CHECK(diff(folded, one) <= tol<T>());

  // the backward by parts: each part given the merged O and lse; dQ is the sum
  rm<T> dq1(nq, d), dk1(nk, d), dv1(nk, d);
  lrpe::softmax_attention_backward(q, k, v, one, d_out, std::span<const T>(one_lse), dq1, dk1, dv1, enc, opt);
  rm<T> dq_sum = rm<T>::Zero(nq, d), dk2(nk, d), dv2(nk, d);
  for (std::size_t p = 0; p < parts; ++p) {
    const index_t r0 = cuts[p], m = cuts[p + 1] - cuts[p];
    rm<T> dq(nq, d), dk(m, d), dv(m, d);
    lrpe::softmax_attention_backward(q, k.middleRows(r0, m), v.middleRows(r0, m), merged, d_out,
                                     std::span<const T>(merged_lse), dq, dk, dv, enc, part_options(p));
    dq_sum += dq;
    dk2.middleRows(r0, m) = dk;
    dv2.middleRows(r0, m) = dv;
  }
  CHECK(diff(dq_sum, dq1) <= 10 * tol<T>());
  CHECK(diff(dk2, dk1) <= 10 * tol<T>());
  CHECK(diff(dv2, dv1) <= 10 * tol<T>());
}

}  // namespace

TEST_CASE_TEMPLATE("softmax attention over parts of the keys, merged by their log-sum-exps == one call; its backward "
                   "by parts (dQ summed) == one call's", T, float, double) {
  lrpe::softmax_options<> opt;
  const std::vector<position_t> qp{-30, -5, 0, 4, 9, 12, 60};  // the first sees no key when causal
  opt.q_positions = qp;
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    opt.causal = causal;
    for (const auto& cuts : {std::vector<index_t>{0, 23}, std::vector<index_t>{0, 11, 23},
                             std::vector<index_t>{0, 4, 4, 13, 20, 23}}) {
      CAPTURE(cuts.size());
      check_split<T>(lrpe::no_encoding{}, opt, cuts, 10);
      check_split<T>(lrpe::rope_neox<T>(4), opt, cuts, 11);
      check_split<T>(lrpe::canonical::alibi<T>(4, {0.3}), opt, cuts, 12);
      check_split<T>(lrpe::canonical::shaw<T>(4, 3, uniform<T>(7, 4, 13), uniform<T>(7, 4, 14)), opt, cuts, 15);
    }
  }
  // URPE's reweighting: the weights' sum (the lse) does not include C; the merge holds as well
  const lrpe::canonical::t5_buckets cfg{8, 32, true};
  const lrpe::canonical::urpe<T> c(cfg, rm<T>::Constant(1, 8, T(1)) + T(0.25) * uniform<T>(1, 8, 16));
  lrpe::softmax_options<lrpe::canonical::urpe<T>> urpe_opt;
  urpe_opt.reweight = c;
  urpe_opt.q_positions = opt.q_positions;
  check_split<T>(lrpe::no_encoding{}, urpe_opt, {0, 9, 23}, 17);
}

TEST_CASE("merge_attention_states: empty parts weigh nothing, NaN reaches its row only, bad shapes are errors") {
  using T = double;
  constexpr T inf = std::numeric_limits<T>::infinity();
  rm<T> a(3, 2), b(3, 2);
  a << 1, 2, 3, 4, 5, 6;
  b << 7, 8, 9, 10, 11, 12;
  std::vector<T> la{0.5, -inf, std::numeric_limits<T>::quiet_NaN()}, lb{-inf, -inf, 1.0};
  rm<T> out = a;
  std::vector<T> lse = la;
  lrpe::merge_attention_states(out, std::span<T>(lse), b, std::span<const T>(lb));
  CHECK(out(0, 0) == 1);  // b's row 0 is empty
  CHECK(lse[0] == 0.5);
  CHECK(out(1, 0) == 0);  // both empty: as one call, O = 0 and lse = −∞
  CHECK(lse[1] == -inf);
  CHECK(std::isnan(out(2, 1)));
  CHECK(std::isnan(lse[2]));
  // two equal halves: the same output, lse + log 2
  rm<T> twice = a;
  std::vector<T> l2{0.5, 0.5, 0.5};
  lrpe::merge_attention_states(twice, std::span<T>(l2), a, std::span<const T>(std::vector<T>{0.5, 0.5, 0.5}));
  CHECK(twice == a);
  CHECK(l2[0] == doctest::Approx(0.5 + std::log(2.0)).epsilon(1e-15));
  std::vector<T> short_lse(2);
  CHECK_THROWS_WITH_AS(lrpe::merge_attention_states(out, std::span<T>(lse), b, std::span<const T>(short_lse)),
                       doctest::Contains("lses[p].size()"), lrpe::shape_error);
  const rm<T> wide(3, 3);
  CHECK_THROWS_WITH_AS(lrpe::merge_attention_states(out, std::span<T>(lse), wide, std::span<const T>(lb)),
                       doctest::Contains("outs[p]"), lrpe::shape_error);
  CHECK_THROWS_AS(lrpe::merge_attention_states<T>({}, {}, lrpe::view(out), std::span<T>(lse)), lrpe::shape_error);
}

TEST_CASE_TEMPLATE("causal linear attention over shards: each started from the fold of the earlier shards' summaries "
                   "== one call; folding is associative", T, float, double) {
  const index_t n = 23, d = 6, dv = 5;
  const rm<T> q = uniform<T>(n, d, 20), k = uniform<T>(n, d, 21), v = uniform<T>(n, dv, 22);
  const lrpe::type2<T> enc(d);
  const lrpe::feature_maps::elu_plus_one phi;
  lrpe::linear_options opt;
  opt.causal = true;
  opt.decay = 0.9;
  opt.norm = lrpe::normalisation::denominator;
  opt.chunk = 4;
  std::vector<position_t> pos(static_cast<std::size_t>(n));
  for (index_t t = 0; t < n; ++t) pos[std::size_t(t)] = 1000 + 2 * t;
  opt.q_positions = opt.k_positions = pos;
  rm<T> one(n, dv);
  lrpe::linear_attention(q, k, v, one, enc, phi, opt);

  const std::vector<index_t> cuts{0, 5, 5, 14, 23};  // an empty shard too
  const auto shard = [&](std::size_t r) {
    auto o = opt;
    o.q_positions = o.k_positions =
        std::span<const position_t>(pos).subspan(std::size_t(cuts[r]), std::size_t(cuts[r + 1] - cuts[r]));
    return o;
  };
  std::vector<lrpe::linear_attention_state<T>> summaries;
  for (std::size_t r = 0; r + 1 < cuts.size(); ++r) {
    const index_t r0 = cuts[r], m = cuts[r + 1] - cuts[r];
    summaries.push_back(lrpe::linear_attention_summary(k.middleRows(r0, m), v.middleRows(r0, m), enc, phi, shard(r)));
  }
  rm<T> out(n, dv);
  lrpe::linear_attention_state<T> incoming(enc.feature_dim(), dv, opt.decay);
  for (std::size_t r = 0; r + 1 < cuts.size(); ++r) {
    const index_t r0 = cuts[r], m = cuts[r + 1] - cuts[r];
    lrpe::linear_attention_state<T> state = incoming;  // this shard's incoming state (exclusive prefix)
    auto o = out.middleRows(r0, m);
    lrpe::linear_attention(q.middleRows(r0, m), k.middleRows(r0, m), v.middleRows(r0, m), o, enc, phi, state, shard(r));
    incoming.append_state(summaries[r]);
    CHECK(double((state.kv() - incoming.kv()).cwiseAbs().maxCoeff()) <= 10 * tol<T>() * (1 + double(incoming.kv().cwiseAbs().maxCoeff())));
  }
  CHECK(diff(out, one) <= 10 * tol<T>());
  CHECK(incoming.count() == n);
  CHECK(incoming.last_position() == pos.back());
  // ((s0 s1) s2) s3 == s0 (s1 (s2 s3))
  lrpe::linear_attention_state<T> right = summaries[3];
  auto s2 = summaries[2];
  s2.append_state(right);
  auto s1 = summaries[1];
  s1.append_state(s2);
  auto left = summaries[0];
  left.append_state(s1);
  CHECK(double((left.kv() - incoming.kv()).cwiseAbs().maxCoeff()) <= 10 * tol<T>() * (1 + double(incoming.kv().cwiseAbs().maxCoeff())));
  CHECK(double((left.k_sum() - incoming.k_sum()).cwiseAbs().maxCoeff()) <= 10 * tol<T>() * (1 + double(incoming.k_sum().cwiseAbs().maxCoeff())));
  CHECK(left.count() == n);
  // errors: widths, decay, order
  lrpe::linear_attention_state<T> other(enc.feature_dim(), dv, 0.8), narrow(3, dv, 0.9);
  CHECK_THROWS_WITH_AS(summaries[0].append_state(other), doctest::Contains("later.decay()"), lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(summaries[0].append_state(narrow), doctest::Contains("later"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(summaries[3].append_state(summaries[0]), doctest::Contains("later.last_position()"),
                       lrpe::parameter_error);
  auto non_causal = opt;
  non_causal.causal = false;
  non_causal.decay = 1.0;
  CHECK_THROWS_WITH_AS((void)lrpe::linear_attention_summary(k, v, enc, phi, non_causal), doctest::Contains("options.causal"),
                       lrpe::parameter_error);
}
