// SPDX-License-Identifier: MIT
// libFuzzer target: the position functions of lrpe/canonical with raw int64 inputs and raw
// configurations: T5 buckets, DeBERTa log buckets, Shaw's clip, the saturating offsets, ALiBi
// slopes and biases, and the tables indexed by them (t5_bias, urpe, toeplitz_bias, shaw,
// deberta_v2, cosformer's weight); and graphs from raw node counts and edge lists (the graph
// encodings' distances, buckets and paths). Each function returns a value in its documented
// range or throws an lrpe::error; sanitizers catch undefined behaviour on any input, valid or not.
//
// Input: one selector byte, then the values that case reads (fuzz_common.hpp).
#include "fuzz_common.hpp"

#include <algorithm>
#include <vector>

namespace {

using namespace lrpe_fuzz;
namespace c = lrpe::canonical;
constexpr position_t pmax = std::numeric_limits<position_t>::max();
constexpr position_t pmin = std::numeric_limits<position_t>::min();
__extension__ typedef __int128 i128;  // exact differences of two int64

bool t5_valid(const c::t5_buckets& cfg) {
  try {
    cfg.validate("fuzz");
    return true;
  } catch (const lrpe::error&) {
    return false;
  }
}

bool deberta_valid(const c::deberta_buckets& cfg) {
  try {
    cfg.validate("fuzz");
    return true;
  } catch (const lrpe::error&) {
    return false;
  }
}

/// T5's bucket of rel with a raw configuration: in [0, num_buckets) when the configuration
/// validates, the exact range for small offsets, the direction halves, monotone in |rel|.
void t5(input& in) {
  c::t5_buckets cfg;
  cfg.num_buckets = in.edgy_i64();
  cfg.max_distance = in.edgy_i64();
  cfg.bidirectional = in.flag();
  const position_t rel = in.edgy_i64();
  const bool valid = t5_valid(cfg);
  // Open at the time of writing: an unvalidated configuration is UB inside (issue 36 §2 item 4:
  // num_buckets ≤ 1; also max_exact = 0 and max_distance ≤ max_exact: regressions/fuzz_buckets)
  if (!valid && known_open("t5-invalid-config")) return;
  // Open at the time of writing (found here): a valid configuration with max_exact past 2^53,
  // where max_distance / max_exact rounds to 1 in double, gives 0/0 (regressions/fuzz_buckets)
  if (valid && cfg.num_buckets > (index_t{1} << 53) && known_open("t5-huge-config")) return;
  const index_t b = c::t5_bucket(rel, cfg);  // noexcept, documented for any input not to be UB
  if (!valid) return;
  const index_t nb = cfg.num_buckets;
  LRPE_FUZZ_CHECK(b >= 0 && b < nb, "t5_bucket out of [0, num_buckets)");
  const index_t half = cfg.bidirectional ? nb / 2 : nb;
  const index_t max_exact = half / 2;
  const position_t mag = cfg.bidirectional ? c::saturating_abs(rel) : (rel < 0 ? c::saturating_abs(rel) : 0);
  const index_t base = cfg.bidirectional && rel > 0 ? half : 0;
  if (mag < max_exact) LRPE_FUZZ_CHECK(b == base + mag, "t5_bucket of a small offset is not the offset itself");
  LRPE_FUZZ_CHECK(b >= base && b < base + half, "t5_bucket outside its direction's half");
  // monotone away from 0 (each direction)
  if (rel > 0 && rel < pmax && cfg.bidirectional)
    LRPE_FUZZ_CHECK(c::t5_bucket(rel + 1, cfg) >= b, "t5_bucket not monotone for rel > 0");
  if (rel <= 0 && rel > pmin) LRPE_FUZZ_CHECK(c::t5_bucket(rel - 1, cfg) >= b, "t5_bucket not monotone for rel <= 0");
  if (!cfg.bidirectional && rel >= 0) LRPE_FUZZ_CHECK(b == 0, "causal t5_bucket of a future key is not 0");
  // The tables indexed by it: t5_bias and urpe over a small table (num_buckets ≤ 256).
  if (nb <= 256) {
    lrpe::row_matrix<double> table(1, nb);
    for (index_t j = 0; j < nb; ++j) table(0, j) = static_cast<double>(j);
    const position_t s = in.edgy_i64(), t = in.edgy_i64();
    const c::t5_bias<double> bias(1, cfg, table);
    const double x = bias.bias(s, t);
    LRPE_FUZZ_CHECK(x == static_cast<double>(c::t5_bucket(c::saturating_offset(s, t), cfg)),
                    "t5_bias::bias is not table[bucket(t - s)]");
    const c::urpe<double> u(cfg, table);
    LRPE_FUZZ_CHECK(u.weight(s, t) == x, "urpe::weight is not table[bucket(t - s)]");
  }
}

/// deberta_v2's clamped table row of a raw offset, on a small table (span ≤ 512), and its score.
void table_row(input& in, const c::deberta_buckets& cfg) {
  if (cfg.span() > 512) return;
  const index_t rows = 2 * cfg.span();
  lrpe::row_matrix<double> table(rows, 1);
  for (index_t i = 0; i < rows; ++i) table(i, 0) = static_cast<double>(i);
  const c::deberta_v2<double> v(1, 1, cfg, table, table);
  const position_t delta = in.edgy_i64();
  const index_t row = v.table_index(delta);
  LRPE_FUZZ_CHECK(row >= 0 && row < rows, "deberta_v2::table_index out of [0, 2*span)");
  const double q = in.value<double>(), k = in.value<double>();
  const position_t s = in.edgy_i64(), t = in.edgy_i64();
  LRPE_FUZZ_CHECK(finite(v.score(&q, s, &k, t)), "deberta_v2::score not finite for finite tables");
}

/// DeBERTa's log bucket: odd, the identity for |rel| ≤ mid, beyond mid in magnitude otherwise,
/// monotone; and the clamped table index in [0, 2·span).
void deberta(input& in) {
  const index_t bucket_size = in.edgy_i64();
  const position_t max_position = in.edgy_i64();
  const position_t rel = in.edgy_i64();
  const c::deberta_buckets cfg{bucket_size, max_position};
  const bool valid_cfg = deberta_valid(cfg);
  const bool valid = valid_cfg && cfg.log_buckets();
  // §2 item 4 (known, open at the time of writing): extremes of the raw arguments are UB inside
  if (!valid && known_open("deberta-extremes")) return;
  const position_t f = c::deberta_log_bucket(rel, bucket_size, max_position);  // noexcept
  if (valid_cfg) table_row(in, cfg);
  if (!valid) return;
  const position_t mid = bucket_size / 2;
  if (rel > -mid && rel < mid) {
    LRPE_FUZZ_CHECK(f == rel, "deberta_log_bucket changes an offset below mid");
  } else if (c::saturating_abs(rel) <= mid) {
    LRPE_FUZZ_CHECK(f == rel, "deberta_log_bucket changes an offset of magnitude mid");
  } else {
    LRPE_FUZZ_CHECK((rel > 0) == (f > 0), "deberta_log_bucket changes the sign");
    LRPE_FUZZ_CHECK(c::saturating_abs(f) > mid, "deberta_log_bucket of |rel| > mid is not beyond mid");
  }
  if (rel != pmin) LRPE_FUZZ_CHECK(c::deberta_log_bucket(-rel, bucket_size, max_position) == -f, "not odd");
  if (rel < pmax) LRPE_FUZZ_CHECK(c::deberta_log_bucket(rel + 1, bucket_size, max_position) >= f, "not monotone");
}

/// Shaw's clip and the saturating helpers, against __int128 arithmetic.
void clip_and_offsets(input& in) {
  const position_t x = in.edgy_i64(), r = in.edgy_i64(), s = in.edgy_i64(), t = in.edgy_i64();
  const position_t a = c::saturating_abs(x);
  LRPE_FUZZ_CHECK(a == (x == pmin ? pmax : (x < 0 ? -x : x)), "saturating_abs");
  const i128 exact = static_cast<i128>(t) - static_cast<i128>(s);
  const i128 held = std::clamp<i128>(exact, -static_cast<i128>(pmax), pmax);
  LRPE_FUZZ_CHECK(c::saturating_offset(s, t) == static_cast<position_t>(held), "saturating_offset");
  if (r < 0 && known_open("clip-negative-r")) return;
  const position_t y = c::clip(x, r);  // r < 0 is outside Shaw's use; it must still not be UB
  if (r >= 0) LRPE_FUZZ_CHECK(y == std::clamp(x, -r, r), "clip(x, r) != clamp(x, -r, r)");
}

/// ALiBi: slopes for a raw head count, biases for raw slopes and positions.
void alibi(input& in) {
  index_t heads = in.edgy_i64();
  // counts in [1, 2^62/2^4] are valid but would allocate terabytes: keep the valid ones small
  if (heads > 4096 && heads <= pmax / 16) heads = 1 + heads % 4096;
  const std::vector<double> slopes = c::alibi_slopes(heads);
  LRPE_FUZZ_CHECK(static_cast<index_t>(slopes.size()) == heads, "alibi_slopes: one slope per head");
  for (double m : slopes) LRPE_FUZZ_CHECK(m > 0 && m <= 1 && finite(m), "alibi_slopes: slope outside (0, 1]");

  std::vector<double> raw(1 + in.u8() % 4);
  for (auto& m : raw) m = in.edgy_f64();
  const c::alibi<double> e(1, raw, in.flag() ? c::alibi_form::causal : c::alibi_form::symmetric);
  const index_t h = in.small(0, static_cast<index_t>(raw.size()) - 1);
  const position_t s = in.edgy_i64(), t = in.edgy_i64();
  const double b = e.head(h).bias(s, t);
  LRPE_FUZZ_CHECK(finite(b), "alibi bias not finite for a finite slope");
  const double q = in.value<double>(), k = in.value<double>();
  LRPE_FUZZ_CHECK(finite(e.head(h).score(&q, s, &k, t)), "alibi score not finite");
}

/// Tables indexed by clip(t − s, r): toeplitz_bias and shaw with a raw r and a small table.
void clipped_tables(input& in) {
  const position_t r = in.edgy_i64();
  const index_t d = in.small(1, 4);
  const index_t cols = in.small(1, 64);
  lrpe::row_matrix<double> table(1, cols);
  for (index_t j = 0; j < cols; ++j) table(0, j) = in.value<double>();
  const position_t s = in.edgy_i64(), t = in.edgy_i64();
  std::vector<double> q(static_cast<std::size_t>(d)), k(q.size());
  for (auto& x : q) x = in.value<double>();
  for (auto& x : k) x = in.value<double>();
  if (in.flag()) {
    const c::toeplitz_bias<double> e(d, r, table);  // throws unless cols = 2r + 1
    const double b = e.bias(s, t);
    LRPE_FUZZ_CHECK(b == table(0, c::clip(c::saturating_offset(s, t), r) + r), "toeplitz_bias: not w[clip(t-s)]");
    LRPE_FUZZ_CHECK(finite(e.score(q.data(), s, k.data(), t)), "toeplitz_bias score not finite");
  } else {
    lrpe::row_matrix<double> key(cols, d), value;
    for (index_t i = 0; i < cols; ++i)
      for (index_t j = 0; j < d; ++j) key(i, j) = in.value<double>();
    if (in.flag()) value = key;
    const c::shaw<double> e(d, r, key, value);  // throws unless cols = 2r + 1
    LRPE_FUZZ_CHECK(finite(e.score(q.data(), s, k.data(), t)), "shaw score not finite");
    std::vector<double> acc(static_cast<std::size_t>(d), 0.0);
    e.add_value_term(s, t, 0.5, acc.data());
    for (double x : acc) LRPE_FUZZ_CHECK(finite(x), "shaw value term not finite");
  }
}

/// cosFormer's Toeplitz weight cos(π δ / 2M) for a raw M and δ: within [-1, 1].
void cosformer(input& in) {
  const double m = in.edgy_f64();
  const c::cosformer<double> e(1, m);
  const position_t delta = in.edgy_i64();
  const double w = e.weight(delta);
  LRPE_FUZZ_CHECK(finite(w) && w >= -1.0 - 1e-12 && w <= 1.0 + 1e-12, "cosformer weight outside [-1, 1]");
  const double q = in.value<double>(), k = in.value<double>();
  const position_t s = in.edgy_i64(), t = in.edgy_i64();
  LRPE_FUZZ_CHECK(finite(e.score(&q, s, &k, t)), "cosformer score not finite");
}

/// All-pairs distances by Floyd–Warshall over `edges` (undirected), −1 for no path: the oracle.
std::vector<std::int64_t> floyd_warshall(index_t n, const std::vector<std::pair<index_t, index_t>>& edges) {
  constexpr std::int64_t none = std::numeric_limits<std::int64_t>::max() / 4;
  std::vector<std::int64_t> d(static_cast<std::size_t>(n * n), none);
  const auto at = [&](index_t i, index_t j) -> std::int64_t& { return d[static_cast<std::size_t>(i * n + j)]; };
  for (index_t i = 0; i < n; ++i) at(i, i) = 0;
  for (const auto& [u, v] : edges)
    if (u != v) at(u, v) = at(v, u) = 1;
  for (index_t m = 0; m < n; ++m)
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < n; ++j) at(i, j) = std::min(at(i, j), at(i, m) + at(m, j));
  for (auto& x : d)
    if (x >= none) x = -1;
  return d;
}

/// True when calling f throws an lrpe::error (any other exception escapes: a crash).
template <class F>
bool rejects(F&& f) {
  try {
    f();
    return false;
  } catch (const lrpe::error&) {
    return true;
  }
}

/// shortest_paths' stored edges for (i, j) walk from i: each joins the node reached so far to
/// the next; the whole path (φ ≤ max_hops) ends at j.
void check_path(const c::graph_paths& p, const std::vector<std::pair<index_t, index_t>>& edges, index_t i, index_t j) {
  const auto path = p.path(i, j);
  index_t at = i;
  for (const std::int32_t e : path) {
    LRPE_FUZZ_CHECK(e >= 0 && static_cast<std::size_t>(e) < edges.size(), "shortest_paths: an edge id outside edges");
    const auto [u, v] = edges[static_cast<std::size_t>(e)];
    LRPE_FUZZ_CHECK(u == at || v == at, "shortest_paths: an edge that does not leave the node reached");
    at = u == at ? v : u;
  }
  if (p.distance(i, j) >= 0 && p.distance(i, j) <= p.max_hops) LRPE_FUZZ_CHECK(at == j, "shortest_paths: a path that misses j");
}

/// Graphs from raw node counts and edge lists: undirected_graph accepts exactly the valid ones;
/// distances (BFS) equal Floyd–Warshall's; Graphormer's buckets are in range and its pair bias
/// reads them; shortest_paths' distances agree and its paths are walks of the right length. Only
/// graphs of up to 24 nodes are built whole (n² tables); larger counts are validated.
void graphs(input& in) {
  const index_t nodes = in.flag() ? in.edgy_i64() : in.small(0, 24);
  const index_t count = in.small(0, 48);
  std::vector<std::pair<index_t, index_t>> edges;
  bool valid = nodes >= 0 && nodes <= 46340;
  for (index_t e = 0; e < count; ++e) {
    const bool raw = (in.u8() & 7) == 0;
    const index_t u = raw ? in.edgy_i64() : in.small(-1, 25), v = raw ? in.edgy_i64() : in.small(-1, 25);
    edges.emplace_back(u, v);
    valid = valid && u >= 0 && u < nodes && v >= 0 && v < nodes;
  }
  const index_t max_distance = in.flag() ? in.edgy_i64() : in.small(0, 8);
  const index_t max_hops = in.small(-1, 8);
  if (nodes > 4096 && valid) return;  // valid but too large to build here (n² tables)
  c::adjacency_list graph;
  LRPE_FUZZ_CHECK(rejects([&] { graph = c::undirected_graph(nodes, edges); }) == !valid,
                  "undirected_graph: accepted an invalid graph or rejected a valid one");
  if (!valid || nodes > 24) return;
  const lrpe::canonical::index_matrix dist = c::shortest_path_distances(graph);
  const std::vector<std::int64_t> want = floyd_warshall(nodes, edges);
  for (index_t i = 0; i < nodes; ++i)
    for (index_t j = 0; j < nodes; ++j)
      LRPE_FUZZ_CHECK(dist(i, j) == want[static_cast<std::size_t>(i * nodes + j)], "shortest_path_distances != Floyd-Warshall");
  const bool md_valid = max_distance >= 0 && max_distance <= std::numeric_limits<std::int32_t>::max() - 2;
  lrpe::canonical::index_matrix index;
  LRPE_FUZZ_CHECK(rejects([&] { index = c::graphormer_spatial_index(dist, max_distance); }) == !md_valid,
                  "graphormer_spatial_index: the verdict on max_distance");
  if (md_valid) {
    for (index_t i = 0; i < index.size(); ++i) {
      const std::int32_t b = index.data()[i], d = dist.data()[i];
      LRPE_FUZZ_CHECK(b == (d < 0 ? max_distance + 1 : std::min<index_t>(d, max_distance)), "spatial bucket");
    }
    if (nodes >= 1 && max_distance <= 16) {
      lrpe::row_matrix<double> table(1, max_distance + 2);
      for (index_t j = 0; j < table.cols(); ++j) table(0, j) = static_cast<double>(j);
      const auto bias = c::graphormer_spatial_bias<double>(1, graph, max_distance, table);
      for (index_t i = 0; i < nodes; ++i)
        for (index_t j = 0; j < nodes; ++j)
          LRPE_FUZZ_CHECK(bias.bias(i, j) == static_cast<double>(index(i, j)), "spatial bias is not table[bucket]");
    }
  }
  c::graph_paths paths;
  LRPE_FUZZ_CHECK(rejects([&] { paths = c::shortest_paths(nodes, edges, max_hops); }) == (nodes < 1 || max_hops < 1),
                  "shortest_paths: the verdict on nodes and max_hops");
  if (nodes < 1 || max_hops < 1) return;
  for (index_t i = 0; i < nodes; ++i)
    for (index_t j = 0; j < nodes; ++j) {
      LRPE_FUZZ_CHECK(paths.distance(i, j) == dist(i, j), "shortest_paths' distance != shortest_path_distances");
      check_path(paths, edges, i, j);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return lrpe_fuzz::run_one(
      [](lrpe_fuzz::input& in) {
        switch (in.u8() % 7) {
          case 0: t5(in); break;
          case 1: deberta(in); break;
          case 2: clip_and_offsets(in); break;
          case 3: alibi(in); break;
          case 4: clipped_tables(in); break;
          case 5: cosformer(in); break;
          default: graphs(in); break;
        }
      },
      data, size);
}
