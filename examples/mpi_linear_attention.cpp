// SPDX-License-Identifier: MIT
// Sequence-parallel causal linear attention: the sequence's rows split in contiguous shards,
// one per MPI rank; each rank's summary (its keys' state) reaches the later ranks through one
// MPI_Exscan, and each rank computes its rows from its incoming state. Every rank checks its
// rows against the single-process call (each rank can build the whole input from the seed).
//
//   mpiexec -n 4 ./example_mpi_linear_attention
#include <lrpe/mpi.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);

  using T = double;
  const lrpe::index_t n = 1000, d = 32, dv = 32;
  lrpe::generator g(42);  // the same whole input on every rank
  lrpe::row_matrix<T> q(n, d), k(n, d), v(n, dv);
  for (auto* m : {&q, &k, &v})
    for (lrpe::index_t i = 0; i < m->size(); ++i) m->data()[i] = 2 * g.uniform01() - 1;
  const lrpe::type2<T> encoder(d);  // LRPE with learned θ; any linearizable encoding works
  const lrpe::feature_maps::elu_plus_one phi;

  // this rank's shard: rows [r0, r1), at their global positions
  const lrpe::index_t r0 = n * rank / ranks, r1 = n * (rank + 1) / ranks;
  lrpe::linear_options options{.causal = true, .norm = lrpe::normalisation::denominator, .decay = 0.99};
  options.q_positions = options.k_positions = r0;
  lrpe::row_matrix<T> out(r1 - r0, dv);
  lrpe::mpi::linear_attention(MPI_COMM_WORLD, q.middleRows(r0, r1 - r0), k.middleRows(r0, r1 - r0),
                              v.middleRows(r0, r1 - r0), out, encoder, phi, options);

  // the single-process result, for the check
  lrpe::linear_options whole = options;
  whole.q_positions = whole.k_positions = 0;
  lrpe::row_matrix<T> want(n, dv);
  lrpe::linear_attention(q, k, v, want, encoder, phi, whole);
  const double err = (out - want.middleRows(r0, r1 - r0)).cwiseAbs().maxCoeff() / (1 + want.cwiseAbs().maxCoeff());
  double worst = 0;
  MPI_Reduce(&err, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("causal linear attention, n = %ld over %d ranks: max difference from one process %.2e\n",
                static_cast<long>(n), ranks, worst);
  MPI_Bcast(&worst, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst <= 1e-12 ? 0 : 1;
}
