// SPDX-License-Identifier: MIT
// lrpe::mpi against the single-process calls, run by ctest under mpiexec on 1 to 4 ranks: every
// rank builds the whole input from a seed, runs its shard, and compares its rows. Float and
// double; causal and not; no encoding, an LRPE encoder (Type 2), ALiBi; uneven shards, a rank
// with no rows, zigzag blocks; and errors, thrown on every rank alike.
#include <lrpe/mpi.hpp>

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

template <class T, class Encoding>
void softmax_case(const Encoding& enc, bool causal, bool zigzag, const char* name) {
  const lrpe::index_t block = 7, n = 2 * block * ranks, d = 8, dv = 5;
  const auto q = uniform<T>(n, d, 4), k = uniform<T>(n, d, 5), v = uniform<T>(n, dv, 6);
  lrpe::softmax_options<> opt;
  opt.causal = causal;
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
  const std::string what = std::string("softmax ") + name + (causal ? " causal" : "") + (zigzag ? " zigzag" : "");
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
    }
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
  errors();
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("lrpe::mpi on %d ranks: %d failure(s)\n", ranks, total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
