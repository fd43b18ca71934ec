// SPDX-License-Identifier: MIT
/**
 * @file mpi.hpp
 * `lrpe::mpi`: attention over a sequence sharded across the ranks of an MPI communicator
 * (CMake target lrpe::mpi; header-only on MPI's C API). docs/scaling.md has the math, the bytes
 * per rank and the measured costs.
 *
 * - `linear_attention(comm, …)`: each rank holds a contiguous shard of Q, K, V (rank order is
 *   sequence order, positions global). Causal: each rank's shard summary (its keys' state,
 *   `linear_attention_summary`) goes through one `MPI_Exscan` whose operation is the
 *   associative fold `append_state`, and each rank runs its segment from the incoming state.
 *   Non-causal: one `MPI_Allreduce` of the summaries' sums. d_f·d_v + d_f numbers per rank.
 * - `softmax_attention(comm, …)`: ring attention. Each rank's K/V block (with its positions)
 *   travels once around the ring (`MPI_Isend`/`MPI_Irecv` of the next block while the current
 *   one is computed); every block's partial output is merged by its log-sum-exps
 *   (`merge_attention_states`). Causal blocks wholly after a rank's queries are skipped; a
 *   balanced causal layout (zigzag: rank r holds blocks r and 2P−1−r) is the caller's choice of
 *   position arrays.
 *
 * Both have a backward (`linear_attention_backward`, `softmax_attention_backward`): state
 * gradients flow back through a reverse scan; dK and dV accumulators travel with the ring's
 * blocks back to their owners.
 *
 * Every rank must call with the same encoding, feature map, options (but its own positions)
 * and backend. Bad input is found before any data moves: each rank checks its own arguments,
 * then the ranks exchange a short description of their shards (one `MPI_Allgather`), so an
 * error (a rank's own, or shards that disagree: widths, decay, order) is thrown on every rank
 * with the same message, and no rank is left waiting.
 */
#pragma once

#include <lrpe/lrpe.hpp>

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace mpi {

/// An MPI call that failed (its error string), when the communicator returns errors instead of
/// aborting (MPI's default handler aborts first).
class mpi_error : public std::runtime_error, public lrpe::error {
 public:
  using std::runtime_error::runtime_error;
  [[nodiscard]] const char* what() const noexcept override { return std::runtime_error::what(); }
};

namespace detail {

/// Throws `mpi_error` naming the MPI call when it did not succeed (the communicator's error
/// handler may have aborted first: MPI's default).
inline void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw mpi_error(std::string("lrpe::mpi: ") + call + " failed: " + std::string(text, static_cast<std::size_t>(len)));
}

template <class T>
MPI_Datatype datatype() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "lrpe::mpi: float or double");
  return std::is_same_v<T, float> ? MPI_FLOAT : MPI_DOUBLE;
}

/// One rank's shard as the others see it; `error` ≠ 0 when its own checks failed (1 shape,
/// 2 parameter, 3 domain, 4 other), with the start of its message.
struct shard {
  std::int64_t error = 0, nq = 0, nk = 0, d = 0, dv = 0, f = 0, first = 0, last = 0, q_last = 0;
  std::int64_t needs_lse = 0;  ///< (the softmax backward) this rank has queries and no lse
  double decay = 1.0;
  char message[256] = {};
};

[[noreturn]] inline void rethrow(std::int64_t kind, const std::string& message) {
  switch (kind) {
    case 1: throw shape_error(message);
    case 2: throw parameter_error(message);
    case 3: throw domain_error(message);
    default: throw parameter_error(message);
  }
}

/**
 * Runs `local` (this rank's own checks, which return its shard), exchanges every rank's shard,
 * and throws on every rank when any rank's checks failed: the first failing rank's error, of
 * its type, its message prefixed with the rank. Returns the shards, in rank order.
 */
template <class F>
std::vector<shard> exchange(MPI_Comm comm, F&& local) {
  shard own;
  try {
    own = local();
  } catch (const std::exception& e) {
    own.error = dynamic_cast<const shape_error*>(&e) != nullptr       ? 1
                : dynamic_cast<const parameter_error*>(&e) != nullptr ? 2
                : dynamic_cast<const domain_error*>(&e) != nullptr    ? 3
                                                                      : 4;
    std::strncpy(own.message, e.what(), sizeof(own.message) - 1);
  }
  int ranks = 0;
  check(MPI_Comm_size(comm, &ranks), "MPI_Comm_size");
  std::vector<shard> all(static_cast<std::size_t>(ranks));
  MPI_Datatype type;
  check(MPI_Type_contiguous(static_cast<int>(sizeof(shard)), MPI_BYTE, &type), "MPI_Type_contiguous");
  check(MPI_Type_commit(&type), "MPI_Type_commit");
  const int rc = MPI_Allgather(&own, 1, type, all.data(), 1, type, comm);
  MPI_Type_free(&type);
  check(rc, "MPI_Allgather");
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r].error != 0)
      rethrow(all[r].error, "lrpe::mpi: rank " + std::to_string(r) + ": " + std::string(all[r].message));
  }
  return all;
}

/// Every shard's widths and decay equal rank 0's (`dv` and `f` of linear attention, `d` of both).
inline void require_same_widths(const std::vector<shard>& all, const char* where) {
  for (std::size_t r = 1; r < all.size(); ++r) {
    const shard& a = all[0];
    const shard& b = all[r];
    lrpe::detail::require_shape(a.d == b.d && a.dv == b.dv && a.f == b.f, where, "shards",
                                lrpe::detail::lazy_concat("must have rank 0's widths d = ", a.d, ", d_v = ", a.dv,
                                                          ", d_f = ", a.f, " (rank ", r, ")"),
                                lrpe::detail::lazy_concat(b.d, ", ", b.dv, ", ", b.f));
    lrpe::detail::require_parameter(a.decay == b.decay, where, "options.decay",
                                    lrpe::detail::lazy_concat("must be the same on every rank (rank 0: ", a.decay,
                                                              "; rank ", r, ")"),
                                    b.decay);
  }
}

// ------------------------------------------------------------- summaries as flat buffers

/**
 * A summary on the wire: `linear_attention_snapshot::to_flat()`'s layout, [2, f, dv, λ,
 * pos_hi, pos_lo, count, carry, S…, z…], in double (exact for float states).
 */
inline constexpr int summary_header = 8;

inline std::int64_t flat_position(const double* x) {
  return static_cast<std::int64_t>((static_cast<std::uint64_t>(x[4]) << 32) | static_cast<std::uint64_t>(x[5]));
}

/**
 * The MPI_Op bodies of the two scans, on flat items (in, inout), inout ← scaled in + inout:
 * - forward (`fold_summaries`): `in` is the earlier ranks' fold, inout a later summary:
 *   S ← λ^{p_inout − p_in} S_in + S_inout and the counts added, as `append_state`;
 * - backward (`fold_state_gradients`, ranks reversed, so `in` is a later shard's): state
 *   gradients referred to their states' positions, inout ← λ^{p_in − p_inout} in + inout.
 * An item with count 0 holds nothing: it is skipped, or replaced by the other.
 */
template <bool Backward>
void fold_flat(void* in, void* inout, int* len, MPI_Datatype* type) {
  int bytes = 0;
  MPI_Type_size(*type, &bytes);
  const auto n = static_cast<std::size_t>(bytes) / sizeof(double);
  for (int item = 0; item < *len; ++item) {
    const double* a = static_cast<const double*>(in) + static_cast<std::size_t>(item) * n;
    double* b = static_cast<double*>(inout) + static_cast<std::size_t>(item) * n;
    if (a[6] == 0) continue;
    if (b[6] == 0) {
      std::memcpy(b, a, n * sizeof(double));
      continue;
    }
    const double lambda = a[3];
    const std::int64_t gap = Backward ? flat_position(a) - flat_position(b) : flat_position(b) - flat_position(a);  // ≥ 0
    const double scale = lambda == 1.0 || gap == 0 ? 1.0 : std::pow(lambda, static_cast<double>(gap));
    for (std::size_t i = summary_header; i < n; ++i) b[i] += scale * a[i];
    if (!Backward) {
      b[6] += a[6];
      b[7] = 1.0;  // (the carry: a fold rounds once in double)
    }
  }
}
inline void fold_summaries(void* in, void* inout, int* len, MPI_Datatype* type) { fold_flat<false>(in, inout, len, type); }
inline void fold_state_gradients(void* in, void* inout, int* len, MPI_Datatype* type) {
  fold_flat<true>(in, inout, len, type);
}

/// Runs MPI_Exscan of one flat item per rank with `op` (reversed: over the ranks in reverse order).
inline std::vector<double> exscan(MPI_Comm comm, std::vector<double>& mine, MPI_User_function* fn, bool reversed) {
  std::vector<double> result(mine.size(), 0.0);
  MPI_Comm scan_comm = comm;
  if (reversed) {
    int rank = 0;
    check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    check(MPI_Comm_split(comm, 0, -rank, &scan_comm), "MPI_Comm_split");
  }
  MPI_Datatype type;
  MPI_Op op;
  check(MPI_Type_contiguous(static_cast<int>(mine.size()), MPI_DOUBLE, &type), "MPI_Type_contiguous");
  check(MPI_Type_commit(&type), "MPI_Type_commit");
  check(MPI_Op_create(fn, /*commute=*/0, &op), "MPI_Op_create");
  const int rc = MPI_Exscan(mine.data(), result.data(), 1, type, op, scan_comm);
  MPI_Op_free(&op);
  MPI_Type_free(&type);
  if (reversed) MPI_Comm_free(&scan_comm);
  check(rc, "MPI_Exscan");
  return result;
}

/// A state gradient as a flat item: the snapshot layout with `position` and a count of 1 (0: none).
template <class T>
std::vector<double> flat_gradient(const linear_state_gradient<T>& g, double decay, position_t position, bool valid) {
  std::vector<double> x;
  const auto u = static_cast<std::uint64_t>(position);
  x.insert(x.end(), {2.0, static_cast<double>(g.kv.rows()), static_cast<double>(g.kv.cols()), decay,
                     static_cast<double>(u >> 32), static_cast<double>(u & 0xffffffffULL), valid ? 1.0 : 0.0, 1.0});
  for (index_t i = 0; i < g.kv.size(); ++i) x.push_back(static_cast<double>(g.kv.data()[i]));
  for (index_t i = 0; i < g.k_sum.size(); ++i) x.push_back(static_cast<double>(g.k_sum[i]));
  return x;
}

/// This rank's incoming state of causal sequence-parallel linear attention (the forward's scan).
template <class T, class Encoding, class Phi, class Backend>
linear_attention_state<T> incoming_state(MPI_Comm comm, int rank, const matrix_view<const T>& k,
                                         const matrix_view<const T>& v, const Encoding& encoding, const Phi& phi,
                                         const linear_options& options, index_t f, const Backend& backend) {
  const auto summary = lrpe::linear_attention_summary(k, v, encoding, phi, options, backend);
  std::vector<double> mine = summary.export_state().to_flat();
  const std::vector<double> incoming = exscan(comm, mine, &fold_summaries, false);
  if (rank > 0 && incoming[6] > 0)  // (rank 0's Exscan result is undefined: it starts empty)
    return linear_attention_state<T>(linear_attention_snapshot<T>::from_flat(incoming));
  return linear_attention_state<T>(f, v.cols, options.decay);
}

/**
 * The shards of a sequence-parallel linear call, checked on every rank (`exchange`): this
 * rank's arguments (`validate_linear`, then `more()`), the same widths and decay everywhere,
 * and causal shards in rank order. Returns this rank and d_f.
 */
template <class T, class Encoding, class Phi, class More>
std::pair<int, index_t> check_linear_shards(MPI_Comm comm, const matrix_view<const T>& q, const matrix_view<const T>& k,
                                            const matrix_view<const T>& v, const matrix_view<T>& out,
                                            const Encoding& encoding, const Phi& phi, const linear_options& options,
                                            const char* where, More&& more) {
  const auto all = exchange(comm, [&] {
    const index_t f = lrpe::detail::validate_linear<T>(q, k, v, out, encoding, phi, options, nullptr, where);
    more();
    shard s;
    s.nq = q.rows;
    s.nk = k.rows;
    s.d = q.cols;
    s.dv = v.cols;
    s.f = f;
    s.decay = options.decay;
    if (k.rows > 0) {
      s.first = options.k_positions[0];
      s.last = options.k_positions[k.rows - 1];
    }
    return s;
  });
  require_same_widths(all, where);
  if (options.causal) {
    std::int64_t last = std::numeric_limits<std::int64_t>::min();
    for (std::size_t r = 0; r < all.size(); ++r) {
      if (all[r].nk == 0) continue;
      lrpe::detail::require_parameter(all[r].first >= last, where, "options.k_positions",
                                      lrpe::detail::lazy_concat("must continue the previous rank's shard (rank ", r,
                                                                " starts before the last position ", last,
                                                                " of the ranks before it)"),
                                      all[r].first);
      last = all[r].last;
    }
  }
  int rank = 0;
  check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  return {rank, static_cast<index_t>(all[0].f)};
}

/**
 * The backward of non-causal sharded linear attention: S = Σ k̃ vᵀ and z = Σ k̃ over every
 * rank's keys (one MPI_Allreduce, as the forward), this rank's dq̃_s = S g_s + z e_s, the
 * gradients of S and z summed over every rank's queries (a second MPI_Allreduce), then
 * dk̃_t = dS v_t + dz and dv_t = dSᵀ k̃_t; the features' backward (the encoding's, then φ's)
 * takes dq̃ and dk̃ to dq and dk. g_s, e_s as the reference kernel (docs/training.md).
 */
template <class T, class Encoding, class Phi, class Backend>
void noncausal_linear_backward(MPI_Comm comm, const matrix_view<const T>& q, const matrix_view<const T>& k,
                               const matrix_view<const T>& v, const matrix_view<const T>& d_out,
                               const matrix_view<T>& dq, const matrix_view<T>& dk, const matrix_view<T>& dv,
                               const Encoding& encoding, const Phi& phi, const linear_options& options, index_t f,
                               lrpe::detail::gradient_t<Encoding>* grad, const Backend& backend) {
  constexpr bool featured = !std::is_same_v<Encoding, no_encoding>;
  const index_t d = q.cols, dvw = v.cols;
  // φ(x) and the features of this rank's rows
  row_matrix<T> phi_q(q.rows, d), phi_k(k.rows, d), qf(q.rows, f), kf(k.rows, f);
  for (index_t i = 0; i < q.rows; ++i) lrpe::detail::apply_feature_map(phi, q.row(i), phi_q.row(i).data(), d);
  for (index_t i = 0; i < k.rows; ++i) lrpe::detail::apply_feature_map(phi, k.row(i), phi_k.row(i).data(), d);
  if constexpr (featured) {
    using backend::encode_features_kernel;
    encode_features_kernel(backend, encoding, canonical::side::query, view(std::as_const(phi_q)), options.q_positions,
                           view(qf));
    encode_features_kernel(backend, encoding, canonical::side::key, view(std::as_const(phi_k)), options.k_positions,
                           view(kf));
  } else {
    qf = phi_q;
    kf = phi_k;
  }
  const Eigen::Map<const row_matrix<T>, 0, Eigen::OuterStride<>> vm(v.data, v.rows, dvw, Eigen::OuterStride<>(v.row_stride));
  const Eigen::Map<const row_matrix<T>, 0, Eigen::OuterStride<>> gm(d_out.data, d_out.rows, dvw,
                                                                    Eigen::OuterStride<>(d_out.row_stride));
  // S, z over every rank's keys
  std::vector<double> sums(static_cast<std::size_t>(f * dvw + f));
  Eigen::Map<row_matrix<double>>(sums.data(), f, dvw) = kf.template cast<double>().transpose() * vm.template cast<double>();
  Eigen::Map<dense_vector<double>>(sums.data() + f * dvw, f) = kf.template cast<double>().colwise().sum().transpose();
  check(MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_DOUBLE, MPI_SUM, comm), "MPI_Allreduce");
  const Eigen::Map<const row_matrix<double>> s(sums.data(), f, dvw);
  const Eigen::Map<const dense_vector<double>> z(sums.data() + f * dvw, f);
  // this rank's queries: g, e, dq̃, and their share of dS, dz
  row_matrix<T> dqf(q.rows, f), dkf(k.rows, f);
  std::vector<double> grads(sums.size(), 0.0);
  Eigen::Map<row_matrix<double>> ds(grads.data(), f, dvw);
  Eigen::Map<dense_vector<double>> dz(grads.data() + f * dvw, f);
  for (index_t i = 0; i < q.rows; ++i) {
    const dense_vector<double> qi = qf.row(i).transpose().template cast<double>();
    dense_vector<double> g = gm.row(i).transpose().template cast<double>();
    double e = 0;
    if (options.norm == normalisation::denominator) {
      const double den = qi.dot(z);
      const dense_vector<double> num = s.transpose() * qi;
      const double inv = 1.0 / std::max(den, options.eps);
      e = den > options.eps ? -g.dot(num) * inv * inv : 0.0;  // −(dO·out)/den, out = num/den
      g *= inv;
    }
    dqf.row(i) = (s * g + e * z).transpose().template cast<T>();
    ds.noalias() += qi * g.transpose();
    dz += e * qi;
  }
  check(MPI_Allreduce(MPI_IN_PLACE, grads.data(), static_cast<int>(grads.size()), MPI_DOUBLE, MPI_SUM, comm),
        "MPI_Allreduce");
  for (index_t t = 0; t < k.rows; ++t) {
    const dense_vector<double> vt = vm.row(t).transpose().template cast<double>();
    const dense_vector<double> kt = kf.row(t).transpose().template cast<double>();
    dkf.row(t) = (ds * vt + dz).transpose().template cast<T>();
    const dense_vector<double> dvt = ds.transpose() * kt;
    for (index_t j = 0; j < dvw; ++j) dv.row(t)[j] = static_cast<T>(dvt[j]);
  }
  // through the encoding, then φ
  if constexpr (featured) {
    lrpe::detail::features_backward_rows(backend, encoding, canonical::side::query, view(std::as_const(phi_q)),
                                         options.q_positions, view(std::as_const(dqf)), dq, grad);
    lrpe::detail::features_backward_rows(backend, encoding, canonical::side::key, view(std::as_const(phi_k)),
                                         options.k_positions, view(std::as_const(dkf)), dk, grad);
  } else {
    for (index_t i = 0; i < q.rows; ++i) std::copy(dqf.row(i).data(), dqf.row(i).data() + d, dq.row(i));
    for (index_t t = 0; t < k.rows; ++t) std::copy(dkf.row(t).data(), dkf.row(t).data() + d, dk.row(t));
  }
  for (index_t i = 0; i < q.rows; ++i)
    for (index_t j = 0; j < d; ++j) dq.row(i)[j] *= static_cast<T>(phi.derivative(q.row(i)[j]));
  for (index_t t = 0; t < k.rows; ++t)
    for (index_t j = 0; j < d; ++j) dk.row(t)[j] *= static_cast<T>(phi.derivative(k.row(t)[j]));
}

/**
 * One ring step's transfers of a K/V block with its positions (tags 0, 1, 2): `cur` (held rows)
 * to rank `to`, the previous rank's block (incoming rows) from rank `from` into `next`; the
 * requests are appended to req[pending…] for the caller's MPI_Waitall.
 */
template <class Block>
void pass_block(Block& cur, Block& next, int held, int incoming, int to, int from, MPI_Comm comm, MPI_Request* req,
                int& pending) {
  using T = typename std::remove_reference_t<decltype(cur.k)>::Scalar;
  const MPI_Datatype type = datatype<T>();
  const int d = static_cast<int>(cur.k.cols()), dv = static_cast<int>(cur.v.cols());
  check(MPI_Irecv(next.k.data(), incoming * d, type, from, 0, comm, &req[pending++]), "MPI_Irecv");
  check(MPI_Irecv(next.v.data(), incoming * dv, type, from, 1, comm, &req[pending++]), "MPI_Irecv");
  check(MPI_Irecv(next.pos.data(), incoming, MPI_INT64_T, from, 2, comm, &req[pending++]), "MPI_Irecv");
  check(MPI_Isend(cur.k.data(), held * d, type, to, 0, comm, &req[pending++]), "MPI_Isend");
  check(MPI_Isend(cur.v.data(), held * dv, type, to, 1, comm, &req[pending++]), "MPI_Isend");
  check(MPI_Isend(cur.pos.data(), held, MPI_INT64_T, to, 2, comm, &req[pending++]), "MPI_Isend");
}

/// Whether a causal block of keys (its first nk positions) is wholly after a rank's last query.
template <class Block>
bool hidden_block(bool causal, const Block& b, index_t nk, index_t nq, std::int64_t q_last) {
  return causal && nk > 0 && nq > 0 && *std::min_element(b.pos.begin(), b.pos.begin() + nk) > q_last;
}

}  // namespace detail

/**
 * Sequence-parallel linear attention (the file comment): this rank's rows of
 * `lrpe::linear_attention` over the whole sequence. q, k, v are this rank's shard (n_q = n_k
 * rows, contiguous in the sequence; ranks in sequence order), `options.q_positions` and
 * `k_positions` its global positions (offsets or arrays, equal for causal calls).
 * @param comm     the communicator; every rank calls.
 * @param backend  the local backend (its features and segment kernel).
 * @throws lrpe::error (and its subclasses) on every rank: a rank's bad arguments (as
 * `linear_attention`'s), shards whose widths or decay differ, causal shards out of order (a
 * rank's first position before the previous non-empty rank's last).
 */
template <class Q, class K, class V, class O, class Encoding, class Phi, class Backend = backend::reference>
void linear_attention(MPI_Comm comm, const Q& q_in, const K& k_in, const V& v_in, O&& out_in, const Encoding& encoding,
                      const Phi& phi, const linear_options& options, Backend backend = {}) {
  constexpr const char* where = "lrpe::mpi::linear_attention";
  const auto q = lrpe::detail::as_input(q_in);
  const auto k = lrpe::detail::as_input(k_in);
  const auto v = lrpe::detail::as_input(v_in);
  const auto out = lrpe::detail::as_output(out_in);
  using T = lrpe::detail::input_scalar_t<Q>;
  const auto shards = detail::check_linear_shards(comm, q, k, v, out, encoding, phi, options, where, [] {});
  const int rank = shards.first;
  const index_t f = shards.second, dv = v.cols;
  if (options.causal) {
    linear_attention_state<T> state = detail::incoming_state<T>(comm, rank, k, v, encoding, phi, options, f, backend);
    lrpe::linear_attention(q, k, v, out, encoding, phi, state, options, backend);
    return;
  }
  // not causal: every key of every rank is visible; S = Σ k̃ vᵀ and z = Σ k̃ over all shards
  using backend::linear_features_kernel;
  row_matrix<T> kf(k.rows, f);
  linear_features_kernel(backend, encoding, phi, k, options.k_positions, canonical::side::key, view(kf));
  const Eigen::Map<const row_matrix<T>, 0, Eigen::OuterStride<>> vm(v.data, v.rows, dv, Eigen::OuterStride<>(v.row_stride));
  std::vector<double> sums(static_cast<std::size_t>(f * dv + f)), total(sums.size());
  Eigen::Map<row_matrix<double>>(sums.data(), f, dv) = kf.template cast<double>().transpose() * vm.template cast<double>();
  Eigen::Map<dense_vector<double>>(sums.data() + f * dv, f) = kf.template cast<double>().colwise().sum().transpose();
  detail::check(MPI_Allreduce(sums.data(), total.data(), static_cast<int>(sums.size()), MPI_DOUBLE, MPI_SUM, comm),
                "MPI_Allreduce");
  row_matrix<T> qf(std::max<index_t>(q.rows, 1), f);
  linear_features_kernel(backend, encoding, phi, q, options.q_positions, canonical::side::query,
                         matrix_view<T>(qf.data(), q.rows, f, f));
  const Eigen::Map<const row_matrix<double>> s(total.data(), f, dv);
  const Eigen::Map<const dense_vector<double>> z(total.data() + f * dv, f);
  for (index_t i = 0; i < q.rows; ++i) {
    const dense_vector<double> qi = qf.row(i).transpose().template cast<double>();
    const double den = qi.dot(z);
    const double scale = options.norm == normalisation::denominator ? 1.0 / std::max(den, options.eps) : 1.0;
    for (index_t j = 0; j < dv; ++j) out.row(i)[j] = static_cast<T>(scale * qi.dot(s.col(j)));
  }
}

/**
 * Ring softmax attention (the file comment): this rank's rows of `lrpe::softmax_attention` of
 * its queries over every rank's keys. q is this rank's queries at `options.q_positions`; k, v
 * its keys at `options.k_positions` (offsets or arrays; any sizes per rank, zigzag included).
 * @param lse when not empty, n_q entries: each row's log-sum-exp over every rank's keys (for the
 *            backward, or a merge with more keys).
 * @throws lrpe::error on every rank: a rank's bad arguments (as `softmax_attention`'s), shards
 * whose widths differ.
 */
template <class Q, class K, class V, class O, class Encoding, class Reweight = no_reweighting,
          class Backend = backend::reference>
void softmax_attention(MPI_Comm comm, const Q& q_in, const K& k_in, const V& v_in, O&& out_in, const Encoding& encoding,
                       const softmax_options<Reweight>& options = {}, Backend backend = {},
                       std::span<lrpe::detail::input_scalar_t<Q>> lse = {}) {
  constexpr const char* where = "lrpe::mpi::softmax_attention";
  const auto q = lrpe::detail::as_input(q_in);
  const auto k = lrpe::detail::as_input(k_in);
  const auto v = lrpe::detail::as_input(v_in);
  const auto out = lrpe::detail::as_output(out_in);
  using T = lrpe::detail::input_scalar_t<Q>;
  const auto all = detail::exchange(comm, [&] {
    lrpe::detail::validate_softmax(q, k, v, out, encoding, options, where);
    lrpe::detail::require_shape(lse.empty() || static_cast<index_t>(lse.size()) == q.rows, where, "lse.size()",
                                lrpe::detail::lazy_concat("must be 0 or q.rows = ", q.rows), lse.size());
    detail::shard s;
    s.nq = q.rows;
    s.nk = k.rows;
    s.d = q.cols;
    s.dv = v.cols;
    if (q.rows > 0) {
      s.first = options.q_positions[0];
      s.q_last = options.q_positions[0];
      for (index_t i = 0; i < q.rows; ++i) s.q_last = std::max<std::int64_t>(s.q_last, options.q_positions[i]);
    }
    return s;
  });
  detail::require_same_widths(all, where);
  int rank = 0, ranks = 1;
  detail::check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  detail::check(MPI_Comm_size(comm, &ranks), "MPI_Comm_size");
  const index_t d = q.cols, dv = v.cols;
  index_t most = 0;
  for (const auto& s : all) most = std::max<index_t>(most, static_cast<index_t>(s.nk));
  // the block in hand and the one arriving: K, V (contiguous rows) and positions
  struct block {
    row_matrix<T> k, v;
    std::vector<position_t> pos;
  };
  block cur{row_matrix<T>(most, d), row_matrix<T>(most, dv), std::vector<position_t>(static_cast<std::size_t>(most))};
  block next = cur;
  for (index_t i = 0; i < k.rows; ++i) {
    std::copy(k.row(i), k.row(i) + d, cur.k.row(i).data());
    std::copy(v.row(i), v.row(i) + dv, cur.v.row(i).data());
    cur.pos[static_cast<std::size_t>(i)] = options.k_positions[i];
  }
  std::vector<T> own_lse(static_cast<std::size_t>(q.rows), -std::numeric_limits<T>::infinity());
  const std::span<T> total_lse = lse.empty() ? std::span<T>(own_lse) : lse;
  std::fill(total_lse.begin(), total_lse.end(), -std::numeric_limits<T>::infinity());
  for (index_t i = 0; i < out.rows; ++i) std::fill(out.row(i), out.row(i) + dv, T(0));
  row_matrix<T> part(q.rows, dv);
  std::vector<T> part_lse(static_cast<std::size_t>(q.rows));
  const int to = (rank + 1) % ranks, from = (rank + ranks - 1) % ranks;
  for (int step = 0; step < ranks; ++step) {
    const int owner = (rank - step + ranks) % ranks;  // whose block is in hand
    const index_t nk = static_cast<index_t>(all[static_cast<std::size_t>(owner)].nk);
    MPI_Request req[6];
    int pending = 0;
    if (step + 1 < ranks) {  // pass the block on, take the previous rank's
      const auto incoming = static_cast<int>(all[static_cast<std::size_t>((owner - 1 + ranks) % ranks)].nk);
      const auto held = static_cast<int>(nk);
      detail::pass_block(cur, next, held, incoming, to, from, comm, req, pending);
    }
    const bool hidden =
        detail::hidden_block(options.causal, cur, nk, q.rows, all[static_cast<std::size_t>(rank)].q_last);
    if (nk > 0 && q.rows > 0 && !hidden) {
      softmax_options<Reweight> o = options;
      o.k_positions = std::span<const position_t>(cur.pos.data(), static_cast<std::size_t>(nk));
      o.sink = -std::numeric_limits<double>::infinity();  // joins once, below
      lrpe::softmax_attention_lse(q, cur.k.topRows(nk), cur.v.topRows(nk), part, std::span<T>(part_lse), encoding, o,
                                  backend);
      lrpe::merge_attention_states(out, total_lse, part, std::span<const T>(part_lse));
    }
    if (pending > 0) detail::check(MPI_Waitall(pending, req, MPI_STATUSES_IGNORE), "MPI_Waitall");
    std::swap(cur, next);
  }
  if (options.sink != -std::numeric_limits<double>::infinity()) {  // the sink: a part with lse σ and no value
    row_matrix<T> none = row_matrix<T>::Zero(q.rows, dv);
    const std::vector<T> sink_lse(static_cast<std::size_t>(q.rows), static_cast<T>(options.sink));
    lrpe::merge_attention_states(out, total_lse, none, std::span<const T>(sink_lse));
  }
}

/**
 * The backward of sequence-parallel linear attention: this rank's dq, dk, dv (written)
 * and its share of the encoding's parameter gradient and of `options.decay_gradient` (added:
 * sum them over the ranks, e.g. with MPI_Allreduce). Each rank recomputes its incoming state
 * (the forward's scan), runs its segment's backward once for the gradient of that state, and a
 * reverse `MPI_Exscan` of those gradients (each decayed to the previous state's position) gives
 * each rank the gradient of the state its segment leaves; a second pass of the segment's
 * backward then gives the exact gradients (twice the local backward, d_f·d_v + d_f numbers per
 * rank on the wire). Not causal: S and z, then their gradients, summed over the ranks by two
 * `MPI_Allreduce`s (`noncausal_linear_backward`). Arguments as `mpi::linear_attention` and
 * `linear_attention_backward`.
 * @throws lrpe::error on every rank: as `mpi::linear_attention`, `options.decay_gradient` set on
 * a non-causal call, and the gradients' shapes.
 */
template <class Q, class K, class V, class DO, class DQ, class DK, class DV, class Encoding, class Phi,
          class Backend = backend::reference>
void linear_attention_backward(MPI_Comm comm, const Q& q_in, const K& k_in, const V& v_in, const DO& d_out_in,
                               DQ&& dq_in, DK&& dk_in, DV&& dv_in, const Encoding& encoding, const Phi& phi,
                               const linear_options& options, lrpe::detail::gradient_t<Encoding>* grad = nullptr,
                               Backend backend = {}) {
  constexpr const char* where = "lrpe::mpi::linear_attention_backward";
  // (named views, not a structured binding: the lambda below captures them)
  const auto views = lrpe::detail::linear_backward_views(q_in, k_in, v_in, d_out_in, dq_in, dk_in, dv_in);
  const auto& q = std::get<0>(views);
  const auto& k = std::get<1>(views);
  const auto& v = std::get<2>(views);
  const auto& d_out = std::get<3>(views);
  const auto& dq = std::get<4>(views);
  const auto& dk = std::get<5>(views);
  const auto& dv = std::get<6>(views);
  using T = lrpe::detail::input_scalar_t<Q>;
  const matrix_view<T> out_shape(const_cast<T*>(d_out.data), d_out.rows, d_out.cols, d_out.row_stride);  // read only
  const auto shards = detail::check_linear_shards(comm, q, k, v, out_shape, encoding, phi, options, where, [&] {
    lrpe::detail::require_parameter(options.causal || options.decay_gradient == nullptr, where,
                                    "options.decay_gradient", "must be null unless options.causal (λ = 1)", "non-null");
    lrpe::detail::validate_linear_backward<T, Encoding, Phi>(q, k, v, dq, dk, dv, encoding, grad, where);
  });
  const int rank = shards.first;
  int ranks = 1;
  detail::check(MPI_Comm_size(comm, &ranks), "MPI_Comm_size");
  const index_t f = shards.second;
  if (!options.causal) {
    detail::noncausal_linear_backward<T>(comm, q, k, v, d_out, dq, dk, dv, encoding, phi, options, f, grad, backend);
    return;
  }
  const linear_attention_state<T> incoming =
      detail::incoming_state<T>(comm, rank, k, v, encoding, phi, options, f, backend);
  // pass 1: the gradient of the incoming state from this rank's own outputs
  linear_options local = options;
  local.decay_gradient = nullptr;
  row_matrix<T> sq(q.rows, q.cols), sk(k.rows, k.cols), sv(v.rows, v.cols);
  linear_state_gradient<T> own;
  lrpe::linear_attention_backward(q, k, v, d_out, sq, sk, sv, encoding, phi, incoming, nullptr, &own, local,
                                  nullptr, backend);
  // the later ranks' gradients of the states they start from, decayed to this rank's last position
  std::vector<double> item = detail::flat_gradient(own, options.decay, incoming.last_position(), !incoming.empty());
  const std::vector<double> later = detail::exscan(comm, item, &detail::fold_state_gradients, /*reversed=*/true);
  linear_state_gradient<T> d_final(f, v.cols);
  const bool has_later = rank < ranks - 1 && later[6] > 0;
  if (has_later) {
    for (index_t i = 0; i < d_final.kv.size(); ++i) d_final.kv.data()[i] = static_cast<T>(later[detail::summary_header + i]);
    for (index_t i = 0; i < f; ++i) d_final.k_sum[i] = static_cast<T>(later[detail::summary_header + d_final.kv.size() + i]);
  }
  // pass 2: the whole gradient of this segment
  lrpe::linear_attention_backward(q, k, v, d_out, dq, dk, dv, encoding, phi, incoming, has_later ? &d_final : nullptr,
                                  nullptr, options, grad, backend);
}

/**
 * The backward of ring softmax attention: this rank's dq, dk, dv (written) and its share of the
 * encoding's parameter gradient (added: sum it over the ranks). K/V blocks travel around the
 * ring again, each with its dK and dV accumulators; every rank adds its queries' part (the
 * block's `softmax_attention_backward` given this rank's merged O and lse) and passes the block
 * on, so that after P steps each block's accumulators are back with their owner.
 * @param out, lse this rank's forward output and log-sum-exps (`mpi::softmax_attention` with
 *                 lse); an empty lse is recomputed by one more forward ring.
 * @throws lrpe::error on every rank: as `mpi::softmax_attention`, and the gradients' shapes.
 */
template <class Q, class K, class V, class O, class DO, class DQ, class DK, class DV, class Encoding,
          class Reweight = no_reweighting, class Backend = backend::reference>
void softmax_attention_backward(MPI_Comm comm, const Q& q_in, const K& k_in, const V& v_in, const O& out_in,
                                const DO& d_out_in, std::span<const lrpe::detail::input_scalar_t<Q>> lse,
                                DQ&& dq_in, DK&& dk_in, DV&& dv_in, const Encoding& encoding,
                                const softmax_options<Reweight>& options = {},
                                lrpe::detail::gradient_t<Encoding>* grad = nullptr, Backend backend = {}) {
  constexpr const char* where = "lrpe::mpi::softmax_attention_backward";
  using T = lrpe::detail::input_scalar_t<Q>;
  const auto q = lrpe::detail::as_input(q_in);
  const auto k = lrpe::detail::as_input(k_in);
  const auto v = lrpe::detail::as_input(v_in);
  const auto out = lrpe::detail::as_input(out_in);
  const auto d_out = lrpe::detail::as_input(d_out_in);
  const auto dq = lrpe::detail::as_output(dq_in);
  const auto dk = lrpe::detail::as_output(dk_in);
  const auto dv = lrpe::detail::as_output(dv_in);
  const matrix_view<T> out_shape(const_cast<T*>(out.data), out.rows, out.cols, out.row_stride);  // read only
  const auto all = detail::exchange(comm, [&] {
    lrpe::detail::validate_softmax(q, k, v, out_shape, encoding, options, where);
    lrpe::detail::validate_softmax_backward(q, k, v, d_out, lse, dq, dk, dv, where);
    detail::shard s;
    s.nq = q.rows;
    s.nk = k.rows;
    s.d = q.cols;
    s.dv = v.cols;
    for (index_t i = 0; i < q.rows; ++i)
      s.q_last = i == 0 ? options.q_positions[0] : std::max<std::int64_t>(s.q_last, options.q_positions[i]);
    s.needs_lse = lse.empty() && q.rows > 0;
    return s;
  });
  detail::require_same_widths(all, where);
  int rank = 0, ranks = 1;
  detail::check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  detail::check(MPI_Comm_size(comm, &ranks), "MPI_Comm_size");
  std::vector<T> recomputed;
  // one more forward ring for the log-sum-exps when a rank lacks them (every rank takes part)
  if (std::any_of(all.begin(), all.end(), [](const detail::shard& s) { return s.needs_lse != 0; })) {
    row_matrix<T> scratch(q.rows, v.cols);
    recomputed.resize(static_cast<std::size_t>(q.rows));
    softmax_attention(comm, q, k, v, scratch, encoding, options, backend, std::span<T>(recomputed));
    lse = recomputed;
  }
  const index_t d = q.cols, dvw = v.cols;
  index_t most = 0;
  for (const auto& s : all) most = std::max<index_t>(most, static_cast<index_t>(s.nk));
  struct block {
    row_matrix<T> k, v, dk, dv;
    std::vector<position_t> pos;
  };
  block cur{row_matrix<T>(most, d), row_matrix<T>(most, dvw), row_matrix<T>::Zero(most, d),
            row_matrix<T>::Zero(most, dvw), std::vector<position_t>(static_cast<std::size_t>(most))};
  block next = cur;
  for (index_t i = 0; i < k.rows; ++i) {
    std::copy(k.row(i), k.row(i) + d, cur.k.row(i).data());
    std::copy(v.row(i), v.row(i) + dvw, cur.v.row(i).data());
    cur.pos[static_cast<std::size_t>(i)] = options.k_positions[i];
  }
  for (index_t i = 0; i < dq.rows; ++i) std::fill(dq.row(i), dq.row(i) + d, T(0));
  row_matrix<T> dq_part(q.rows, d), dk_part(most, d), dv_part(most, dvw);
  const int to = (rank + 1) % ranks, from = (rank + ranks - 1) % ranks;
  const MPI_Datatype type = detail::datatype<T>();
  for (int step = 0; step < ranks; ++step) {  // P steps, P passes: every block ends at home
    const int owner = (rank - step + ranks) % ranks;
    const int arriving = (owner - 1 + ranks) % ranks;
    const auto nk = static_cast<index_t>(all[static_cast<std::size_t>(owner)].nk);
    const int held = static_cast<int>(nk), incoming = static_cast<int>(all[static_cast<std::size_t>(arriving)].nk);
    MPI_Request req[10];
    int pending = 0;
    if (step + 1 < ranks) {  // the next block's K, V, positions, while this one is computed
      detail::pass_block(cur, next, held, incoming, to, from, comm, req, pending);
    }
    const bool hidden =
        detail::hidden_block(options.causal, cur, nk, q.rows, all[static_cast<std::size_t>(rank)].q_last);
    if (nk > 0 && q.rows > 0 && !hidden) {
      softmax_options<Reweight> o = options;
      o.k_positions = std::span<const position_t>(cur.pos.data(), static_cast<std::size_t>(nk));
      o.sink_gradient = nullptr;  // added once, below
      auto dkp = dk_part.topRows(nk);
      auto dvp = dv_part.topRows(nk);
      lrpe::softmax_attention_backward(q, cur.k.topRows(nk), cur.v.topRows(nk), out, d_out, lse, dq_part, dkp, dvp,
                                       encoding, o, grad, backend);
      for (index_t i = 0; i < q.rows; ++i)
        for (index_t j = 0; j < d; ++j) dq.row(i)[j] += dq_part(i, j);
      cur.dk.topRows(nk) += dkp;
      cur.dv.topRows(nk) += dvp;
    }
    // the accumulators follow their block (on the last step, home)
    const int acc_in = step + 1 < ranks ? incoming : static_cast<int>(all[static_cast<std::size_t>(rank)].nk);
    detail::check(MPI_Irecv(next.dk.data(), acc_in * int(d), type, from, 3, comm, &req[pending++]), "MPI_Irecv");
    detail::check(MPI_Irecv(next.dv.data(), acc_in * int(dvw), type, from, 4, comm, &req[pending++]), "MPI_Irecv");
    detail::check(MPI_Isend(cur.dk.data(), held * int(d), type, to, 3, comm, &req[pending++]), "MPI_Isend");
    detail::check(MPI_Isend(cur.dv.data(), held * int(dvw), type, to, 4, comm, &req[pending++]), "MPI_Isend");
    detail::check(MPI_Waitall(pending, req, MPI_STATUSES_IGNORE), "MPI_Waitall");
    std::swap(cur, next);
  }
  for (index_t i = 0; i < k.rows; ++i) {
    std::copy(cur.dk.row(i).data(), cur.dk.row(i).data() + d, dk.row(i));
    std::copy(cur.dv.row(i).data(), cur.dv.row(i).data() + dvw, dv.row(i));
  }
  if (options.sink_gradient != nullptr && options.sink != -std::numeric_limits<double>::infinity() && q.rows > 0)
    *options.sink_gradient += lrpe::detail::sink_gradient(out, d_out, lse, options.sink);
}

}  // namespace mpi
}  // namespace v0
}  // namespace lrpe
