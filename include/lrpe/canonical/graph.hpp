// SPDX-License-Identifier: MIT
/**
 * @file graph.hpp
 * Graphs for the graph encodings: adjacency lists, all-pairs shortest-path distances (one
 * breadth-first search per node, O(n·(n + e))), and Graphormer's two graph encodings (Ying et al.
 * 2021) as `pair_bias`es: the spatial encoding, whose bucket is the shortest-path distance
 * φ(v_i, v_j), and the edge encoding, the mean of edge features along a shortest path.
 *
 * Positions are node indices 0 … n − 1: the attention rows are the graph's nodes in that order.
 */
#pragma once

#include <lrpe/canonical/pair_bias.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace canonical {

/// Node i's out-neighbours are `adjacency[i]` (node indices in [0, adjacency.size())).
using adjacency_list = std::vector<std::vector<index_t>>;

/// The distance `shortest_path_distances` gives a pair with no path.
inline constexpr std::int32_t unreachable = -1;

namespace detail_ {

/// The graph encodings' size limit: n² int32 entries (distances, pair buckets) index an int32.
inline constexpr index_t max_graph_nodes = 46340;

/// Throws `parameter_error` naming `edges` unless both ends of edge e are nodes.
inline void require_edge(index_t u, index_t v, std::size_t e, index_t nodes, const char* where) {
  if (u < 0 || u >= nodes || v < 0 || v >= nodes)
    lrpe::detail::fail<parameter_error>(where, "edges",
                                        lrpe::detail::lazy_concat("endpoints must be in [0, nodes = ", nodes, ")"),
                                        lrpe::detail::concat("(", u, ", ", v, ") at [", e, "]"));
}

/// Throws `parameter_error` unless the graph has at most `max_graph_nodes` nodes and every
/// neighbour is one of them.
inline void require_adjacency(const adjacency_list& graph, const char* where) {
  const auto n = static_cast<index_t>(graph.size());
  lrpe::detail::require_parameter(n <= max_graph_nodes, where, "graph.size()", "must be <= 46340 (n^2 pairs)", n);
  for (index_t i = 0; i < n; ++i) {
    for (const index_t j : graph[static_cast<std::size_t>(i)]) {
      if (j < 0 || j >= n)
        lrpe::detail::fail<parameter_error>(where, "graph",
                                            lrpe::detail::lazy_concat("neighbours must be in [0, n = ", n, ")"),
                                            lrpe::detail::concat(j, " in the list of node ", i));
    }
  }
}

}  // namespace detail_

/**
 * The undirected graph of `nodes` nodes and `edges` (u, v): each edge in both lists, in the
 * order given (a repeated edge or a self-loop is kept; neither changes a distance).
 * @throws parameter_error (nodes < 0 or past 46340, an endpoint outside [0, nodes)).
 */
inline adjacency_list undirected_graph(index_t nodes, std::span<const std::pair<index_t, index_t>> edges) {
  constexpr const char* where = "lrpe::canonical::undirected_graph";
  lrpe::detail::require_parameter(nodes >= 0 && nodes <= detail_::max_graph_nodes, where, "nodes",
                                  "must be in [0, 46340] (n^2 distances in int32 indices)", nodes);
  adjacency_list g(static_cast<std::size_t>(nodes));
  for (std::size_t e = 0; e < edges.size(); ++e) {
    const auto [u, v] = edges[e];
    detail_::require_edge(u, v, e, nodes, where);
    g[static_cast<std::size_t>(u)].push_back(v);
    g[static_cast<std::size_t>(v)].push_back(u);
  }
  return g;
}

/**
 * All-pairs shortest-path distances (number of edges, following each list's edges as directed)
 * of a graph of n ≤ 46340 nodes: D(i, j) = the fewest edges from i to j, 0 on the diagonal,
 * `unreachable` (−1) without a path.
 * @throws parameter_error (more than 46340 nodes, a neighbour outside [0, n)).
 */
inline index_matrix shortest_path_distances(const adjacency_list& graph) {
  constexpr const char* where = "lrpe::canonical::shortest_path_distances";
  detail_::require_adjacency(graph, where);
  const auto n = static_cast<index_t>(graph.size());
  index_matrix dist = index_matrix::Constant(n, n, unreachable);
  std::vector<index_t> queue(static_cast<std::size_t>(n));
  for (index_t source = 0; source < n; ++source) {
    auto row = dist.row(source);
    row(source) = 0;
    std::size_t head = 0, tail = 0;
    queue[tail++] = source;
    while (head < tail) {
      const index_t u = queue[head++];
      for (const index_t v : graph[static_cast<std::size_t>(u)]) {
        if (row(v) != unreachable) continue;
        row(v) = row(u) + 1;
        queue[tail++] = v;
      }
    }
  }
  return dist;
}

/**
 * Graphormer's spatial bucket of each pair: φ = min(D(i, j), max_distance) for a reachable pair,
 * max_distance + 1 for an unreachable one (so the table has max_distance + 2 buckets).
 * @throws parameter_error (max_distance outside [0, 2^31 − 3]; an entry of `distances` below −1).
 */
inline index_matrix graphormer_spatial_index(const index_matrix& distances, index_t max_distance) {
  constexpr const char* where = "lrpe::canonical::graphormer_spatial_index";
  lrpe::detail::require_parameter(max_distance >= 0 && max_distance <= std::numeric_limits<std::int32_t>::max() - 2,
                                  where, "max_distance", "must be in [0, 2^31 - 3]", max_distance);
  index_matrix index(distances.rows(), distances.cols());
  for (index_t i = 0; i < distances.rows(); ++i) {
    for (index_t j = 0; j < distances.cols(); ++j) {
      const std::int32_t d = distances(i, j);
      if (d < unreachable)
        lrpe::detail::fail<parameter_error>(where, "distances", "entries must be >= 0, or -1 (unreachable)",
                                            lrpe::detail::concat(d, " at (", i, ", ", j, ")"));
      index(i, j) = d == unreachable ? static_cast<std::int32_t>(max_distance + 1)
                                     : static_cast<std::int32_t>(std::min<index_t>(d, max_distance));
    }
  }
  return index;
}

/**
 * Graphormer's spatial encoding b_φ(v_i, v_j) over a graph's nodes: `pair_bias` with the
 * shortest-path buckets of `graphormer_spatial_index(shortest_path_distances(graph),
 * max_distance)` and `table` heads × (max_distance + 2) (column max_distance + 1: unreachable).
 */
template <real_scalar T>
pair_bias<T> graphormer_spatial_bias(index_t d, const adjacency_list& graph, index_t max_distance,
                                     row_matrix<T> table) {
  constexpr const char* where = "lrpe::canonical::graphormer_spatial_bias";
  lrpe::detail::require_shape(!graph.empty(), where, "graph.size()", "must be >= 1", graph.size());
  index_matrix index = graphormer_spatial_index(shortest_path_distances(graph), max_distance);
  detail_::require_table_shape(table, table.rows(), max_distance + 2, where, "table");
  return pair_bias<T>(d, std::move(index), std::move(table));
}

/**
 * One shortest path per ordered pair of an undirected graph's nodes, as the edge ids (indices
 * into `edges`) of its first `max_hops` edges: Graphormer's `edge_input` (Ying et al. 2021, the
 * edge encoding's paths, `multi_hop_max_dist` = max_hops). The path is the one breadth-first
 * search from i finds first (each node's edges in the order of `edges`); where several shortest
 * paths exist, Graphormer's Floyd–Warshall preprocessing may pick another of the same length.
 */
struct graph_paths {
  index_t nodes = 0, max_hops = 0;
  index_matrix distance;           ///< φ(i, j); −1 (`unreachable`) without a path
  std::vector<std::int32_t> edge;  ///< nodes² × max_hops edge ids, pair (i, j) at (i·nodes + j)·max_hops

  /// The edge ids of the first min(φ(i, j), max_hops) edges of the path from i to j.
  [[nodiscard]] std::span<const std::int32_t> path(index_t i, index_t j) const noexcept {
    const std::int32_t phi = distance(i, j);
    const auto len = static_cast<std::size_t>(phi <= 0 ? 0 : std::min<index_t>(phi, max_hops));
    return {edge.data() + (i * nodes + j) * max_hops, len};
  }
};

/**
 * The paths of `graph_paths` for `nodes` nodes and undirected `edges` (u, v).
 * @throws parameter_error (nodes outside [1, 46340], an endpoint outside [0, nodes), max_hops < 1,
 *         more than 2^31 − 1 edges, nodes²·max_hops past index_t).
 */
inline graph_paths shortest_paths(index_t nodes, std::span<const std::pair<index_t, index_t>> edges, index_t max_hops) {
  constexpr const char* where = "lrpe::canonical::shortest_paths";
  lrpe::detail::require_parameter(nodes >= 1 && nodes <= detail_::max_graph_nodes, where, "nodes",
                                  "must be in [1, 46340]", nodes);
  lrpe::detail::require_parameter(max_hops >= 1 && max_hops <= std::numeric_limits<index_t>::max() / (nodes * nodes),
                                  where, "max_hops", "must be >= 1 with nodes^2 * max_hops an index_t", max_hops);
  lrpe::detail::require_parameter(edges.size() <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()),
                                  where, "edges.size()", "must be <= 2^31 - 1", edges.size());
  std::vector<std::vector<std::pair<index_t, std::int32_t>>> adj(static_cast<std::size_t>(nodes));
  for (std::size_t e = 0; e < edges.size(); ++e) {
    const auto [u, v] = edges[e];
    detail_::require_edge(u, v, e, nodes, where);
    adj[static_cast<std::size_t>(u)].emplace_back(v, static_cast<std::int32_t>(e));
    adj[static_cast<std::size_t>(v)].emplace_back(u, static_cast<std::int32_t>(e));
  }
  graph_paths out{nodes, max_hops, index_matrix::Constant(nodes, nodes, unreachable),
                  std::vector<std::int32_t>(static_cast<std::size_t>(nodes * nodes * max_hops), -1)};
  std::vector<index_t> queue(static_cast<std::size_t>(nodes));
  std::vector<std::int32_t> via(static_cast<std::size_t>(nodes));  // the BFS tree's edge into each node
  std::vector<index_t> parent(static_cast<std::size_t>(nodes));
  std::vector<std::int32_t> walk;
  for (index_t source = 0; source < nodes; ++source) {
    auto dist = out.distance.row(source);
    dist(source) = 0;
    std::size_t head = 0, tail = 0;
    queue[tail++] = source;
    while (head < tail) {
      const index_t u = queue[head++];
      for (const auto& [v, e] : adj[static_cast<std::size_t>(u)]) {
        if (dist(v) != unreachable) continue;
        dist(v) = dist(u) + 1;
        via[static_cast<std::size_t>(v)] = e;
        parent[static_cast<std::size_t>(v)] = u;
        queue[tail++] = v;
      }
    }
    for (index_t target = 0; target < nodes; ++target) {
      if (dist(target) <= 0) continue;
      walk.clear();
      for (index_t x = target; x != source; x = parent[static_cast<std::size_t>(x)]) walk.push_back(via[static_cast<std::size_t>(x)]);
      std::int32_t* slot = out.edge.data() + (source * nodes + target) * max_hops;
      const auto hops = std::min<std::size_t>(walk.size(), static_cast<std::size_t>(max_hops));
      for (std::size_t n = 0; n < hops; ++n) slot[n] = walk[walk.size() - 1 - n];  // from the source on
    }
  }
  return out;
}

/**
 * Graphormer's edge encoding c_h(i, j) = (1/N) Σ_{n<N} x_{e_n}·w_{h,n}, N = min(φ(i, j), max_hops),
 * over the paths of `shortest_paths` (0 on the diagonal and for unreachable pairs), as a dense
 * `pair_bias` (`pair_bias::dense`, positions = nodes).
 * @param edge_features E × d_E, row e the feature of edge e (Graphormer's `edge_encoder` output).
 * @param hop_weights    heads × (max_hops·d_E): w_{h,n} at columns n·d_E … (`edge_dis_encoder`).
 * @throws shape_error (sizes), domain_error (non-finite features or weights).
 */
template <real_scalar T>
pair_bias<T> graphormer_edge_bias(index_t d, const graph_paths& paths, const row_matrix<T>& edge_features,
                                  const row_matrix<T>& hop_weights) {
  constexpr const char* where = "lrpe::canonical::graphormer_edge_bias";
  const index_t n = paths.nodes, de = edge_features.cols();
  lrpe::detail::require_shape(de >= 1, where, "edge_features.cols()", "must be >= 1 (d_E)", de);
  lrpe::detail::require_shape(hop_weights.rows() >= 1 && hop_weights.cols() == paths.max_hops * de, where, "hop_weights",
                              lrpe::detail::lazy_concat("must be heads x (max_hops*d_E) = heads x ", paths.max_hops * de),
                              lrpe::detail::lazy_concat(hop_weights.rows(), "x", hop_weights.cols()));
  detail_::require_finite_table(edge_features, where, "edge_features");
  detail_::require_finite_table(hop_weights, where, "hop_weights");
  row_matrix<T> table = row_matrix<T>::Zero(hop_weights.rows(), n * n);
  for (index_t i = 0; i < n; ++i) {
    for (index_t j = 0; j < n; ++j) {
      const auto path = paths.path(i, j);
      for (const std::int32_t e : path)
        lrpe::detail::require_shape(e >= 0 && e < edge_features.rows(), where, "edge_features.rows()",
                                    lrpe::detail::lazy_concat("must cover the paths' edge ids (", e, ")"),
                                    edge_features.rows());
      for (index_t h = 0; h < hop_weights.rows(); ++h) {
        double c = 0;
        for (std::size_t hop = 0; hop < path.size(); ++hop)
          for (index_t k = 0; k < de; ++k)
            c += static_cast<double>(edge_features(path[hop], k)) *
                 static_cast<double>(hop_weights(h, static_cast<index_t>(hop) * de + k));
        table(h, i * n + j) = path.empty() ? T(0) : static_cast<T>(c / static_cast<double>(path.size()));
      }
    }
  }
  return pair_bias<T>::dense(d, n, n, std::move(table));
}

/// The gradients of Graphormer's edge encoding: dL/dw (heads × max_hops·d_E) and dL/dx (E × d_E).
struct graphormer_edge_gradient {
  row_matrix<double> hop_weights, edge_features;
};

/**
 * dL/dw and dL/dx of `graphormer_edge_bias` from the dense bias's gradients: `bias_grads[h]` is
 * head h's gradient vector of the `pair_bias` (n² entries: `make_gradient()` of `head(h)`, filled
 * by the attention backward).
 * @throws shape_error (a gradient of another size, or not one per head).
 */
template <real_scalar T>
graphormer_edge_gradient graphormer_edge_gradients(const graph_paths& paths, const row_matrix<T>& edge_features,
                                                   const row_matrix<T>& hop_weights,
                                                   std::span<const std::vector<double>> bias_grads) {
  constexpr const char* where = "lrpe::canonical::graphormer_edge_gradients";
  const index_t n = paths.nodes, de = edge_features.cols(), heads = hop_weights.rows();
  lrpe::detail::require_shape(static_cast<index_t>(bias_grads.size()) == heads, where, "bias_grads.size()",
                              lrpe::detail::lazy_concat("must be heads = ", heads), bias_grads.size());
  graphormer_edge_gradient out{row_matrix<double>::Zero(heads, hop_weights.cols()),
                               row_matrix<double>::Zero(edge_features.rows(), de)};
  for (index_t h = 0; h < heads; ++h) {
    const std::vector<double>& g = bias_grads[static_cast<std::size_t>(h)];
    lrpe::detail::require_shape(static_cast<index_t>(g.size()) == n * n, where, "bias_grads[h].size()",
                                lrpe::detail::lazy_concat("must be nodes^2 = ", n * n), g.size());
    for (index_t i = 0; i < n; ++i) {
      for (index_t j = 0; j < n; ++j) {
        const auto path = paths.path(i, j);
        if (path.empty()) continue;
        const double w = g[static_cast<std::size_t>(i * n + j)] / static_cast<double>(path.size());
        for (std::size_t hop = 0; hop < path.size(); ++hop) {
          for (index_t k = 0; k < de; ++k) {
            const index_t c = static_cast<index_t>(hop) * de + k;
            out.hop_weights(h, c) += w * static_cast<double>(edge_features(path[hop], k));
            out.edge_features(path[hop], k) += w * static_cast<double>(hop_weights(h, c));
          }
        }
      }
    }
  }
  return out;
}

}  // namespace canonical
}  // namespace v0
}  // namespace lrpe
