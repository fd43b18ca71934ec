// SPDX-License-Identifier: MIT
// Ring softmax attention with RoPE, causal, balanced: the sequence is cut in 2P blocks and rank
// r holds blocks r and 2P−1−r (zigzag), so every rank has as many visible (query, key) pairs.
// K/V blocks travel around the ring; each rank merges its partial results by their
// log-sum-exps and checks its rows against the single-process call.
//
//   mpiexec -n 4 ./example_mpi_ring_attention
#include <lrpe/mpi.hpp>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);

  using T = float;
  const lrpe::index_t block = 48, n = 2 * block * ranks, d = 64;
  lrpe::generator g(7);
  lrpe::row_matrix<T> q(n, d), k(n, d), v(n, d);
  for (auto* m : {&q, &k, &v})
    for (lrpe::index_t i = 0; i < m->size(); ++i) m->data()[i] = static_cast<T>(2 * g.uniform01() - 1);
  const lrpe::rope_neox<T> rope(d);

  // zigzag: blocks r and 2P − 1 − r, with their global positions
  std::vector<lrpe::index_t> rows;
  for (lrpe::index_t b : {lrpe::index_t(rank), lrpe::index_t(2 * ranks - 1 - rank)})
    for (lrpe::index_t i = 0; i < block; ++i) rows.push_back(b * block + i);
  const auto m = static_cast<lrpe::index_t>(rows.size());
  lrpe::row_matrix<T> my_q(m, d), my_k(m, d), my_v(m, d), out(m, d);
  std::vector<lrpe::position_t> pos(rows.begin(), rows.end());
  for (lrpe::index_t i = 0; i < m; ++i) {
    my_q.row(i) = q.row(rows[std::size_t(i)]);
    my_k.row(i) = k.row(rows[std::size_t(i)]);
    my_v.row(i) = v.row(rows[std::size_t(i)]);
  }
  lrpe::softmax_options<> options;
  options.causal = true;
  options.q_positions = options.k_positions = pos;
  lrpe::mpi::softmax_attention(MPI_COMM_WORLD, my_q, my_k, my_v, out, rope, options);

  lrpe::row_matrix<T> want(n, d);
  lrpe::softmax_attention(q, k, v, want, rope, lrpe::softmax_options<>{.causal = true});
  double err = 0;
  for (lrpe::index_t i = 0; i < m; ++i)
    err = std::max(err, double((out.row(i) - want.row(rows[std::size_t(i)])).cwiseAbs().maxCoeff()));
  double worst = 0;
  MPI_Allreduce(&err, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("ring attention (RoPE, causal, zigzag), n = %ld over %d ranks: max difference %.2e\n",
                static_cast<long>(n), ranks, worst);
  MPI_Finalize();
  return worst <= 2e-6 ? 0 : 1;
}
