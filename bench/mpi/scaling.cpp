// SPDX-License-Identifier: MIT
// lrpe::mpi's costs on this machine, for docs/scaling.md: run under mpiexec on 1 and on 2 ranks
// (not Google Benchmark: each measurement is a collective over the ranks, timed by rank 0 as the
// median of repeats with a barrier before each).
//
//   pingpong   α (latency) and β (bandwidth) of the MPI transport between ranks 0 and 1, from
//              round trips of 8 B … 16 MiB (2 ranks only)
//   anchor     the same local job on every rank at once: does the compute scale with ranks?
//   linear     causal linear attention, 8 heads, d = 64, n = 65536, identity φ, RoPE, SIMD
//              backend, contiguous shards (lrpe::mpi::linear_attention per head)
//   ring       causal ring softmax attention, 8 heads, d = 64, n = 16384, SIMD backend, zigzag
//              shards (lrpe::mpi::softmax_attention per head)
//
//   mpiexec -n 1 build/release/bench/bench_mpi_scaling; mpiexec -n 2 build/release/bench/bench_mpi_scaling
#include <lrpe/mpi.hpp>
#include <lrpe/simd.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace {

int rank = 0, ranks = 1;

/// Median over `repeats` of the slowest rank's time of `f` (seconds), a barrier before each.
template <class F>
double median_seconds(int repeats, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    f();
    double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    t.push_back(slowest);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void pingpong() {
  if (ranks < 2) return;
  std::vector<char> buf(std::size_t(1) << 24);
  for (std::size_t bytes = 8; bytes <= buf.size(); bytes *= 8) {
    const int reps = bytes < (1 << 20) ? 200 : 20;
    const double s = median_seconds(5, [&] {
      for (int i = 0; i < reps; ++i) {
        if (rank == 0) {
          MPI_Send(buf.data(), int(bytes), MPI_BYTE, 1, 0, MPI_COMM_WORLD);
          MPI_Recv(buf.data(), int(bytes), MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
          MPI_Recv(buf.data(), int(bytes), MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(buf.data(), int(bytes), MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        }
      }
    });
    if (rank == 0)
      std::printf("pingpong %9zu B: one way %.3g us, %.3g GB/s\n", bytes, s / (2 * reps) * 1e6,
                  double(bytes) / (s / (2 * reps)) * 1e-9);
  }
}

void compute_anchor() {
  // the same local job on every rank at once (SIMD causal softmax, one head, n = 4096, no MPI):
  // its time on P ranks over its time on one is how far the machine's compute scales
  using T = float;
  const lrpe::index_t n = 4096, d = 64;
  lrpe::generator g(3);
  lrpe::row_matrix<T> q(n, d), out(n, d);
  for (lrpe::index_t i = 0; i < q.size(); ++i) q.data()[i] = static_cast<T>(g.uniform01() - 0.5);
  const double s = median_seconds(5, [&] {
    lrpe::softmax_attention(q, q, q, out, lrpe::no_encoding{}, lrpe::softmax_options<>{.causal = true},
                            lrpe::backend::simd<>{});
  });
  if (rank == 0)
    std::printf("compute anchor (a local causal softmax, n = 4096, on every rank at once): %.4g s, %.3g GFLOP/s "
                "per rank\n",
                s, 2.0 * n * n * d / s * 1e-9);
}

void linear() {
  using T = float;
  const lrpe::index_t n = 65536, d = 64, heads = 8;
  const lrpe::index_t r0 = n * rank / ranks, m = n * (rank + 1) / ranks - r0;
  lrpe::generator g(1);
  std::vector<lrpe::row_matrix<T>> q, k, v, out;
  for (lrpe::index_t h = 0; h < heads; ++h) {
    for (auto* x : {&q, &k, &v}) {
      x->emplace_back(m, d);
      for (lrpe::index_t i = 0; i < x->back().size(); ++i) x->back().data()[i] = static_cast<T>(g.uniform01() - 0.5);
    }
    out.emplace_back(m, d);
  }
  const lrpe::rope_neox<T> rope(d);
  lrpe::linear_options opt{.causal = true};
  opt.q_positions = opt.k_positions = r0;
  const double s = median_seconds(15, [&] {
    for (lrpe::index_t h = 0; h < heads; ++h)
      lrpe::mpi::linear_attention(MPI_COMM_WORLD, q[h], k[h], v[h], out[h], rope, lrpe::feature_maps::identity{}, opt,
                                  lrpe::backend::simd<>{});
  });
  if (rank == 0) std::printf("linear causal n = %ld, 8 heads, d = 64: %.4g s on %d ranks\n", long(n), s, ranks);
}

void ring() {
  using T = float;
  const lrpe::index_t n = 16384, d = 64, heads = 8, block = n / (2 * ranks);
  std::vector<lrpe::position_t> pos;
  for (lrpe::index_t b : {lrpe::index_t(rank), lrpe::index_t(2 * ranks - 1 - rank)})
    for (lrpe::index_t i = 0; i < block; ++i) pos.push_back(b * block + i);
  const auto m = static_cast<lrpe::index_t>(pos.size());
  lrpe::generator g(2);
  std::vector<lrpe::row_matrix<T>> q, k, v, out;
  for (lrpe::index_t h = 0; h < heads; ++h) {
    for (auto* x : {&q, &k, &v}) {
      x->emplace_back(m, d);
      for (lrpe::index_t i = 0; i < x->back().size(); ++i) x->back().data()[i] = static_cast<T>(g.uniform01() - 0.5);
    }
    out.emplace_back(m, d);
  }
  lrpe::softmax_options<> opt;
  opt.causal = true;
  opt.q_positions = opt.k_positions = pos;
  const double s = median_seconds(3, [&] {
    for (lrpe::index_t h = 0; h < heads; ++h)
      lrpe::mpi::softmax_attention(MPI_COMM_WORLD, q[h], k[h], v[h], out[h], lrpe::no_encoding{}, opt,
                                   lrpe::backend::simd<>{});
  });
  if (rank == 0) std::printf("ring softmax causal n = %ld, 8 heads, d = 64: %.4g s on %d ranks\n", long(n), s, ranks);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  pingpong();
  compute_anchor();
  linear();
  ring();
  MPI_Finalize();
}
