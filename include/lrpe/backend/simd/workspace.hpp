// SPDX-License-Identifier: MIT
/**
 * @file workspace.hpp
 * `backend::simd_workspace`: the scratch memory of the SIMD attention kernels, reused across
 * calls so that a kernel in steady state allocates nothing (and touches no fresh page: the
 * first touch of a page can cost more than a whole short head;
 * bench/results/tuning.md#workspace-first-touch).
 *
 * A workspace is a fixed set of named slots (packed K, packed V, encoded Q/K features, tiles,
 * the linear-attention state ...). Each slot is a 64-byte aligned buffer that only grows: the
 * first call with a given shape allocates, every later call with the same or a smaller shape
 * reuses. Slots are independent, so pointers into one slot stay valid while another grows.
 *
 * Who owns it: `backend::simd<Arch>` uses one `thread_local` workspace per calling thread
 * (created on first use, freed at thread exit); `backend::simd_policy<Arch>` uses a caller-owned
 * one (or one per worker of a caller-owned `simd_threads` pool). Not synchronised: one
 * workspace serves one thread at a time.
 */
#pragma once

#include <lrpe/core/traits.hpp>

#include <array>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace lrpe {
inline namespace v0 {
namespace backend {

/// Reusable, grow-only scratch memory of the SIMD kernels (see the file comment).
class simd_workspace {
 public:
  /// The named buffers; a kernel uses each for one purpose only.
  enum slot : int {
    q_features,  ///< encoded Q (n_q × d_f), filled by the front end; or one block of φ(Q) and Q̃ rows (fused linear)
    k_features,  ///< encoded K (n_k × d_f); or one block of φ(K) and K̃ rows (fused linear)
    k_packed,    ///< K packed by key tiles, keys as the SIMD dimension
    v_packed,    ///< V with rows padded to the key tile and columns to the vector width
    key_bounds,  ///< per key tile: min/max position, whether its values hold a NaN or ±∞
    q_tile,      ///< one query tile, pre-scaled (per thread)
    s_tile,      ///< logits / probabilities of one tile (per thread)
    o_tile,      ///< output accumulator of one tile (per thread)
    row_stats,   ///< m, l, α per query row of a tile (per thread)
    state,       ///< linear attention: S (d_f × d_v) and z
    chunk,       ///< linear attention: one chunk's scaled values / weights
    encode_table,  ///< simd_encoder: the per-position table of one block of positions
    encode_rows,   ///< simd_encoder: P's output rows of a fused chain's sub-block, or the Type 8 FFT's scratch
    encode_table_bytes,  ///< simd_encoder: the permutation powers' table rows in bytes (AVX2)
    grad_rows,   ///< softmax backward: Q, dO and K as padded rows, the rows' base-2 lse and D
    grad_dq,     ///< softmax backward: the key-tile groups' partial dQ
    grad_tile,   ///< softmax backward: S/P, dP/dS of one tile pair, dK and dV of one key tile (per thread)
    split_parts,  ///< softmax decode split over the keys: each part's outputs and log-sum-exps
    grad_state,   ///< linear backward's sweep: the state's gradient dS and one chunk's tiles
    encode_stage,  ///< 16-bit encode: one block's rows widened to float, and their features
    slot_count
  };

  simd_workspace() = default;
  simd_workspace(const simd_workspace&) = delete;
  simd_workspace& operator=(const simd_workspace&) = delete;
  ~simd_workspace() {
    for (auto& b : buffers_) std::free(b.data);
  }

  /**
   * Slot `s` as at least `count` elements of T, 64-byte aligned. Contents are unspecified
   * (whatever the last user left). Allocates only when the slot is too small (grows ×1.5).
   */
  template <class T>
  T* get(slot s, index_t count) {
    buffer& b = buffers_[static_cast<std::size_t>(s)];
    const std::size_t bytes = static_cast<std::size_t>(count > 0 ? count : 1) * sizeof(T);
    if (bytes > b.bytes) {
      std::size_t want = bytes + bytes / 2;
      want = (want + 63) / 64 * 64;
      void* p = std::aligned_alloc(64, want);
      if (p == nullptr) throw std::bad_alloc();
      std::free(b.data);
      b.data = p;
      b.bytes = want;
      ++allocations_;
    }
    return static_cast<T*>(b.data);
  }

  /// Bytes currently held by all slots.
  [[nodiscard]] std::size_t capacity() const noexcept {
    std::size_t n = 0;
    for (const auto& b : buffers_) n += b.bytes;
    return n;
  }
  /// Number of (re)allocations so far: constant in steady state (tests and benches check it).
  [[nodiscard]] std::size_t allocations() const noexcept { return allocations_; }

  /// The calling thread's workspace (used by `backend::simd<Arch>`).
  static simd_workspace& this_thread() {
    thread_local simd_workspace ws;
    return ws;
  }

 private:
  struct buffer {
    void* data = nullptr;
    std::size_t bytes = 0;
  };
  std::array<buffer, slot_count> buffers_{};
  std::size_t allocations_ = 0;
};

}  // namespace backend
}  // namespace v0
}  // namespace lrpe
