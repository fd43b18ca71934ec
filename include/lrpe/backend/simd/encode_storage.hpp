// SPDX-License-Identifier: MIT
/**
 * @file encode_storage.hpp
 * The SIMD encoders on rows stored in 16 bits (`lrpe::half`, `lrpe::bfloat16`) with a float
 * encoder: `lrpe::encode(backend, enc, x, pos, out)` and `lrpe::encode_qk(backend, enc, q, q_pos,
 * k, k_pos, q_out, k_out)`.
 *
 * Both go by blocks of positions, with one table per block shared by every head (and by Q and
 * K when their positions agree), and every output is the float call's on the widened input,
 * rounded once (to nearest even):
 * - RoPE's shape (P = I, Λ = rotation, either pairing) in one pass (`rotate_stored`): each
 *   vector widened as it is loaded, rotated by the float kernel's arithmetic, and rounded as it
 *   is stored;
 * - any other encoder through a float stage (`encode_stored`): a block's rows widened (exactly)
 *   into the calling thread's workspace, encoded there by `simd_encoder`'s float kernels, and
 *   rounded into the 16-bit rows. The stage is sized to stay in the L2 cache, so the 16-bit rows
 *   go through memory once each way.
 * A block is a whole number of the float tables' runs of positions, so the tables are the float
 * call's.
 */
#pragma once

#include <lrpe/backend/reference/encode.hpp>
#include <lrpe/backend/simd/detail/prefetch.hpp>
#include <lrpe/backend/simd/detail/stored.hpp>
#include <lrpe/backend/simd/encode.hpp>
#include <lrpe/backend/simd/sincos.hpp>
#include <lrpe/backend/simd/tag.hpp>
#include <lrpe/backend/simd/workspace.hpp>
#include <lrpe/backend/simd/xsimd_compat.hpp>
#include <lrpe/core/heads.hpp>
#include <lrpe/core/storage.hpp>
#include <lrpe/detail/small_buffer.hpp>
#include <lrpe/encoder.hpp>
#include <lrpe/lambda/rotation.hpp>
#include <lrpe/p/identity.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace backend::simd_detail {

/// One matrix of a 16-bit call: rows stored as S, encoded into out (out may be x).
template <class S>
struct stored_job {
  matrix_view<const S> x;
  matrix_view<S> out;
};

/// Bytes of a 16-bit call's float stage (one block's widened rows and their features): within
/// the L2 cache of the x86 cores this library targets.
inline constexpr std::size_t storage_stage_bytes = std::size_t{256} << 10;
/// Input rows prefetched ahead of the one being widened (each matrix's own rows, or a
/// position's rows of interleaved matrices).
inline constexpr index_t storage_prefetch_rows = 8;

/// count floats of x rounded into S at p with non-temporal stores, through `row` (a vector-aligned
/// L1 row of count values): p aligned to the vector and count·sizeof(S) a multiple of it.
template <class A, half_precision S>
void narrow_row_stream(const float* x, S* p, index_t count, S* row) noexcept {
  using B = xsimd::batch<float, A>;
  narrow_row<A>(x, row, count);
  const auto* from = reinterpret_cast<const float*>(row);
  auto* to = reinterpret_cast<float*>(p);
  const index_t words = count * static_cast<index_t>(sizeof(S)) / static_cast<index_t>(sizeof(float));
  for (index_t i = 0; i < words; i += static_cast<index_t>(B::size)) compat::store_stream(B::load_aligned(from + i), to + i);
}

/// The outputs of `jobs` can take `narrow_row_stream`: vector-aligned rows of whole vectors.
template <class A, class S>
bool can_stream_stored(const stored_job<S>* jobs, index_t count, index_t f) noexcept {
  constexpr std::size_t vec = sizeof(xsimd::batch<float, A>);
  if (!compat::has_stream_store<A> || (static_cast<std::size_t>(f) * sizeof(S)) % vec != 0) return false;
  for (index_t j = 0; j < count; ++j) {
    const auto& out = jobs[j].out;
    if (reinterpret_cast<std::uintptr_t>(out.data) % vec != 0 || (static_cast<std::size_t>(out.row_stride) * sizeof(S)) % vec != 0)
      return false;
  }
  return true;
}

/**
 * Encodes `count` 16-bit matrices of `rows` rows, all at positions `pos`, through the float
 * kernel `kernel` (see the file comment). Blocks of `block` positions (a multiple of the
 * tables' run, sized so that one matrix's block fills the stage, or a group of matrices' block
 * where there are many); a block's matrices `group` at a time, their rows interleaved in the
 * stage as BSNH heads (one contiguous table row per position for the group). Inputs are read a
 * matrix at a time where each one's rows are contiguous (BNSH), a position at a time otherwise
 * (BSNH: a position's rows of the heads are adjacent), prefetched ahead; outputs of
 * `simd_encoder::default_stream_threshold` bytes or more take non-temporal stores.
 */
template <class A, class Kernel, half_precision S>
void encode_stored(const Kernel& kernel, const stored_job<S>* jobs, index_t count, index_t rows, const positions& pos) {
  if (count == 0 || rows == 0) return;
  const index_t d = kernel.encoding().dim(), f = kernel.encoding().feature_dim();
  constexpr index_t run = cos_sin_rows<A, float>::run, ahead = storage_prefetch_rows;
  const index_t row_bytes = (d + f) * static_cast<index_t>(sizeof(float));
  const index_t fit = std::max<index_t>(1, static_cast<index_t>(storage_stage_bytes) / row_bytes);  // stage rows
  // one matrix: as many runs of positions as fit; many: one run, and as many matrices as fit
  const index_t block = std::min(rows, std::max<index_t>(run, fit / count / run * run));
  const index_t group = std::clamp<index_t>(fit / block, 1, count);
  const bool stream = static_cast<double>(count) * static_cast<double>(rows) * static_cast<double>(f) * sizeof(S) >=
                          static_cast<double>(Kernel::default_stream_threshold) &&
                      can_stream_stored<A>(jobs, count, f);
  auto& ws = simd_workspace::this_thread();
  const index_t out_row = (f * static_cast<index_t>(sizeof(S)) + 63) / 64 * 16;  // floats: whole 64-byte lines
  float* stage = ws.get<float>(simd_workspace::encode_stage, out_row + block * group * (d + f));
  S* narrowed = reinterpret_cast<S*>(stage);  // one output row for the streamed stores
  float* widened = stage + out_row;
  float* features = widened + block * group * d;
  for (index_t r0 = 0; r0 < rows; r0 += block) {
    const index_t m = std::min(block, rows - r0);
    for (index_t j0 = 0; j0 < count; j0 += group) {
      const index_t g = std::min(group, count - j0);
      const stored_job<S>* js = jobs + j0;
      if (js[0].x.row_stride == d) {  // each matrix's rows contiguous: a matrix at a time
        for (index_t j = 0; j < g; ++j)
          for (index_t i = 0; i < m; ++i) {
            if (r0 + i + ahead < rows) prefetch_row(js[j].x.row(r0 + i + ahead), d);
            widen_row<A>(js[j].x.row(r0 + i), widened + (i * g + j) * d, d);
          }
      } else {
        for (index_t i = 0; i < m; ++i)
          for (index_t j = 0; j < g; ++j) {
            if (r0 + i + ahead < rows) prefetch_row(js[j].x.row(r0 + i + ahead), d);
            widen_row<A>(js[j].x.row(r0 + i), widened + (i * g + j) * d, d);
          }
      }
      // the group's rows as one position-major tensor: head j of position i at row i·g + j
      kernel.encode_heads(heads_view<const float>{widened, 1, g, m, d, 0, d, g * d}, pos.slice(r0, m),
                          heads_view<float>{features, 1, g, m, f, 0, f, g * f});
      for (index_t i = 0; i < m; ++i)
        for (index_t j = 0; j < g; ++j) {
          const float* y = features + (i * g + j) * f;
          if (stream) narrow_row_stream<A>(y, js[j].out.row(r0 + i), f, narrowed);
          else narrow_row<A>(y, js[j].out.row(r0 + i), f);
        }
    }
  }
  if (stream) compat::stream_fence();
}

/**
 * RoPE's shape (P = I, Λ = rotation) on 16-bit rows in one pass: per run of positions one
 * cos/sin table (the float kernel's rows, in natural order), then every matrix's rows of the
 * run rotated as they are widened and rounded (`apply_rows_stored`). A position's rows of
 * matrices that are not contiguous on their own (BSNH heads) go together, a matrix's rows
 * otherwise.
 */
template <class A, half_precision S>
void rotate_stored(const lambda::rotation<float>& rotation, const stored_job<S>* jobs, index_t count, index_t rows,
                   const positions& pos) {
  if (count == 0 || rows == 0) return;
  l_kernel<A, lambda::rotation<float>> lk(rotation, /*stepped*/ true);
  lk.natural_order();
  constexpr index_t run = cos_sin_rows<A, float>::run;
  const index_t tw = lk.table_width(), d = rotation.dim();
  float* table = simd_workspace::this_thread().get<float>(simd_workspace::encode_table, run * tw);
  lrpe::detail::small_buffer<double> c(lk.angle_count()), sn(lk.angle_count());
  const bool by_position = jobs[0].x.row_stride != d;
  for (index_t r0 = 0; r0 < rows; r0 += run) {
    const index_t m = std::min(run, rows - r0);
    if (pos.is_array()) {
      for (index_t i = 0; i < m; ++i) lk.fill(pos[r0 + i], table + i * tw, c.data(), sn.data());
    } else {
      lk.fill_run(pos[r0], m, table, tw, c.data(), sn.data());
    }
    if (by_position) {
      for (index_t i = 0; i < m; ++i)
        for (index_t j = 0; j < count; ++j) {
          if (r0 + i + storage_prefetch_rows < rows) prefetch_row(jobs[j].x.row(r0 + i + storage_prefetch_rows), d);
          lk.apply_rows_stored(table + i * tw, tw, jobs[j].x.row(r0 + i), 0, jobs[j].out.row(r0 + i), 0, 1);
        }
    } else {
      for (index_t j = 0; j < count; ++j)
        lk.apply_rows_stored(table, tw, jobs[j].x.row(r0), jobs[j].x.row_stride, jobs[j].out.row(r0),
                             jobs[j].out.row_stride, m);
    }
  }
}

/// RoPE's shape runs `rotate_stored`; every other encoder `encode_stored` through its float kernel.
template <class A, class E, half_precision S>
void encode_stored_rows(const E& base, const stored_job<S>* jobs, index_t count, index_t rows, const positions& pos) {
  if constexpr (std::is_same_v<typename E::p_type, p::identity<float>> &&
                std::is_same_v<typename E::lambda_type, lambda::rotation<float>>) {
    rotate_stored<A>(base.lambda(), jobs, count, rows, pos);
  } else {
    const simd_encoder<E, A> kernel(base);
    encode_stored<A>(kernel, jobs, count, rows, pos);
  }
}

/// The (batch, head) matrices of x → out appended to `jobs` (extents checked by the caller).
template <class S>
void add_stored_jobs(std::vector<stored_job<S>>& jobs, const heads_view<const S>& x, const heads_view<S>& out) {
  for (index_t b = 0; b < x.batch; ++b)
    for (index_t h = 0; h < x.heads; ++h) jobs.push_back({x.head(b, h), out.head(b, h)});
}

}  // namespace backend::simd_detail

/// SIMD encode of rows stored in 16 bits (`lrpe::half`, `lrpe::bfloat16`) by a float encoder:
/// one kernel set-up, then blocks widened, encoded in float and rounded once (see the file
/// comment); the same bits as the float call on the widened rows. out may be x.
template <backend::simd_backend B, lrpe_encoder E, half_precision S>
  requires std::same_as<typename E::scalar, float>
void encode(const B&, const E& enc, matrix_view<const S> x, positions pos, matrix_view<S> out) {
  detail::check_encode_storage(x, pos, out, enc.dim(), enc.feature_dim());
  const backend::simd_detail::stored_job<S> job{x, out};
  backend::simd_detail::encode_stored_rows<typename B::arch_type>(backend::simd_detail::kernel_encoding(enc), &job, 1,
                                                                   x.rows, pos);
}

/**
 * SIMD Q and K of every (batch, head) stored in 16 bits, with a float encoder: the float
 * `encode_qk`'s rows on the widened input, each rounded once (see the file comment); the
 * table of a block of positions is shared by every head, and by Q and K when their positions
 * agree. q_out may be q, and k_out k.
 * @throws shape_error on mismatched sizes.
 */
template <backend::simd_backend B, lrpe_encoder E, half_precision S>
  requires std::same_as<typename E::scalar, float>
void encode_qk(const B&, const E& enc, heads_view<const S> q, positions q_pos, heads_view<const S> k, positions k_pos,
               heads_view<S> q_out, heads_view<S> k_out) {
  constexpr const char* where = "lrpe::encode_qk (16-bit storage)";
  detail::check_encode_qk(enc, q, q_pos, k, k_pos, q_out, k_out, where);
  using A = typename B::arch_type;
  using job = backend::simd_detail::stored_job<S>;
  const auto& base = backend::simd_detail::kernel_encoding(enc);
  std::vector<job> jobs;
  jobs.reserve(static_cast<std::size_t>(q.batch * q.heads + k.batch * k.heads));
  backend::simd_detail::add_stored_jobs(jobs, q, q_out);
  const auto nq = static_cast<index_t>(jobs.size());
  backend::simd_detail::add_stored_jobs(jobs, k, k_out);
  const auto nk = static_cast<index_t>(jobs.size()) - nq;
  if (nq > 0 && nk > 0 && q.seq == k.seq && backend::simd_detail::same_positions(q_pos, k_pos, q.seq)) {
    backend::simd_detail::encode_stored_rows<A>(base, jobs.data(), nq + nk, q.seq, q_pos);
  } else {
    backend::simd_detail::encode_stored_rows<A>(base, jobs.data(), nq, q.seq, q_pos);
    backend::simd_detail::encode_stored_rows<A>(base, jobs.data() + nq, nk, k.seq, k_pos);
  }
}

}  // namespace v0
}  // namespace lrpe
