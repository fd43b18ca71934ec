// SPDX-License-Identifier: MIT
/**
 * @file encode.hpp
 * SIMD encoders: `lrpe::simd_encoder<E, Arch>` and the backend-tagged free functions
 * `lrpe::encode(backend, enc, x, pos, out)` and `lrpe::encode_qk(backend, enc, q, q_pos, k,
 * k_pos, q_out, k_out)` (multi-head Q and K in one call).
 *
 * Contract: the same features as `enc.encode` (the reference backend) within a few float/double
 * roundings (docs/backends.md states the tolerance the tests use); angles s·θ formed in double
 * exactly as in the scalar path (sincos.hpp). Every (P, Λ) pair works:
 *
 * - Λ ∈ {rotation (both pairings), complex phase, permutation power, identity} and a real P:
 *   vectorised Λ; P vectorised when it is identity, Householder, a permutation (odd-even
 *   included), DCT or a real dense matrix, applied by its own `apply` otherwise. P and Λ run in
 *   one pass over the data: a Householder P is a row map that Λ applies as it loads each row
 *   (kernels.hpp); other P go through an L1-resident block of rows.
 * - DFT P with complex-phase Λ (Type 8): the FFT of encode_dft.hpp (d a power of two ≤ 256;
 *   per row in registers at d ∈ {32, 64, 128} on AVX-512 float, across rows otherwise).
 * - a user Λ with a `backend::simd_lambda_kernel` specialisation (lambda_kernel.hpp) and a real
 *   P: vectorised Λ, as lrpe's own.
 * - everything else (a user Λ without one, a complex P with another Λ, long double): the reference path,
 *   `enc.encode_features` row by row — never a silent miscomputation. `simd_encoder<E>::path`
 *   says which path a type takes, at compile time.
 *
 * Sharing: the per-position table (cos/sin of s·θ_k, or the indices of π^s) is filled once
 * for a block of up to 256 positions and reused by every head and batch entry, and by K when K
 * has the same positions as Q. For float and consecutive positions the table costs one sincos
 * per 64 positions (`cos_sin_rows::fill_run`). Heads whose inputs are interleaved by rows
 * (BSNH, a packed QKV buffer) run a position at a time, as one contiguous read (`by_layout`).
 * Outputs of 16 MiB or more are written with non-temporal stores (`set_stream_threshold`).
 * Memory: no heap allocation per call except the kernels' small parameter copies (a
 * permutation's d indices; the d² matrix of a DCT/dense P); the table (≤ 128 KiB) and a fused
 * chain's scratch rows live in the calling thread's grow-only `simd_workspace`. Hold a
 * `simd_encoder` to make repeated calls allocation-free.
 */
#pragma once

#include <lrpe/attention/backend_interface.hpp>
#include <lrpe/backend/reference/encode.hpp>
#include <lrpe/core/heads.hpp>
#include <lrpe/backend/simd/parallel.hpp>
#include <lrpe/backend/simd/detail/kernels.hpp>
#include <lrpe/backend/simd/detail/stored.hpp>
#include <lrpe/backend/simd/encode_dft.hpp>
#include <lrpe/backend/simd/tag.hpp>
#include <lrpe/backend/simd/workspace.hpp>
#include <lrpe/detail/small_buffer.hpp>
#include <lrpe/encoder.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace lrpe {
inline namespace v0 {

/// How `simd_encoder<E, Arch>` encodes.
enum class simd_path {
  vectorised,         ///< P and Λ both have SIMD kernels
  lambda_vectorised,  ///< Λ vectorised, P applied by its own scalar `apply` in the same pass
  row_fft,            ///< Type 8: DFT across rows + phase (falls back per call if d is unsupported)
  reference           ///< `enc.encode_features` row by row
};

/// How a `simd_encoder` fills the per-position cos/sin tables of rotation and complex-phase
/// Λ (double tables never step; `direct` also remembers the last row per thread). The features
/// are the same within float rounding either way (sincos.hpp).
enum class position_tables {
  /// cos/sin(j·θ_k) for runs of 64 positions tabulated at construction, then one complex
  /// product per extra position of a run: for calls of many rows, which repay building the
  /// table (bench/results/tuning.md#stepped-tables).
  stepped,
  /// Every position by a vectorised double sincos, nothing built at construction: for calls of
  /// a few rows (a decode step's one row per head).
  direct
};

namespace backend::simd_detail {

template <class P, class L, class Arch>
constexpr simd_path choose_path() {
  using T = typename P::scalar;
  if constexpr (backend::simd_lambda_kernel<Arch, L>::vectorised)
    static_assert(backend::simd_lambda_kernel_for<backend::simd_lambda_kernel<Arch, L>, L>,
                  "backend::simd_lambda_kernel<Arch, L> is specialised for this Λ but lacks a member that "
                  "lambda_kernel.hpp lists (see the unsatisfied requirement below)");
  if constexpr (!simd_scalar_v<T>) {
    return simd_path::reference;
  } else if constexpr (std::is_same_v<P, p::dft<T>> && std::is_same_v<L, lambda::complex_phase<T>>) {
    return simd_path::row_fft;
  } else if constexpr (P::is_complex || !l_kernel<Arch, L>::vectorised) {
    return simd_path::reference;
  } else if constexpr (p_kernel<Arch, P>::vectorised) {
    return simd_path::vectorised;
  } else {
    return simd_path::lambda_vectorised;
  }
}

/// Positions of two sources are the same for `rows` rows.
inline bool same_positions(const positions& a, const positions& b, index_t rows) {
  if (!a.is_array() && !b.is_array()) return a.offset() == b.offset();
  for (index_t i = 0; i < rows; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

/// One (input, output) pair of matrices encoded at the same positions.
template <class T>
struct job {
  matrix_view<const T> x;
  matrix_view<T> out;
};

}  // namespace backend::simd_detail

/**
 * An encoder prepared for the SIMD backend: kernels built once (a permutation's indices, a
 * dense P's matrix, FFT twiddles), then any number of allocation-free `encode`/`encode_qk`
 * calls. Built from an lvalue it holds a reference to `enc`, which must outlive it; built from a
 * temporary it keeps a copy of its own (one allocation), shared by its copies, so that nothing
 * dangles. Thread-safe to share (const calls).
 * @tparam E    an lrpe encoder (preset or `encoder<P, L>`).
 * @tparam Arch xsimd arch; default: the best one this translation unit is compiled for.
 */
template <lrpe_encoder E, class Arch = xsimd::default_arch>
class simd_encoder {
 public:
  using scalar = typename E::scalar;
  using p_type = typename E::p_type;
  using lambda_type = typename E::lambda_type;
  using arch_type = Arch;
  /// Which path this encoder takes (compile time; `row_fft` still checks d at run time).
  static constexpr simd_path path = backend::simd_detail::choose_path<p_type, lambda_type, Arch>();

  /// `tables`: see `position_tables` (the default suits calls of many rows; linear attention
  /// takes `direct` below 8).
  explicit simd_encoder(const E& enc, position_tables tables = position_tables::stepped) : enc_(&enc) {
    build(tables);
  }
  /// From a temporary: the encoder is moved to the heap and owned, shared by copies of this
  /// object (the kernels point into it, so it must not move with them). (remove_const_t: E may
  /// be a const type; class template argument deduction goes through the overload above.)
  explicit simd_encoder(std::remove_const_t<E>&& enc, position_tables tables = position_tables::stepped)
      : owned_(std::make_shared<const E>(std::move(enc))), enc_(owned_.get()) {
    build(tables);
  }
  explicit simd_encoder(const std::remove_const_t<E>&& enc, position_tables tables = position_tables::stepped)
      : owned_(std::make_shared<const E>(enc)), enc_(owned_.get()) {
    build(tables);
  }

  [[nodiscard]] const E& encoding() const noexcept { return *enc_; }

  /// Output bytes per call from which stores bypass the cache (16 MiB: more than half of a
  /// typical L3, so the output would not stay cached anyway).
  static constexpr std::size_t default_stream_threshold = std::size_t{16} << 20;
  /**
   * Calls whose output (all heads, Q and K) is at least `bytes` long write it with
   * non-temporal stores where the layout allows (vector-aligned rows): no read of each output
   * line before it is written, and the cache keeps the working set of whoever runs next. 0:
   * always; `SIZE_MAX`: never. The results are the same either way.
   */
  void set_stream_threshold(std::size_t bytes) noexcept { stream_threshold_ = bytes; }
  [[nodiscard]] std::size_t stream_threshold() const noexcept { return stream_threshold_; }
  /// True when calls run SIMD code (false: the reference path).
  [[nodiscard]] bool vectorised() const noexcept {
    if constexpr (path == simd_path::row_fft) return dft_.has_value();
    return path != simd_path::reference;
  }

  /**
   * Row i of `out` gets the real features of row i of `x` at position `pos[i]`: the same as
   * `enc.encode(x, pos, out)`. `out` must not overlap `x`.
   * @throws shape_error on mismatched sizes.
   */
  void encode(matrix_view<const scalar> x, positions pos, matrix_view<scalar> out) const {
    constexpr const char* where = "lrpe::simd_encoder::encode";
    check(x, out, pos, where, "x", "out");
    const backend::simd_detail::job<scalar> j{x, out};
    run(&j, 1, x.rows, pos);
  }

  /**
   * Multi-head Q and K in one call: every (batch, head) matrix of q (k) is encoded at `q_pos`
   * (`k_pos`) into q_out (k_out). The per-position table is computed once per block of
   * positions and shared by all heads and batch entries, and by Q and K when their positions
   * agree (same seq length and same positions).
   * @throws shape_error on mismatched sizes.
   */
  void encode_qk(heads_view<const scalar> q, positions q_pos, heads_view<const scalar> k, positions k_pos,
                 heads_view<scalar> q_out, heads_view<scalar> k_out) const {
    constexpr const char* where = "lrpe::simd_encoder::encode_qk";
    check_heads(q, q_out, q_pos, where, "q", "q_out", "q_pos");
    check_heads(k, k_out, k_pos, where, "k", "k_out", "k_pos");
    // batch·heads (counted below) and every head's offsets must be index_t (views built by hand)
    detail::require_heads_extents(q, where, "q");
    detail::require_heads_extents(q_out, where, "q_out");
    detail::require_heads_extents(k, where, "k");
    detail::require_heads_extents(k_out, where, "k_out");
    const index_t nq = q.batch * q.heads, nk = k.batch * k.heads;
    const bool shared = nq > 0 && nk > 0 && q.seq == k.seq && backend::simd_detail::same_positions(q_pos, k_pos, q.seq);
    job_list jobs(nq + nk);
    jobs.add(q, q_out);
    jobs.add(k, k_out);
    if (shared) {
      run(jobs.data(), nq + nk, q.seq, q_pos);
    } else {
      run(jobs.data(), nq, q.seq, q_pos);
      run(jobs.data() + nq, nk, k.seq, k_pos);
    }
  }

  /**
   * Every (batch, head) matrix of x encoded at `pos` into out: `encode_qk` for one tensor (K
   * alone, or a tensor that holds Q and K as heads of its own). One table per block of
   * positions, shared by all heads.
   * @throws shape_error on mismatched sizes.
   */
  void encode_heads(heads_view<const scalar> x, positions pos, heads_view<scalar> out) const {
    constexpr const char* where = "lrpe::simd_encoder::encode_heads";
    check_heads(x, out, pos, where, "x", "out", "pos");
    detail::require_heads_extents(x, where, "x");
    detail::require_heads_extents(out, where, "out");
    const index_t n = x.batch * x.heads;
    job_list jobs(n);
    jobs.add(x, out);
    run(jobs.data(), n, x.seq, pos);
  }

 private:
  /// The (batch, head) matrices of a call as jobs: on the stack for up to 128, beyond on the heap.
  class job_list {
   public:
    explicit job_list(index_t count) {
      if (count > stack_jobs) {
        heap_.resize(static_cast<std::size_t>(count));
        jobs_ = heap_.data();
      }
    }
    /// Appends every (batch, head) of x → out (shapes and extents checked by the caller).
    void add(const heads_view<const scalar>& x, const heads_view<scalar>& out) {
      for (index_t b = 0; b < x.batch; ++b)
        for (index_t h = 0; h < x.heads; ++h) jobs_[n_++] = {x.head(b, h), out.head(b, h)};
    }
    [[nodiscard]] const backend::simd_detail::job<scalar>* data() const noexcept { return jobs_; }

   private:
    static constexpr index_t stack_jobs = 128;
    backend::simd_detail::job<scalar> stack_[stack_jobs];
    std::vector<backend::simd_detail::job<scalar>> heap_;
    backend::simd_detail::job<scalar>* jobs_ = stack_;
    index_t n_ = 0;
  };

  using pk_type = backend::simd_detail::p_kernel<Arch, p_type>;
  using lk_type = backend::simd_detail::l_kernel<Arch, lambda_type>;
  using dft_kernel = backend::simd_detail::dft_phase_kernel<Arch, scalar>;
  struct none {
    template <class... A>
    explicit none(const A&...) {}
  };
  static constexpr bool has_pl = path == simd_path::vectorised || path == simd_path::lambda_vectorised;
  static constexpr bool has_fft = path == simd_path::row_fft;

  /// The kernels of *enc_ (a permutation's indices, a dense P's matrix, FFT twiddles).
  void build(position_tables tables) {
    const E& enc = *enc_;
    if constexpr (path == simd_path::vectorised || path == simd_path::lambda_vectorised) {
      pk_.emplace(enc.p());
      if constexpr (std::is_constructible_v<lk_type, const lambda_type&, bool>) {
        lk_.emplace(enc.lambda(), tables == position_tables::stepped);
        if constexpr (std::is_same_v<p_type, p::odd_even<scalar>> && std::is_same_v<lambda_type, lambda::rotation<scalar>>)
          if (lk_->folds_odd_even(enc.dim())) lk_->natural_order();  // the fold reads C | S as vectors
      } else {
        lk_.emplace(enc.lambda());
      }
    } else if constexpr (path == simd_path::row_fft) {
      if (dft_kernel::supports(enc.dim())) dft_.emplace(enc.dim(), enc.lambda());
    }
  }

  void check(const matrix_view<const scalar>& x, const matrix_view<scalar>& out, const positions& pos,
             const char* where, const char* xn, const char* on, const char* pn = "positions") const {
    // Fast accept first: the diagnostics below build their messages eagerly (heap strings),
    // which a steady-state call must not pay for.
    const index_t d = enc_->dim(), f = enc_->feature_dim();
    const auto view_ok = [](const auto& v) {
      return v.rows >= 0 && v.cols >= 0 && (v.rows <= 1 || v.row_stride >= v.cols) &&
             (v.rows == 0 || v.cols == 0 || v.data != nullptr);
    };
    if (view_ok(x) && view_ok(out) && x.cols == d && out.cols == f && out.rows == x.rows && positions_ok(pos, x.rows))
      return;
    validate(x, where, xn);
    validate(out, where, on);
    detail::require_shape(x.cols == d, where, xn, detail::lazy_concat("must have dim() = ", d, " columns"), x.cols);
    detail::require_shape(out.cols == f, where, on, detail::lazy_concat("must have feature_dim() = ", f, " columns"),
                          out.cols);
    detail::require_shape(out.rows == x.rows, where, on, detail::lazy_concat("must have ", x.rows, " rows"), out.rows);
    pos.require_rows(x.rows, where, pn);
  }
  /// An array of `rows` entries, or an offset whose last row's position fits in position_t.
  static bool positions_ok(const positions& pos, index_t rows) noexcept {
    if (pos.is_array()) return pos.size() == rows;
    return rows <= 1 || pos.offset() <= std::numeric_limits<position_t>::max() - (rows - 1);
  }
  /// Shapes of x and out, and the positions against x.seq even when x holds no matrix (as the
  /// reference `encode_qk` does: a wrong-sized array is an error whatever the head count).
  void check_heads(const heads_view<const scalar>& x, const heads_view<scalar>& out, const positions& pos,
                   const char* where, const char* xn, const char* on, const char* pn) const {
    if (x.batch >= 0 && x.heads >= 0 && x.seq >= 0 && out.batch == x.batch && out.heads == x.heads) {
      if (x.batch > 0 && x.heads > 0) check(x.head(0, 0), out.head(0, 0), pos, where, xn, on, pn);
      else if (!positions_ok(pos, x.seq)) pos.require_rows(x.seq, where, pn);
      return;
    }
    detail::require_shape(x.batch >= 0 && x.heads >= 0 && x.seq >= 0, where, xn,
                          "must have non-negative batch, heads and seq", detail::lazy_concat(x.batch, "x", x.heads, "x", x.seq));
    detail::require_shape(out.batch == x.batch && out.heads == x.heads, where, on,
                          detail::lazy_concat("must have ", x.batch, " batch entries and ", x.heads, " heads"),
                          detail::lazy_concat(out.batch, "x", out.heads));
  }

  /// Encodes `count` jobs of `rows` rows each, all at positions `pos`.
  void run(const backend::simd_detail::job<scalar>* jobs, index_t count, index_t rows, const positions& pos) const {
    if (count == 0 || rows == 0) return;
    if constexpr (has_pl) {
      run_table(jobs, count, rows, pos);
      return;
    } else if constexpr (has_fft) {
      if (dft_) {
        run_fft(jobs, count, rows, pos);
        return;
      }
    }
    for (index_t j = 0; j < count; ++j)
      for (index_t i = 0; i < rows; ++i) enc_->encode_features(pos[i], jobs[j].x.row(i), jobs[j].out.row(i));
  }

  /// Table budget (L2-resident) and the most positions per block: long blocks keep each
  /// matrix's rows streaming (a block of 256 rows is 64 KiB of one head at d = 64; blocks of 64
  /// were slower, the 32 streams restarting every 16 KiB: bench/results/tuning.md#encode-max-block).
  static constexpr std::size_t table_bytes = 128 * 1024;
  static constexpr index_t max_block = 256;
  /// Table budget of the FFT path (blocks of 16–64 rows: L1/L2-resident next to the scratch).
  static constexpr std::size_t fft_table_bytes = 32 * 1024;

  /// Rows per position block for a table row of `row_bytes` bytes (≥ 1).
  static index_t block_rows(std::size_t row_bytes, std::size_t budget = table_bytes) noexcept {
    if (row_bytes == 0) return max_block;
    return std::clamp<index_t>(static_cast<index_t>(budget / row_bytes), 1, max_block);
  }

  /// Table rows of positions pos[r0 … r0 + m): a run of consecutive positions in one call where
  /// the kernel has `fill_run` (cheaper per position, see cos_sin_rows), else one by one.
  template <class LK, class Entry>
  static void fill_block(const LK& lk, const positions& pos, index_t r0, index_t m, Entry* table, index_t tw, double* c,
                         double* s) noexcept {
    if constexpr (requires(Entry* t, double* a) { lk.fill_run(position_t{}, index_t{}, t, index_t{}, a, a); }) {
      if (!pos.is_array()) {
        constexpr index_t run = backend::simd_detail::cos_sin_rows<Arch, scalar>::run;
        for (index_t q = 0; q < m; q += run)
          lk.fill_run(pos[r0 + q], std::min(run, m - q), table + q * tw, tw, c, s);
        return;
      }
    }
    for (index_t r = 0; r < m; ++r) lk.fill(pos[r0 + r], table + r * tw, c, s);
  }

  /// Output bytes of `count` jobs of `rows` rows.
  double out_bytes(index_t count, index_t rows) const noexcept {
    return static_cast<double>(count) * static_cast<double>(rows) * static_cast<double>(enc_->feature_dim()) *
           static_cast<double>(sizeof(scalar));
  }

  /// Rows ahead whose input is prefetched where P runs a row at a time (a P alone without a row
  /// loop of its own, a dense or DCT P into a fused chain's scratch; a permutation P alone and
  /// a Householder row map prefetch in their own loops, kernels.hpp).
  static constexpr index_t prefetch_ahead = backend::simd_detail::p_prefetch_rows;
  static void prefetch_row(const matrix_view<const scalar>& x, index_t r, index_t end) noexcept {
    if (r < end) backend::simd_detail::prefetch_row(x.row(r), x.cols);
  }

  /// The output of job `jb` can take non-temporal stores (every full-vector store aligned).
  template <class LK>
  static bool can_stream(const backend::simd_detail::job<scalar>& jb, const LK& lk) noexcept {
    constexpr std::size_t vec = sizeof(xsimd::batch<scalar, Arch>);
    if constexpr (!backend::compat::has_stream_store<Arch>) {
      return false;
    } else {
      return lk.stream_layout_ok() && reinterpret_cast<std::uintptr_t>(jb.out.data) % vec == 0 &&
             (static_cast<std::size_t>(jb.out.row_stride) * sizeof(scalar)) % vec == 0;
    }
  }

  /// Λ on m rows (x rows xs apart, table rows tw apart): the kernel's block loop where it has one.
  template <bool Stream, class Entry>
  void lambda_rows(const Entry* table, index_t tw, const scalar* x, index_t xs, scalar* y,
                   index_t ys, index_t m) const {
    if constexpr (requires { lk_->template apply_rows<Stream>(table, tw, x, xs, y, ys, m); }) {
      lk_->template apply_rows<Stream>(table, tw, x, xs, y, ys, m);
    } else {
      for (index_t r = 0; r < m; ++r) lk_->template apply<Stream>(table + r * tw, x + r * xs, y + r * ys);
    }
  }

  /// One matrix's rows [r0, r0 + m) of a block whose table is filled.
  template <bool Stream, class Entry>
  void run_rows(const backend::simd_detail::job<scalar>& jb, index_t r0, index_t m, const Entry* table, index_t tw,
                scalar* scratch) const {
    if constexpr (pk_type::is_identity) {
      lambda_rows<Stream>(table, tw, jb.x.row(r0), jb.x.row_stride, jb.out.row(r0), jb.out.row_stride, m);
    } else if constexpr (lk_type::is_identity) {
      if constexpr (requires { pk_->template apply_rows<Stream>(jb.x.row(0), index_t{}, jb.out.row(0), index_t{}, m); }) {
        // a permutation P: by tiles of rows where it can (kernels.hpp, permute_tile)
        pk_->template apply_rows<Stream>(jb.x.row(r0), jb.x.row_stride, jb.out.row(r0), jb.out.row_stride, m);
        return;
      }
      for (index_t r = 0; r < m; ++r) {
        prefetch_row(jb.x, r0 + r + prefetch_ahead, r0 + m);
        if constexpr (p_streams) pk_->template apply<Stream>(jb.x.row(r0 + r), jb.out.row(r0 + r));
        else pk_->apply(jb.x.row(r0 + r), jb.out.row(r0 + r));
      }
    } else if constexpr (composes_p) {  // the table rows are already π^s ∘ P: one permute of x
      lambda_rows<Stream>(table, tw, jb.x.row(r0), jb.x.row_stride, jb.out.row(r0), jb.out.row_stride, m);
    } else {
      const index_t d = enc_->dim();
      if constexpr (std::is_same_v<p_type, p::odd_even<scalar>> && std::is_same_v<lambda_type, lambda::rotation<scalar>>) {
        if (lk_->folds_odd_even(d)) {  // Types 5/6: P folded into the rotation, one pass
          lk_->template apply_rows_odd_even<Stream>(table, tw, jb.x.row(r0), jb.x.row_stride, jb.out.row(r0),
                                                    jb.out.row_stride, m);
          return;
        }
      }
      if constexpr (requires { pk_type::row_map; }) {
        if constexpr (requires { lk_->template apply_rows<Stream>(table, tw, jb.x.row(0), index_t{}, jb.out.row(0),
                                                                  index_t{}, m, *pk_); }) {
          // P of the form x + μ(x)·v (Householder) is applied by Λ as it loads each row.
          lk_->template apply_rows<Stream>(table, tw, jb.x.row(r0), jb.x.row_stride, jb.out.row(r0),
                                           jb.out.row_stride, m, *pk_);
          return;
        }
      }
      // Other P: over a sub-block of rows into an L1-resident scratch block, then Λ over it.
      for (index_t r = 0; r < m; r += fused_rows) {
        const index_t cnt = std::min(fused_rows, m - r);
        for (index_t i = 0; i < cnt; ++i) {
          prefetch_row(jb.x, r0 + r + i + prefetch_ahead, r0 + m);
          pk_->apply(jb.x.row(r0 + r + i), scratch + i * d);
        }
        lambda_rows<Stream>(table + r * tw, tw, scratch, d, jb.out.row(r0 + r), jb.out.row_stride, cnt);
      }
    }
  }

  /// P runs as a pass of its own before Λ (a Householder row map's μ, a permutation, a P into
  /// scratch): the rows ahead are prefetched where the kernel's own row loop does not reach
  /// them (a position's rows of interleaved matrices). Type 1 and a permutation P alone gain
  /// from it, while RoPE, Type 5 and complex phase ran slower with it
  /// (bench/results/tuning.md#encode-p-waits).
  bool p_waits() const noexcept {
    if constexpr (pk_type::is_identity || composes_p) {
      return false;
    } else if constexpr (std::is_same_v<p_type, p::odd_even<scalar>> &&
                         std::is_same_v<lambda_type, lambda::rotation<scalar>>) {
      return !lk_->folds_odd_even(enc_->dim());
    } else {
      return true;
    }
  }

  /// Rows per P-then-Λ sub-block of a fused chain (scratch: fused_rows × d scalars).
  static constexpr index_t fused_rows = 16;

  /// P alone (Λ = I) can store its rows non-temporally: a permutation writes full vectors.
  static constexpr bool p_streams = requires(const pk_type& pk, const scalar* x, scalar* y) {
    pk.template apply<true>(x, y);
  };

  /// A permutation P (p::permutation, p::odd_even) before permutation powers (Type 7): Λ(Px)[j]
  /// = x[P(π^s(j))], so each table row π^s is composed with P's indices once per position (for
  /// every head and for Q and K) and the rows take one permute instead of two.
  static constexpr bool composes_p =
      std::is_same_v<lambda_type, lambda::permutation_power<scalar>> &&
      std::is_base_of_v<backend::simd_detail::permutation_gather<Arch, scalar>, pk_type>;

  /// Permutation powers after P = I, a composed permutation P or a Householder P run w
  /// matrices at a time on AVX/AVX2 (`apply_tiles`): the rows of one position, one per matrix,
  /// share π^s and are permuted together.
  static constexpr bool tiles_across_jobs = [] {
    if constexpr (std::is_same_v<lambda_type, lambda::permutation_power<scalar>>) {
      return backend::simd_detail::tile_permute_v<scalar, Arch> &&
             (pk_type::is_identity || composes_p || requires(const pk_type& pk) { pk.reflector(); });
    } else {
      return false;
    }
  }();

  /// Widest span of the w matrices' first input rows for which a call that streams from DRAM
  /// takes the tiles across matrices (`inputs_close`).
  static constexpr std::size_t tile_span_bytes = std::size_t{64} << 10;

  /// The first input rows of `count` jobs lie within `tile_span_bytes` of each other (BSNH:
  /// the heads of a position are adjacent). Inputs far apart (BNSH, n·d apart) are read a row
  /// of each at a time, which measured slower than a matrix at a time once the data came from
  /// DRAM (with pages allocated in order, rows a power of two apart fall in the same DRAM
  /// banks). Where the outputs are the ones far apart (BSNH in, BNSH out: a transposed view of
  /// a QKV buffer encoded into new tensors), the streamed tiles are the faster way
  /// (bench/results/tuning.md#encode-tile-span).
  static bool inputs_close(const backend::simd_detail::job<scalar>* jobs, index_t count) noexcept {
    return within_span(jobs, count, [](const auto& jb) -> const void* { return jb.x.data; });
  }

  /// The first output rows of `count` jobs lie within `tile_span_bytes` of each other.
  static bool outputs_close(const backend::simd_detail::job<scalar>* jobs, index_t count) noexcept {
    return within_span(jobs, count, [](const auto& jb) -> const void* { return jb.out.data; });
  }

  /// The addresses `first(job)` of `count` jobs lie within `tile_span_bytes` of each other.
  template <class F>
  static bool within_span(const backend::simd_detail::job<scalar>* jobs, index_t count, F first) noexcept {
    std::uintptr_t lo = reinterpret_cast<std::uintptr_t>(first(jobs[0])), hi = lo;
    for (index_t i = 1; i < count; ++i) {
      lo = std::min(lo, reinterpret_cast<std::uintptr_t>(first(jobs[i])));
      hi = std::max(hi, reinterpret_cast<std::uintptr_t>(first(jobs[i])));
    }
    return hi - lo <= tile_span_bytes;
  }

  /// Positions per block of `by_layout` when a run's inputs are interleaved and its outputs far
  /// apart (streamed calls): each job then writes a contiguous run of rows. Cached calls keep a
  /// position at a time, which is faster there (bench/results/tuning.md#encode-far-output-rows).
  static constexpr index_t far_output_rows = 32;

  /// A run of jobs whose inputs are interleaved by rows (`interleaved_run`): `count` jobs,
  /// job i's input and output i·hx and i·hy elements after job 0's.
  struct interleaved {
    index_t count, hx, hy;
  };

  /// The run of jobs from `jobs[0]` on (≤ count) whose inputs are interleaved by rows: job
  /// i's input and output start i·hx and i·hy elements after job 0's (hx, hy at least a row
  /// wide), with the same row strides, and a position's input rows of all of them lie within
  /// one row stride (BSNH heads: hx = d, row stride = heads·d). The outputs may be interleaved
  /// too or lie far apart (BNSH: hy = n·f, the usual target of a transposed view of a QKV
  /// buffer). Count 1 when jobs[1] does not continue jobs[0] so. Addresses are compared as
  /// integers: consecutive jobs may lie in different buffers (Q's last head, K's first).
  static interleaved interleaved_run(const backend::simd_detail::job<scalar>* jobs, index_t count) noexcept {
    if (count < 2) return {count, 0, 0};
    const auto& a = jobs[0];
    const auto offset = [](const void* p, const void* base) {  // bytes from base to p
      return static_cast<std::intptr_t>(reinterpret_cast<std::uintptr_t>(p) - reinterpret_cast<std::uintptr_t>(base));
    };
    const std::intptr_t bx = offset(jobs[1].x.data, a.x.data), by = offset(jobs[1].out.data, a.out.data);
    constexpr auto size = static_cast<std::intptr_t>(sizeof(scalar));
    if (bx % size != 0 || by % size != 0 || bx / size < a.x.cols || by / size < a.out.cols) return {1, 0, 0};
    const index_t hx = static_cast<index_t>(bx / size), hy = static_cast<index_t>(by / size);
    index_t g = 1;
    while (g < count && offset(jobs[g].x.data, a.x.data) == g * bx && offset(jobs[g].out.data, a.out.data) == g * by &&
           jobs[g].x.row_stride == a.x.row_stride && jobs[g].out.row_stride == a.out.row_stride &&
           g * hx + a.x.cols <= a.x.row_stride)
      ++g;
    return {g, hx, hy};
  }

  /**
   * `rows_of(job, first, count, table row, table stride, p)` over the rows [r0, r0 + m) of
   * every job (of `rows` in all), the block's table rows `tw` apart; p: the index in `pos` of
   * the job's row `first` (the position of all its rows where the table stride is 0).
   * Matrices whose inputs are interleaved by rows (`interleaved_run`: BSNH heads) go a
   * position at a time, its g rows as one matrix of g rows that all read the position's table
   * row (table stride 0): one contiguous read instead of g streams H·d apart. The rest go a
   * matrix at a time.
   * `prefetch`: the next positions' rows are prefetched (`p_waits`).
   *
   * When the outputs of such a run lie far apart (BSNH in, BNSH out: a transposed view of a
   * QKV buffer encoded into new tensors) and the call streams (`streams`: outputs past the
   * cache, written with non-temporal stores), the run goes `far_output_rows` positions at a
   * time instead, job by job, so that each job writes a contiguous run of rows rather than
   * one row into each of g streams (same-bank DRAM pages, as for the permutation tiles:
   * bench/results/tuning.md#encode-tile-span); the next block's inputs, one contiguous region,
   * are prefetched into L2 first.
   */
  template <class Entry, class F>
  static void by_layout(const backend::simd_detail::job<scalar>* jobs, index_t count, index_t r0, index_t m,
                        index_t rows, const Entry* table, index_t tw, bool prefetch, bool streams, F&& rows_of) {
    index_t j = 0;
    while (j < count) {
      const auto [g, hx, hy] = interleaved_run(jobs + j, count - j);
      const auto& j0 = jobs[j];
      if (g < 2) {
        rows_of(j0, r0, m, table, tw, r0);
        ++j;
        continue;
      }
      if (streams && (g - 1) * hy + j0.out.cols > j0.out.row_stride) {  // outputs far apart
        constexpr index_t sub = far_output_rows;
        const index_t span = (g - 1) * hx + j0.x.cols;
        for (index_t r = r0; r < r0 + m; r += sub) {
          const index_t cnt = std::min(sub, r0 + m - r);
          for (index_t q = r + sub; q < std::min(rows, r + 2 * sub); ++q)
            backend::simd_detail::prefetch_row<2>(j0.x.row(q), span);
          for (index_t i = 0; i < g; ++i) rows_of(jobs[j + i], r, cnt, table + (r - r0) * tw, tw, r);
        }
        j += g;
        continue;
      }
      const index_t ahead = prefetch ? (prefetch_ahead + g - 1) / g : rows;
      for (index_t r = r0; r < r0 + m; ++r) {
        if (r + ahead < rows)
          for (index_t i = 0; i < g; ++i) backend::simd_detail::prefetch_row(j0.x.row(r + ahead) + i * hx, j0.x.cols);
        const backend::simd_detail::job<scalar> pj{matrix_view<const scalar>(j0.x.row(r), g, j0.x.cols, hx),
                                                   matrix_view<scalar>(j0.out.row(r), g, j0.out.cols, hy)};
        rows_of(pj, 0, g, table + (r - r0) * tw, 0, r);
      }
      j += g;
    }
  }

  /// Jobs [j, j + w) of a block (rows r0 … r0 + m) through `apply_tiles`.
  template <bool Stream, class Entry>
  void run_tiles(const backend::simd_detail::job<scalar>* jobs, index_t r0, index_t m, const Entry* table,
                 index_t tw) const {
    constexpr index_t w = static_cast<index_t>(xsimd::batch<scalar, Arch>::size);
    const scalar* x[w];
    scalar* y[w];
    index_t xs[w], ys[w];
    for (index_t i = 0; i < w; ++i) {
      x[i] = jobs[i].x.row(r0);
      y[i] = jobs[i].out.row(r0);
      xs[i] = jobs[i].x.row_stride;
      ys[i] = jobs[i].out.row_stride;
    }
    if constexpr (pk_type::is_identity || composes_p) lk_->template apply_tiles<Stream>(table, tw, x, xs, y, ys, m);
    else lk_->template apply_tiles<Stream>(table, tw, x, xs, y, ys, m, *pk_);
  }

  /// Scalars of `run_tiles_staged`'s stage for outputs of f features: w jobs of
  /// `far_output_rows` rows and one row of skew each.
  static constexpr index_t stage_size(index_t f) noexcept {
    return static_cast<index_t>(xsimd::batch<scalar, Arch>::size) * (far_output_rows + 1) * f;
  }

  /// `run_tiles` for w jobs whose outputs lie far apart: `far_output_rows` positions at a
  /// time, the tiles into `stage` (w × far_output_rows rows, job-major), then each job's rows
  /// written out as one contiguous run — with non-temporal stores (`Stream`: BSNH in, BNSH
  /// out, past the cache), instead of one row into each of w streams per position; or
  /// cached, for inputs far apart too (BNSH heads, a power of two apart: a position's input
  /// rows of the w heads already fill the L1 sets they map to, and the output rows went to
  /// the same sets). Each job's stage rows start one row further on (skew) than a multiple
  /// of its run, so a position's w stage rows fall in different L1 sets.
  template <bool Stream, class Entry>
  void run_tiles_staged(const backend::simd_detail::job<scalar>* jobs, index_t r0, index_t m, const Entry* table,
                        index_t tw, scalar* stage) const {
    using B = xsimd::batch<scalar, Arch>;
    constexpr index_t w = static_cast<index_t>(B::size), rows_max = far_output_rows;
    const index_t f = jobs[0].out.cols, js = (rows_max + 1) * f;
    const scalar* x[w];
    scalar* y[w];
    index_t xs[w], ys[w];
    for (index_t r = r0; r < r0 + m; r += rows_max) {
      const index_t cnt = std::min(rows_max, r0 + m - r);
      for (index_t i = 0; i < w; ++i) {
        x[i] = jobs[i].x.row(r);
        xs[i] = jobs[i].x.row_stride;
        y[i] = stage + i * js;
        ys[i] = f;
      }
      const Entry* t = table + (r - r0) * tw;
      if constexpr (pk_type::is_identity || composes_p) lk_->template apply_tiles<false>(t, tw, x, xs, y, ys, cnt);
      else lk_->template apply_tiles<false>(t, tw, x, xs, y, ys, cnt, *pk_);
      for (index_t i = 0; i < w; ++i)
        for (index_t p = 0; p < cnt; ++p) {
          const scalar* src = y[i] + p * f;
          scalar* dst = jobs[i].out.row(r + p);
          for (index_t c = 0; c < f; c += w) backend::simd_detail::store<Stream>(B::load_unaligned(src + c), dst + c);
        }
    }
  }

  /// Table rows [0, m) (tw apart) ← P's indices ∘ row, where `composes_p`.
  template <class Entry>
  void compose_block(Entry* table, index_t tw, index_t m) const noexcept {
    if constexpr (composes_p) {
      const auto* idx = pk_->idx_.data();
      const index_t d = enc_->dim();
      if constexpr (std::is_same_v<Entry, std::uint8_t>) {  // d ≤ 256: a byte table (`bytes_ok`)
        std::uint8_t lut[backend::simd_detail::byte_permute_max_d] = {};
        for (index_t j = 0; j < d; ++j) lut[j] = static_cast<std::uint8_t>(idx[static_cast<std::size_t>(j)]);
        for (index_t r = 0; r < m; ++r) backend::simd_detail::lookup_bytes<Arch>(lut, d, table + r * tw, table + r * tw, d);
        return;
      }
      for (index_t r = 0; r < m; ++r) {
        Entry* row = table + r * tw;
        for (index_t j = 0; j < d; ++j) row[j] = static_cast<Entry>(idx[static_cast<std::size_t>(row[j])]);
      }
    }
  }

  /// Encodes `count` jobs of `rows` rows at positions `pos` through the P and Λ kernels.
  template <class LK = lk_type>
  void run_table(const backend::simd_detail::job<scalar>* jobs, index_t count, index_t rows,
                 const positions& pos) const {
    using entry = typename LK::entry;
    const LK& lk = *lk_;
    const index_t tw = lk.table_width();
    const std::size_t row_bytes = static_cast<std::size_t>(tw) * sizeof(entry);
    const index_t block = block_rows(row_bytes);
    // The table lives in the calling thread's grow-only workspace: no allocation once warm.
    auto& ws = backend::simd_workspace::this_thread();
    entry* table = ws.get<entry>(backend::simd_workspace::encode_table, std::max<index_t>(1, block * tw));
    const index_t staged = tiles_across_jobs ? stage_size(enc_->feature_dim()) : 0;
    // P's sub-block rows, or the staged rows of `run_tiles_staged` (never both at once)
    scalar* scratch = ws.get<scalar>(backend::simd_workspace::encode_rows, std::max(fused_rows * enc_->dim(), staged));
    detail::small_buffer<double> c(lk.angle_count()), s(lk.angle_count());
    // Outputs larger than the threshold bypass the cache (no read-for-ownership of each line).
    const bool stream = out_bytes(count, rows) >= static_cast<double>(stream_threshold_);
    bool streamed = false;
    // Permutation powers on AVX2 (d ≤ 256): each block's table is made in bytes (its rows by
    // `lookup_bytes`), read so by the rows that run a matrix at a time (`permute_row_bytes`;
    // not a Householder row map), and widened to entries, once per block on first use, for the
    // kernels that read entries (the tiles).
    std::uint8_t* bytes = nullptr;
    if constexpr (requires { lk.bytes_ok(); }) {
      if (lk.bytes_ok())
        bytes = ws.get<std::uint8_t>(backend::simd_workspace::encode_table_bytes, std::max<index_t>(1, block * tw));
    }
    constexpr bool rows_take_bytes = requires { lk.bytes_ok(); } && !requires { pk_type::row_map; };
    for (index_t r0 = 0; r0 < rows; r0 += block) {
      const index_t m = std::min(block, rows - r0);
      bool widened = bytes == nullptr;
      if constexpr (requires { lk.bytes_ok(); }) {
        if (bytes != nullptr) {
          fill_block(lk, pos, r0, m, bytes, tw, c.data(), s.data());
          compose_block(bytes, tw, m);
        }
      }
      if (bytes == nullptr) {
        fill_block(lk, pos, r0, m, table, tw, c.data(), s.data());
        compose_block(table, tw, m);
      }
      const auto entries = [&]() -> const entry* {
        if (!widened) {
          backend::simd_detail::widen_indices(bytes, table, m * tw);
          widened = true;
        }
        return table;
      };
      const auto rows_of = [&](const backend::simd_detail::job<scalar>& jb, index_t first, index_t cnt,
                               const auto* t, index_t t_stride, index_t) {
        if (stream && (!LK::is_identity || p_streams) && can_stream(jb, lk)) {
          streamed = true;
          run_rows<true>(jb, first, cnt, t, t_stride, scratch);
        } else {
          run_rows<false>(jb, first, cnt, t, t_stride, scratch);
        }
      };
      const auto one_job = [&](const backend::simd_detail::job<scalar>& jb) {
        if constexpr (rows_take_bytes) {
          if (bytes != nullptr) return rows_of(jb, r0, m, static_cast<const std::uint8_t*>(bytes), tw, r0);
        }
        rows_of(jb, r0, m, entries(), tw, r0);
      };
      bool tiles = false;
      if constexpr (tiles_across_jobs) tiles = lk.tiles_ok();
      if (!tiles) {
        by_layout(jobs, count, r0, m, rows, entries(), tw, p_waits(), stream, rows_of);
        continue;
      }
      if constexpr (tiles_across_jobs) {
        if (run_job_tiles(lk, jobs, count, r0, m, tw, stream, scratch, one_job, entries)) streamed = true;
      }
    }
    if (streamed) backend::compat::stream_fence();
  }

  /// One table block's jobs w at a time, each group's rows as tiles across its w matrices
  /// (`tiles_across_jobs`), or a matrix at a time where the layout says so (`inputs_close`,
  /// `outputs_close`); the last count mod w jobs one at a time. True when a tile was stored
  /// non-temporally.
  template <class LK, class OneJob, class Entries>
  bool run_job_tiles(const LK& lk, const backend::simd_detail::job<scalar>* jobs, index_t count, index_t r0, index_t m,
                     index_t tw, bool stream, scalar* scratch, const OneJob& one_job, const Entries& entries) const {
    constexpr index_t w = static_cast<index_t>(xsimd::batch<scalar, Arch>::size);
    bool streamed = false;
    index_t j = 0;
    for (; j + w <= count; j += w) {
      if (stream && !inputs_close(jobs + j, w)) {  // streamed from DRAM, far apart: a matrix at a time
        for (index_t i = 0; i < w; ++i) one_job(jobs[j + i]);
        continue;
      }
      bool all = stream;
      for (index_t i = 0; i < w && all; ++i) all = can_stream(jobs[j + i], lk);
      streamed = streamed || all;
      const bool far_out = !outputs_close(jobs + j, w);
      if (all && far_out) {
        run_tiles_staged<true>(jobs + j, r0, m, entries(), tw, scratch);
        continue;
      }
      if (!stream && far_out && !inputs_close(jobs + j, w)) {
        run_tiles_staged<false>(jobs + j, r0, m, entries(), tw, scratch);
        continue;
      }
      if (all) run_tiles<true>(jobs + j, r0, m, entries(), tw);
      else run_tiles<false>(jobs + j, r0, m, entries(), tw);
    }
    for (; j < count; ++j) one_job(jobs[j]);
    return streamed;
  }

  void run_fft(const backend::simd_detail::job<scalar>* jobs, index_t count, index_t rows, const positions& pos) const {
    const auto& lk = dft_->phase();
    const index_t tw = lk.table_width();
    constexpr index_t lanes = dft_kernel::lanes;
    const std::size_t row_bytes = static_cast<std::size_t>(tw) * sizeof(scalar);
    // Blocks are whole groups of `lanes` rows; the table and the FFT's scratch live in the
    // thread's grow-only workspace (nothing large on the stack at any d ≤ 256).
    const index_t block = std::max<index_t>(lanes, block_rows(row_bytes, fft_table_bytes) / lanes * lanes);
    auto& ws = backend::simd_workspace::this_thread();
    scalar* table = ws.get<scalar>(backend::simd_workspace::encode_table, block * tw);
    scalar* scratch = ws.get<scalar>(backend::simd_workspace::encode_rows, dft_kernel::scratch_size(enc_->dim()));
    detail::small_buffer<double> c(lk.angle_count()), s(lk.angle_count());
    const bool stream = out_bytes(count, rows) >= static_cast<double>(stream_threshold_);
    bool streamed = false;
    for (index_t r0 = 0; r0 < rows; r0 += block) {
      const index_t m = std::min(block, rows - r0);
      fill_block(lk, pos, r0, m, table, tw, c.data(), s.data());
      const auto rows_of = [&](const backend::simd_detail::job<scalar>& jb, index_t first, index_t cnt,
                               const scalar* t, index_t t_stride, index_t p) {
        if (!dft_kernel::stride_ok(jb.x.row_stride)) {
          for (index_t r = 0; r < cnt; ++r)
            enc_->encode_features(pos[t_stride == 0 ? p : p + r], jb.x.row(first + r), jb.out.row(first + r));
          return;
        }
        const bool nt = stream && can_stream(jb, lk);
        streamed = streamed || nt;
        for (index_t g = 0; g < cnt; g += lanes) {
          const index_t k = std::min(lanes, cnt - g);
          if (nt)
            dft_->template apply_rows<true>(jb.x.row(first + g), jb.x.row_stride, k, t + g * t_stride, t_stride,
                                            jb.out.row(first + g), jb.out.row_stride, scratch);
          else
            dft_->apply_rows(jb.x.row(first + g), jb.x.row_stride, k, t + g * t_stride, t_stride, jb.out.row(first + g),
                             jb.out.row_stride, scratch);
        }
      };
      by_layout(jobs, count, r0, m, rows, table, tw, false, stream, rows_of);
    }
    if (streamed) backend::compat::stream_fence();
  }

  std::shared_ptr<const E> owned_;  ///< the encoder when built from a temporary, else null
  const E* enc_;
  std::size_t stream_threshold_ = default_stream_threshold;
  std::optional<std::conditional_t<has_pl, pk_type, none>> pk_;
  std::optional<std::conditional_t<has_pl, lk_type, none>> lk_;
  std::optional<std::conditional_t<has_fft, dft_kernel, none>> dft_;
};

// ------------------------------------------------------------------ backend-tagged entry points

namespace backend::simd_detail {
/// The encoding the kernels are instantiated for: a preset (type1, rope_neox, ...) as its
/// `encoder<P, Λ>` (presets add constructors only), so that every preset sharing a (P, Λ) pair
/// shares one set of kernels; any other encoding as itself.
template <class E>
const auto& kernel_encoding(const E& e) noexcept {
  if constexpr (lrpe_encoder<E>)
    return static_cast<const encoder<typename E::p_type, typename E::lambda_type>&>(e);
  else
    return e;
}
/// Encoders whose backward the SIMD kernels run: real, P = I, Λ a rotation (RoPE in both
/// pairings), a permutation power (PermuteFormer) or the identity. Their dx = Λ⁽ˢ⁾ᵀg is the
/// forward of `transposed` Λ at the same positions, and dL/dθ_k = s·(x_i·dx_j − x_j·dx_i)
/// needs x and dx only (Λ⁽ˢ⁾ commutes with a pair's quarter turn), which
/// `rotation::accumulate_gradient(s, x, dx, ·)` computes.
template <class E>
inline constexpr bool simd_backward_v =
    !E::is_complex && std::is_same_v<typename E::p_type, p::identity<typename E::scalar>> &&
    (std::is_same_v<typename E::lambda_type, lambda::rotation<typename E::scalar>> ||
     std::is_same_v<typename E::lambda_type, lambda::permutation_power<typename E::scalar>> ||
     std::is_same_v<typename E::lambda_type, lambda::identity<typename E::scalar>>);

/// Λ⁽ˢ⁾ᵀ = Λ⁽⁻ˢ⁾ as a Λ of the same kind at the same s: the rotation by −θ (s·(−θ) = −(s·θ)
/// exactly: cos the same, sin negated), the powers of π⁻¹, the identity. No −s is formed, so
/// every int64 position works.
template <class L>
L transposed(const L& l) {
  using T = typename L::scalar;
  if constexpr (std::is_same_v<L, lambda::rotation<T>>) {
    std::vector<double> theta(l.frequencies().begin(), l.frequencies().end());
    for (double& t : theta) t = -t;
    return L(l.dim(), std::move(theta), l.pair_mode());
  } else if constexpr (std::is_same_v<L, lambda::permutation_power<T>>) {
    std::vector<index_t> inverse(static_cast<std::size_t>(l.dim()));
    for (index_t j = 0; j < l.dim(); ++j) inverse[static_cast<std::size_t>(l.indices()[static_cast<std::size_t>(j)])] = j;
    return L(inverse);
  } else {
    return l;
  }
}

/// Rows ahead that `rope_theta_backward` prefetches: its x and g rows are two row streams per
/// head that the hardware prefetchers alone left waiting (bench/results/issue38-backward.md).
inline constexpr index_t theta_prefetch_rows = 48;

/**
 * RoPE (P = I) with θ's gradient: dx = Λ⁽ˢ⁾ᵀg and dL/dθ in one pass over
 * the rows, instead of the dx pass and then a pass that reads x and dx back: g and x are read
 * once, dx written once (non-temporal for large outputs), and θ's sum reads dx's row from an
 * L1 copy. dx is formed as `l_kernel<rotation>::rotate_split` forms the transposed encoder's
 * rows (cos and sin of −sθ from `cos_sin_rows`, a·c − b·s and b·c + a·s; interleaved pairs by
 * stride-2 loops, stored as they are), and dθ_k = s·(x_i·dx_j − x_j·dx_i) summed in double. Positions go by runs of `cos_sin_rows::run` (one table for every
 * head); the tables and the row copy live in the workspace's encode slots.
 */
template <class A, class T>
class rope_theta_backward {
 public:
  using B = xsimd::batch<T, A>;
  static constexpr index_t W = B::size;
  static constexpr index_t run = cos_sin_rows<A, T>::run;

  /// Outputs of `stream_bytes` or more take non-temporal stores (the encoder's default threshold).
  rope_theta_backward(const lambda::rotation<T>& l, index_t d, simd_workspace& ws,
                      std::size_t stream_bytes = simd_encoder<encoder<p::identity<T>, lambda::rotation<T>>, A>::default_stream_threshold)
      : negated_(negated(l)), half_(l.rotated_dim() / 2), d_(d), interleaved_(l.pair_mode() == pairing::interleaved),
        rows_(negated_.data(), half_), ws_(ws), c_(static_cast<std::size_t>(2 * half_)), stream_bytes_(stream_bytes) {}

  /// Every head's rows of one side: x and g (d_out) read, dx written, θ's gradient added to
  /// `grad` (half_ entries).
  void side(const heads_view<const T>& x, const positions& pos, const heads_view<const T>& g,
            const heads_view<T>& dx, double* grad) {
    const bool stream = streams(dx);
    T* table = ws_.get<T>(simd_workspace::encode_table, run * 2 * half_);
    T* row = ws_.get<T>(simd_workspace::encode_rows, round_up(std::max<index_t>(d_, 1), W));
    double* c = c_.data();
    double* sn = c + half_;
    for (index_t r0 = 0; r0 < x.seq; r0 += run) {
      const index_t m = std::min(run, x.seq - r0);
      if (pos.is_array()) {
        for (index_t j = 0; j < m; ++j) rows_.fill(pos[r0 + j], table + j * 2 * half_, c, sn);
      } else {
        rows_.fill_run(pos[r0], m, table, 2 * half_, c, sn);
      }
      for (index_t bi = 0; bi < x.batch; ++bi)
        for (index_t h = 0; h < x.heads; ++h) {
          const auto xh = x.head(bi, h), gh = g.head(bi, h);
          const auto yh = dx.head(bi, h);
          for (index_t j = 0; j < m; ++j) {
            const index_t r = r0 + j;
            if (r + theta_prefetch_rows < x.seq) {
              prefetch_row<2>(xh.row(r + theta_prefetch_rows), d_);
              prefetch_row<2>(gh.row(r + theta_prefetch_rows), d_);
            }
            const T* tr = table + j * 2 * half_;
            const auto s = static_cast<double>(pos[r]);
            if (interleaved_) interleaved_row(tr, s, xh.row(r), gh.row(r), yh.row(r), grad);
            else one_row(tr, s, xh.row(r), gh.row(r), yh.row(r), row, grad, stream);
          }
        }
    }
    if (stream) compat::stream_fence();
  }

 private:
  std::vector<double> negated_;  ///< −θ: the transposed encoder's frequencies
  index_t half_, d_;
  bool interleaved_;
  cos_sin_rows<A, T> rows_;
  simd_workspace& ws_;
  std::vector<double> c_;  ///< the table's cos and sin scratch (2·half doubles)
  std::size_t stream_bytes_;

  static std::vector<double> negated(const lambda::rotation<T>& l) {
    std::vector<double> v(l.frequencies().begin(), l.frequencies().end());
    for (double& t : v) t = -t;
    return v;
  }

  /// Large outputs whose every vector store is aligned take non-temporal stores (as the
  /// encoder's `set_stream_threshold`).
  bool streams(const heads_view<T>& dx) const noexcept {
    if constexpr (!compat::has_stream_store<A>) {
      return false;
    } else {
      const double bytes = static_cast<double>(dx.batch * dx.heads * dx.seq) * static_cast<double>(d_) * sizeof(T);
      const auto aligned = [](std::ptrdiff_t n) { return n % W == 0; };
      return !interleaved_ && half_ % W == 0 && aligned(dx.seq_stride) && aligned(dx.head_stride) && aligned(dx.batch_stride) &&
             reinterpret_cast<std::uintptr_t>(dx.data) % sizeof(B) == 0 &&
             bytes >= static_cast<double>(stream_bytes_);
    }
  }

  /// One row: dx's pairs into y (and the L1 copy), the unrotated tail copied, then θ's terms.
  LRPE_ALWAYS_INLINE void one_row(const T* tr, double s, const T* x, const T* g, T* y, T* copy, double* grad,
                                  bool stream) const noexcept {
    const T* c = tr;
    const T* sv_ = tr + half_;
    index_t k = 0;
    for (; k + W <= half_; k += W) {
      const B a = B::load_unaligned(g + k), bb = B::load_unaligned(g + half_ + k);
      const B cv = B::load_unaligned(c + k), sv = B::load_unaligned(sv_ + k);
      const B lo = compat::fms(a, cv, bb * sv), hi = compat::fma(bb, cv, a * sv);
      lo.store_unaligned(copy + k);
      hi.store_unaligned(copy + half_ + k);
      if (stream) {
        compat::store_stream(lo, y + k);
        compat::store_stream(hi, y + half_ + k);
      } else {
        lo.store_unaligned(y + k);
        hi.store_unaligned(y + half_ + k);
      }
    }
    for (; k < half_; ++k) {
      const T a = g[k], bb = g[half_ + k];
      y[k] = copy[k] = lrpe::detail::mul_add(a, c[k], -(bb * sv_[k]));
      y[half_ + k] = copy[half_ + k] = lrpe::detail::mul_add(bb, c[k], a * sv_[k]);
    }
    for (index_t j = 2 * half_; j < d_; ++j) y[j] = g[j];
    const T* __restrict xa = x;
    const T* __restrict b = copy;
    double* __restrict gr = grad;
    const index_t h = half_;
    for (index_t q = 0; q < h; ++q)
      gr[q] += s * (static_cast<double>(xa[q]) * b[q + h] - static_cast<double>(xa[q + h]) * b[q]);
  }

  /// One row in interleaved pairs (2k, 2k + 1): dx's pairs, the tail copied, θ's terms from x
  /// and the dx just written (in L1).
  LRPE_ALWAYS_INLINE void interleaved_row(const T* tr, double s, const T* x, const T* g, T* y, double* grad) const noexcept {
    const T* __restrict c = tr;
    const T* __restrict sv = tr + half_;
    T* __restrict yo = y;
    for (index_t k = 0; k < half_; ++k) {
      const T a = g[2 * k], bb = g[2 * k + 1];
      yo[2 * k] = lrpe::detail::mul_add(a, c[k], -(bb * sv[k]));
      yo[2 * k + 1] = lrpe::detail::mul_add(bb, c[k], a * sv[k]);
    }
    for (index_t j = 2 * half_; j < d_; ++j) y[j] = g[j];
    double* __restrict gr = grad;
    for (index_t k = 0; k < half_; ++k)
      gr[k] += s * (static_cast<double>(x[2 * k]) * y[2 * k + 1] - static_cast<double>(x[2 * k + 1]) * y[2 * k]);
  }
};

}  // namespace backend::simd_detail


/// SIMD encode of one n×d block (see `simd_encoder::encode`). On a `simd_policy` it runs on the
/// calling thread and its workspace (an encoder pass is memory-bound; the pool is not used).
template <backend::simd_backend B, lrpe_encoder E>
void encode(const B&, const E& enc, matrix_view<const typename E::scalar> x, positions pos,
            matrix_view<typename E::scalar> out) {
  const auto& base = backend::simd_detail::kernel_encoding(enc);
  simd_encoder<std::remove_cvref_t<decltype(base)>, typename B::arch_type>(base).encode(x, pos, out);
}

namespace backend::simd_detail {
/// A matrix as a heads_view of one head.
template <class T>
heads_view<T> one_head(const matrix_view<T>& x) noexcept {
  return {x.data, 1, 1, x.rows, x.cols, 0, 0, x.row_stride};
}

/// `rope_theta_backward` for RoPE with θ's gradient wanted; false, having done nothing, otherwise.
template <class A, class E>
bool fused_theta_backward(const E& base, simd_workspace& ws, const heads_view<const typename E::scalar>& x,
                          const positions& pos, const heads_view<const typename E::scalar>& g,
                          const heads_view<typename E::scalar>& dx, encoder_gradient* grad) {
  using T = typename E::scalar;
  if constexpr (std::is_same_v<typename E::lambda_type, lambda::rotation<T>>) {
    if (grad == nullptr) return false;
    rope_theta_backward<A, T>(base.lambda(), base.dim(), ws).side(x, pos, g, dx, grad->lambda.data());
    return true;
  } else {
    (void)base, (void)ws, (void)x, (void)pos, (void)g, (void)dx, (void)grad;
    return false;
  }
}
}  // namespace backend::simd_detail

/**
 * SIMD backward of `encode` (docs/training.md): the same as `enc.backward(x, pos, d_out, dx,
 * grad)`. RoPE (both pairings), permutation powers and the identity Λ after P = I
 * (`simd_backward_v`) run the forward kernel of the transposed encoder on d_out, then θ's
 * gradient from x and dx; any other encoder, or an aliased dx, takes
 * `encoder::backward`.
 */
template <backend::simd_backend B, lrpe_encoder E>
void encode_backward(const B& b, const E& enc, matrix_view<const typename E::scalar> x, positions pos,
                     matrix_view<const typename E::scalar> d_out, matrix_view<typename E::scalar> dx,
                     encoder_gradient* grad = nullptr) {
  const auto& base = backend::simd_detail::kernel_encoding(enc);
  using base_t = std::remove_cvref_t<decltype(base)>;
  if constexpr (backend::simd_detail::simd_backward_v<base_t>) {
    base.check_backward(x, pos, d_out, dx, grad, "lrpe::encode_backward (simd backend)");
    // dx = d_out in place is not a kernel call; dx = x with θ's gradient would read x overwritten
    const bool theta = grad != nullptr && base.lambda_parameter_count() > 0;
    if (dx.data != d_out.data && !(theta && dx.data == x.data)) {
      using backend::simd_detail::one_head;
      if (theta && backend::simd_detail::fused_theta_backward<typename B::arch_type>(
                       base, *backend::simd_detail::resolve(b).ws, one_head(x), pos, one_head(d_out), one_head(dx), grad))
        return;
      const simd_encoder<base_t, typename B::arch_type> se(base_t(base.p(), backend::simd_detail::transposed(base.lambda())));
      se.encode(d_out, pos, dx);  // (θ's gradient: only a rotation has one, taken above)
      return;
    }
  }
  enc.backward(x, pos, d_out, dx, grad);
}

/**
 * SIMD backward of `encode_qk`: every (batch, head) of Q and K, the parameter gradient summed
 * over all of them (as the reference backend's). For `simd_backward_v` encoders the transposed
 * encoder's `encode_qk` runs on every head at once (its per-position tables shared by heads, Q
 * and K), then θ's gradient from every head's rows; otherwise `encode_backward` per head.
 */
template <backend::simd_backend B, lrpe_encoder E>
void encode_qk_backward(const B& b, const E& enc, heads_view<const typename E::scalar> q, positions q_pos,
                        heads_view<const typename E::scalar> k, positions k_pos,
                        heads_view<const typename E::scalar> d_q_out, heads_view<const typename E::scalar> d_k_out,
                        heads_view<typename E::scalar> dq, heads_view<typename E::scalar> dk,
                        encoder_gradient* grad = nullptr) {
  constexpr const char* where = "lrpe::encode_qk_backward (simd backend)";
  detail::require_shape(d_q_out.batch == q.batch && d_q_out.heads == q.heads && dq.batch == q.batch && dq.heads == q.heads,
                        where, "d_q_out, dq", "must have q's batch and heads",
                        detail::lazy_concat(d_q_out.batch, "x", d_q_out.heads, ", ", dq.batch, "x", dq.heads));
  detail::require_shape(d_k_out.batch == k.batch && d_k_out.heads == k.heads && dk.batch == k.batch && dk.heads == k.heads,
                        where, "d_k_out, dk", "must have k's batch and heads",
                        detail::lazy_concat(d_k_out.batch, "x", d_k_out.heads, ", ", dk.batch, "x", dk.heads));
  const auto& base = backend::simd_detail::kernel_encoding(enc);
  using base_t = std::remove_cvref_t<decltype(base)>;
  if constexpr (backend::simd_detail::simd_backward_v<base_t>) {
    const bool theta = grad != nullptr && base.lambda_parameter_count() > 0;
    const bool aliased = dq.data == d_q_out.data || dk.data == d_k_out.data ||
                         (theta && (dq.data == q.data || dk.data == k.data));
    if (!aliased && q.batch > 0 && q.heads > 0 && k.batch > 0 && k.heads > 0) {
      base.check_backward(q.head(0, 0), q_pos, d_q_out.head(0, 0), dq.head(0, 0), grad, where);
      base.check_backward(k.head(0, 0), k_pos, d_k_out.head(0, 0), dk.head(0, 0), grad, where);
      if (theta) {
        auto& ws = *backend::simd_detail::resolve(b).ws;
        using A = typename B::arch_type;
        if (backend::simd_detail::fused_theta_backward<A>(base, ws, q, q_pos, d_q_out, dq, grad)) {
          backend::simd_detail::fused_theta_backward<A>(base, ws, k, k_pos, d_k_out, dk, grad);
          return;
        }
      }
      const simd_encoder<base_t, typename B::arch_type> se(base_t(base.p(), backend::simd_detail::transposed(base.lambda())));
      se.encode_qk(d_q_out, q_pos, d_k_out, k_pos, dq, dk);  // (θ's gradient: taken above)
      return;
    }
  }
  for (index_t bi = 0; bi < q.batch; ++bi)
    for (index_t h = 0; h < q.heads; ++h) encode_backward(b, enc, q.head(bi, h), q_pos, d_q_out.head(bi, h), dq.head(bi, h), grad);
  for (index_t bi = 0; bi < k.batch; ++bi)
    for (index_t h = 0; h < k.heads; ++h) encode_backward(b, enc, k.head(bi, h), k_pos, d_k_out.head(bi, h), dk.head(bi, h), grad);
}

/// SIMD Q and K of every (batch, head) in one call (see `simd_encoder::encode_qk`).
template <backend::simd_backend B, lrpe_encoder E>
void encode_qk(const B&, const E& enc, heads_view<const typename E::scalar> q, positions q_pos,
               heads_view<const typename E::scalar> k, positions k_pos, heads_view<typename E::scalar> q_out,
               heads_view<typename E::scalar> k_out) {
  const auto& base = backend::simd_detail::kernel_encoding(enc);
  simd_encoder<std::remove_cvref_t<decltype(base)>, typename B::arch_type>(base).encode_qk(q, q_pos, k, k_pos, q_out,
                                                                                         k_out);
}

}  // namespace v0
}  // namespace lrpe
