// SPDX-License-Identifier: MIT
// lrpe::mpi against the single-process calls, run by ctest under mpiexec on 1 to 4 ranks: every
// rank builds the whole input from a seed, runs its shard, and compares its rows. Float and
// double; causal and not; no encoding, an LRPE encoder (Type 2), ALiBi; uneven shards, a rank
// with no rows, zigzag blocks; the backward of both (dq, dk, dv, and the parameter and decay
// gradients summed over the ranks); and errors, thrown on every rank alike.
#include <lrpe/mpi.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

int failures = 0, rank = 0, ranks = 1;

void check(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::printf("rank %d: FAILED: %s\n", rank, what.c_str());
}

template <class T>
lrpe::row_matrix<T> uniform(lrpe::index_t rows, lrpe::index_t cols, std::uint64_t seed) {
  lrpe::generator g(seed);
  lrpe::row_matrix<T> m(rows, cols);
  for (lrpe::index_t i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(2 * g.uniform01() - 1);
  return m;
}

template <class T>
double tolerance() {
  return sizeof(T) < sizeof(double) ? 2e-5 : 1e-12;
}

/// Rows [r0, r1) of rank r: uneven shards, and the last rank empty when there are 3 or more.
std::pair<lrpe::index_t, lrpe::index_t> shard(lrpe::index_t n, int r) {
  const int used = ranks >= 3 ? ranks - 1 : ranks;
  if (r >= used) return {n, n};
  const auto cut = [&](int i) { return i == used ? n : n * i * i / (used * used); };  // growing shards
  return {cut(r), cut(r + 1)};
}

template <class T, class Encoding>
void linear_case(const Encoding& enc, bool causal, const char* name) {
  const lrpe::index_t n = 41, d = 8, dv = 6;
  const auto q = uniform<T>(n, d, 1), k = uniform<T>(n, d, 2), v = uniform<T>(n, dv, 3);
  const lrpe::feature_maps::elu_plus_one phi;
  lrpe::linear_options opt{.causal = causal, .norm = lrpe::normalisation::denominator, .decay = causal ? 0.95 : 1.0};
  opt.q_positions = opt.k_positions = 100;
  lrpe::row_matrix<T> want(n, dv);
  lrpe::linear_attention(q, k, v, want, enc, phi, opt);
  const auto [r0, r1] = shard(n, rank);
  lrpe::linear_options mine = opt;
  mine.q_positions = mine.k_positions = 100 + r0;
  lrpe::row_matrix<T> out(r1 - r0, dv);
  lrpe::mpi::linear_attention(MPI_COMM_WORLD, q.middleRows(r0, r1 - r0), k.middleRows(r0, r1 - r0),
                              v.middleRows(r0, r1 - r0), out, enc, phi, mine);
  const double err = r1 > r0 ? double((out - want.middleRows(r0, r1 - r0)).cwiseAbs().maxCoeff()) : 0.0;
  check(err <= tolerance<T>() * (1 + double(want.cwiseAbs().maxCoeff())),
        std::string("linear ") + name + (causal ? " causal" : "") + ": " + std::to_string(err));
}

/// A sliding window, a soft cap and a sink (the sink must join once over the ring's blocks).
void set_engine_options(lrpe::softmax_options<>& opt) {
  opt.window = 9;
  opt.softcap = 2;
  opt.sink = 0.7;
}

template <class T, class Encoding>
void softmax_case(const Encoding& enc, bool causal, bool zigzag, const char* name, bool engine = false) {
  const lrpe::index_t block = 7, n = 2 * block * ranks, d = 8, dv = 5;
  const auto q = uniform<T>(n, d, 4), k = uniform<T>(n, d, 5), v = uniform<T>(n, dv, 6);
  lrpe::softmax_options<> opt;
  opt.causal = causal;
  if (engine) set_engine_options(opt);
  lrpe::row_matrix<T> want(n, dv);
  std::vector<T> want_lse(static_cast<std::size_t>(n));
  lrpe::softmax_attention_lse(q, k, v, want, std::span<T>(want_lse), enc, opt);
  std::vector<lrpe::index_t> rows;
  if (zigzag) {
    for (lrpe::index_t b : {lrpe::index_t(rank), lrpe::index_t(2 * ranks - 1 - rank)})
      for (lrpe::index_t i = 0; i < block; ++i) rows.push_back(b * block + i);
  } else {
    const auto [r0, r1] = shard(n, rank);
    for (lrpe::index_t i = r0; i < r1; ++i) rows.push_back(i);
  }
  const auto m = static_cast<lrpe::index_t>(rows.size());
  lrpe::row_matrix<T> mq(m, d), mk(m, d), mv(m, dv), out(m, dv);
  std::vector<lrpe::position_t> pos(rows.begin(), rows.end());
  for (lrpe::index_t i = 0; i < m; ++i) {
    mq.row(i) = q.row(rows[std::size_t(i)]);
    mk.row(i) = k.row(rows[std::size_t(i)]);
    mv.row(i) = v.row(rows[std::size_t(i)]);
  }
  opt.q_positions = opt.k_positions = pos;
  std::vector<T> lse(static_cast<std::size_t>(m));
  lrpe::mpi::softmax_attention(MPI_COMM_WORLD, mq, mk, mv, out, enc, opt, lrpe::backend::reference{}, std::span<T>(lse));
  double err = 0, lse_err = 0;
  for (lrpe::index_t i = 0; i < m; ++i) {
    err = std::max(err, double((out.row(i) - want.row(rows[std::size_t(i)])).cwiseAbs().maxCoeff()));
    lse_err = std::max(lse_err, std::abs(double(lse[std::size_t(i)] - want_lse[std::size_t(rows[std::size_t(i)])])));
  }
  const std::string what = std::string("softmax ") + name + (causal ? " causal" : "") + (zigzag ? " zigzag" : "") +
                           (engine ? " window+softcap+sink" : "");
  check(err <= tolerance<T>(), what + ": " + std::to_string(err));
  check(lse_err <= 10 * tolerance<T>(), what + " lse: " + std::to_string(lse_err));
}

template <class T>
void all_cases() {
  for (bool causal : {false, true}) {
    linear_case<T>(lrpe::no_encoding{}, causal, "no encoding");
    linear_case<T>(lrpe::type2<T>(8), causal, "type2");
    for (bool zigzag : {false, true}) {
      softmax_case<T>(lrpe::no_encoding{}, causal, zigzag, "no encoding");
      softmax_case<T>(lrpe::type2<T>(8), causal, zigzag, "type2");
      softmax_case<T>(lrpe::canonical::alibi<T>(8, {0.25}), causal, zigzag, "alibi");
      softmax_case<T>(lrpe::type2<T>(8), causal, zigzag, "type2", true);
    }
  }
}

/// Sums a parameter gradient over the ranks (its vectors, in double).
void allreduce(std::vector<double>& x) {
  if (!x.empty()) MPI_Allreduce(MPI_IN_PLACE, x.data(), int(x.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}
void allreduce(lrpe::encoder_gradient& g) {
  allreduce(g.lambda);
  allreduce(g.p);
}
double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return err / (1 + scale);
}
double max_rel(const lrpe::encoder_gradient& a, const lrpe::encoder_gradient& b) {
  return std::max(max_rel(a.lambda, b.lambda), max_rel(a.p, b.p));
}

/// The backward of sequence-parallel causal linear attention against one process's: the
/// rank's dq, dk, dv rows, and the parameter and decay gradients summed over the ranks.
template <class T>
void linear_backward_case(bool causal) {
  const lrpe::index_t n = 41, d = 8, dv = 6;
  const auto q = uniform<T>(n, d, 11), k = uniform<T>(n, d, 12), v = uniform<T>(n, dv, 13);
  const auto d_out = uniform<T>(n, dv, 14);
  const lrpe::type2<T> enc(d);
  const lrpe::feature_maps::elu_plus_one phi;
  double d_decay = 0, d_decay_mine = 0;
  lrpe::linear_options opt{.causal = causal, .norm = lrpe::normalisation::denominator, .decay = causal ? 0.95 : 1.0};
  opt.q_positions = opt.k_positions = 7;
  opt.decay_gradient = causal ? &d_decay : nullptr;
  lrpe::row_matrix<T> dq1(n, d), dk1(n, d), dv1(n, dv);
  auto g1 = enc.make_gradient();
  lrpe::linear_attention_backward(q, k, v, d_out, dq1, dk1, dv1, enc, phi, opt, &g1);
  const auto [r0, r1] = shard(n, rank);
  const lrpe::index_t m = r1 - r0;
  lrpe::linear_options mine = opt;
  mine.q_positions = mine.k_positions = 7 + r0;
  mine.decay_gradient = causal ? &d_decay_mine : nullptr;
  lrpe::row_matrix<T> dq(m, d), dk(m, d), dv_(m, dv);
  auto g = enc.make_gradient();
  lrpe::mpi::linear_attention_backward(MPI_COMM_WORLD, q.middleRows(r0, m), k.middleRows(r0, m), v.middleRows(r0, m),
                                       d_out.middleRows(r0, m), dq, dk, dv_, enc, phi, mine, &g);
  allreduce(g);
  MPI_Allreduce(MPI_IN_PLACE, &d_decay_mine, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  const double tol = 10 * tolerance<T>();
  const auto rows_err = [&](const lrpe::row_matrix<T>& got, const lrpe::row_matrix<T>& want) {
    return m == 0 ? 0.0
                  : double((got - want.middleRows(r0, m)).cwiseAbs().maxCoeff()) / (1 + double(want.cwiseAbs().maxCoeff()));
  };
  const std::string what = causal ? "linear backward causal " : "linear backward ";
  check(rows_err(dq, dq1) <= tol, what + "dq " + std::to_string(rows_err(dq, dq1)));
  check(rows_err(dk, dk1) <= tol, what + "dk " + std::to_string(rows_err(dk, dk1)));
  check(rows_err(dv_, dv1) <= tol, what + "dv " + std::to_string(rows_err(dv_, dv1)));
  check(max_rel(g, g1) <= tol, what + "dθ " + std::to_string(max_rel(g, g1)));
  check(std::abs(d_decay_mine - d_decay) <= tol * (1 + std::abs(d_decay)),
        "linear backward dλ " + std::to_string(d_decay_mine) + " vs " + std::to_string(d_decay));
}

/// The backward of ring softmax attention against one process's, zigzag or contiguous.
template <class T, class Encoding>
void softmax_backward_case(const Encoding& enc, bool causal, bool zigzag, bool with_lse, const char* name,
                           bool engine = false) {
  const lrpe::index_t block = 7, n = 2 * block * ranks, d = 8, dv = 5;
  const auto q = uniform<T>(n, d, 15), k = uniform<T>(n, d, 16), v = uniform<T>(n, dv, 17);
  const auto d_out = uniform<T>(n, dv, 18);
  lrpe::softmax_options<> opt;
  opt.causal = causal;
  double sink1 = 0, sink = 0;  // dL/dσ: one process's, and the ranks' shares summed
  if (engine) {
    set_engine_options(opt);
    opt.sink_gradient = &sink1;
  }
  lrpe::row_matrix<T> out1(n, dv), dq1(n, d), dk1(n, d), dv1(n, dv);
  lrpe::softmax_attention(q, k, v, out1, enc, opt);
  auto g1 = enc.make_gradient();
  lrpe::softmax_attention_backward(q, k, v, out1, d_out, {}, dq1, dk1, dv1, enc, opt, &g1);
  std::vector<lrpe::index_t> rows;
  if (zigzag) {
    for (lrpe::index_t b : {lrpe::index_t(rank), lrpe::index_t(2 * ranks - 1 - rank)})
      for (lrpe::index_t i = 0; i < block; ++i) rows.push_back(b * block + i);
  } else {
    const auto [r0, r1] = shard(n, rank);
    for (lrpe::index_t i = r0; i < r1; ++i) rows.push_back(i);
  }
  const auto m = static_cast<lrpe::index_t>(rows.size());
  lrpe::row_matrix<T> mq(m, d), mk(m, d), mv(m, dv), mo(m, dv), out(m, dv), dq(m, d), dk(m, d), dv_(m, dv);
  for (lrpe::index_t i = 0; i < m; ++i) {
    mq.row(i) = q.row(rows[std::size_t(i)]);
    mk.row(i) = k.row(rows[std::size_t(i)]);
    mv.row(i) = v.row(rows[std::size_t(i)]);
    mo.row(i) = d_out.row(rows[std::size_t(i)]);
  }
  std::vector<lrpe::position_t> pos(rows.begin(), rows.end());
  opt.q_positions = opt.k_positions = pos;
  if (engine) opt.sink_gradient = &sink;
  std::vector<T> lse(static_cast<std::size_t>(m));
  lrpe::mpi::softmax_attention(MPI_COMM_WORLD, mq, mk, mv, out, enc, opt, lrpe::backend::reference{}, std::span<T>(lse));
  auto g = enc.make_gradient();
  lrpe::mpi::softmax_attention_backward(MPI_COMM_WORLD, mq, mk, mv, out, mo,
                                        with_lse ? std::span<const T>(lse) : std::span<const T>(), dq, dk, dv_, enc,
                                        opt, &g);
  allreduce(g);
  MPI_Allreduce(MPI_IN_PLACE, &sink, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  double err = 0;
  for (lrpe::index_t i = 0; i < m; ++i) {
    const auto r = rows[std::size_t(i)];
    err = std::max({err, double((dq.row(i) - dq1.row(r)).cwiseAbs().maxCoeff()),
                    double((dk.row(i) - dk1.row(r)).cwiseAbs().maxCoeff()),
                    double((dv_.row(i) - dv1.row(r)).cwiseAbs().maxCoeff())});
  }
  const std::string what = std::string("softmax backward ") + name + (causal ? " causal" : "") +
                           (zigzag ? " zigzag" : "") + (with_lse ? "" : " (lse recomputed)") +
                           (engine ? " window+softcap+sink" : "");
  check(std::abs(sink - sink1) <= 10 * tolerance<T>() * (1 + std::abs(sink1)) && (!engine || sink1 != 0),
        what + " sink: " + std::to_string(sink) + " vs " + std::to_string(sink1));
  check(err <= 10 * tolerance<T>(), what + ": " + std::to_string(err));
  check(max_rel(g, g1) <= 10 * tolerance<T>(), what + " parameters: " + std::to_string(max_rel(g, g1)));
}

template <class T>
void backward_cases() {
  linear_backward_case<T>(true);
  linear_backward_case<T>(false);
  for (bool causal : {false, true}) {
    softmax_backward_case<T>(lrpe::type2<T>(8), causal, causal, true, "type2");
    softmax_backward_case<T>(lrpe::canonical::alibi<T>(8, {0.25}), causal, false, !causal, "alibi");
    softmax_backward_case<T>(lrpe::type2<T>(8), causal, !causal, causal, "type2", true);
  }
}

/// `call` must throw on every rank, an exception of type E whose message names `what`.
template <class E, class F>
void expect_error(F&& call, const std::string& what) {
  try {
    call();
    check(false, "no error for " + what);
  } catch (const E& e) {
    check(std::string(e.what()).find(what) != std::string::npos, "message '" + std::string(e.what()) + "' names " + what);
  } catch (const std::exception& e) {
    check(false, "wrong exception for " + what + ": " + e.what());
  }
}

void errors() {
  using T = double;
  const auto x = uniform<T>(4, 8, 9);
  lrpe::row_matrix<T> out(4, 8);
  // the last rank's v has the wrong width: every rank throws its shape_error, naming the rank
  const auto bad_v = uniform<T>(4, rank == ranks - 1 ? 7 : 8, 10);
  lrpe::row_matrix<T> bad_out(4, rank == ranks - 1 ? 7 : 8);
  expect_error<lrpe::shape_error>(
      [&] { lrpe::mpi::softmax_attention(MPI_COMM_WORLD, x, x, bad_v, out, lrpe::no_encoding{}); },
      "rank " + std::to_string(ranks - 1));
  // self-consistent shards that disagree across ranks (d_v): every rank throws
  if (ranks > 1) {
    expect_error<lrpe::shape_error>(
        [&] { lrpe::mpi::softmax_attention(MPI_COMM_WORLD, x, x, bad_v, bad_out, lrpe::no_encoding{}); }, "shards");
    // causal linear shards out of order (each rank at position 0)
    const lrpe::linear_options opt{.causal = true};
    expect_error<lrpe::parameter_error>(
        [&] { lrpe::mpi::linear_attention(MPI_COMM_WORLD, x, x, x, out, lrpe::no_encoding{}, lrpe::feature_maps::relu{}, opt); },
        "options.k_positions");
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  all_cases<float>();
  all_cases<double>();
  backward_cases<float>();
  backward_cases<double>();
  errors();
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("lrpe::mpi on %d ranks: %d failure(s)\n", ranks, total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
