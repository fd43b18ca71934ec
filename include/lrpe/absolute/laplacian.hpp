// SPDX-License-Identifier: MIT
/**
 * @file laplacian.hpp
 * Laplacian-eigenvector positional encodings of a graph's nodes (Dwivedi & Bresson 2020; Dwivedi
 * et al., "Benchmarking Graph Neural Networks"): node i's encoding is row i of the eigenvectors of
 * the normalised Laplacian L = I − D^{−1/2} A D^{−1/2} for its k smallest eigenvalues after the
 * first (λ₁ = 0, whose eigenvector only carries the degrees). An absolute encoding: it is added
 * to (or concatenated with) the node features before attention.
 *
 * - A is the graph's undirected, unweighted adjacency: an edge listed in either direction counts
 *   once, self-loops are dropped; an isolated node has D^{−1/2} = 0 (its row of L is e_i).
 * - The eigenproblem is solved in double by Eigen's SelfAdjointEigenSolver (dense, O(n³)).
 * - **Sign ambiguity.** Each eigenvector is defined up to its sign (up to a rotation where an
 *   eigenvalue repeats). lrpe fixes the sign deterministically: the entry of largest magnitude
 *   (the first of them on a tie, entries within a relative 10⁻⁹ of each other tying) is positive. Models are trained against the ambiguity by
 *   flipping signs at random: `laplacian_options::random_sign_flip` with a `seed` (each vector
 *   is negated with probability 1/2, reproducibly: core/random.hpp).
 * - A graph with n ≤ k nodes has only n − 1 such eigenvectors: the remaining columns are zero
 *   (the padding of the reference implementations, so that graphs of any size batch together).
 */
#pragma once

#include <lrpe/canonical/graph.hpp>
#include <lrpe/core/random.hpp>

#include <Eigen/Eigenvalues>

#include <cmath>
#include <cstdint>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace absolute {

/// How `laplacian_pe` picks the eigenvectors' signs.
struct laplacian_options {
  bool random_sign_flip = false;  ///< negate each vector with probability 1/2 (training augmentation)
  std::uint64_t seed = 0;         ///< the flips' seed (with `random_sign_flip`)
};

/// The encodings of n nodes: `vectors` n × k (row i: node i), `eigenvalues` the k eigenvalues
/// of L they belong to, ascending (0 for a zero padding column).
template <real_scalar T>
struct laplacian_encoding {
  row_matrix<T> vectors;
  std::vector<double> eigenvalues;
};

/**
 * Laplacian-eigenvector encodings of width k of a graph's nodes (see the file comment).
 * @throws parameter_error (k < 1; the graph's checks of `canonical::shortest_path_distances`:
 *         a neighbour outside [0, n), more than 46340 nodes), shape_error (an empty graph).
 */
template <real_scalar T = double>
laplacian_encoding<T> laplacian_pe(const canonical::adjacency_list& graph, index_t k, const laplacian_options& options = {}) {
  constexpr const char* where = "lrpe::absolute::laplacian_pe";
  const auto n = static_cast<index_t>(graph.size());
  lrpe::detail::require_shape(n >= 1, where, "graph.size()", "must be >= 1", n);
  canonical::detail_::require_adjacency(graph, where);
  lrpe::detail::require_parameter(k >= 1, where, "k", "must be >= 1", k);
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(n, n);
  for (index_t i = 0; i < n; ++i)
    for (const index_t j : graph[static_cast<std::size_t>(i)])
      if (j != i) a(i, j) = a(j, i) = 1.0;
  Eigen::VectorXd inv_sqrt_deg(n);
  for (index_t i = 0; i < n; ++i) {
    const double deg = a.row(i).sum();
    inv_sqrt_deg(i) = deg > 0 ? 1.0 / std::sqrt(deg) : 0.0;
  }
  const Eigen::MatrixXd laplacian =
      Eigen::MatrixXd::Identity(n, n) - inv_sqrt_deg.asDiagonal() * a * inv_sqrt_deg.asDiagonal();
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> solver(laplacian);
  if (solver.info() != Eigen::Success)
    lrpe::detail::fail<domain_error>(where, "graph", "must give a Laplacian whose eigenproblem converges",
                                     "no convergence");
  generator flips(options.seed);
  laplacian_encoding<T> out{row_matrix<T>::Zero(n, k), std::vector<double>(static_cast<std::size_t>(k), 0.0)};
  for (index_t c = 0; c < k && c + 1 < n; ++c) {
    Eigen::VectorXd v = solver.eigenvectors().col(c + 1);  // ascending; column 0 is λ₁ = 0
    // the first entry within a relative 1e-9 of the largest magnitude (entries of equal
    // magnitude, e.g. by symmetry, differ in their last bits)
    const double largest = v.cwiseAbs().maxCoeff();
    index_t top = 0;
    while (std::abs(v(top)) < largest * (1 - 1e-9)) ++top;
    if (v(top) < 0) v = -v;
    if (options.random_sign_flip && flips.below(2) == 1) v = -v;
    out.vectors.col(c) = v.cast<T>();
    out.eigenvalues[static_cast<std::size_t>(c)] = solver.eigenvalues()(c + 1);
  }
  return out;
}

}  // namespace absolute
}  // namespace v0
}  // namespace lrpe
