// SPDX-License-Identifier: MIT
/**
 * @file tuning.hpp
 * The SIMD backend's tuning constants in one place: tile and block sizes, and the sizes past
 * which a kernel prefetches, streams or takes another path. Each says why in a line or two; the
 * measurements behind them are in bench/results/tuning.md. (Constants that belong to one kernel
 * class, such as the encoder's table sizes, stay in that class.)
 */
#pragma once

#include <lrpe/core/config.hpp>

#include <cstddef>

namespace lrpe {
inline namespace v0 {
namespace backend {
namespace simd_detail {

// ---- softmax attention (softmax.hpp)

/**
 * From this many bytes of packed K and V on, a query tile prefetches the next key tile's K and V
 * into L2 while it computes S for the current one, one slice per row group. With K and V past
 * the last-level cache share (n = 16384 at d = 64: 8 MiB per head) the kernel otherwise waits
 * on them, above all when another process shares that cache; below it, with K and V in cache,
 * the slices only cost time (bench/results/tuning.md#softmax-tile-prefetch).
 */
inline constexpr std::size_t softmax_tile_prefetch_bytes = std::size_t(1) << 23;

/// Query blocks of at most this many rows take the direct kernel (no packing of K and V).
inline constexpr index_t softmax_direct_max_rows = 8;

/**
 * A direct call with fewer row groups than the pool has threads splits its keys across the
 * threads (split-KV, flash-decoding) when each part gets at least this many keys: below, a
 * thread's share of the cache takes less time than handing it out and merging.
 */
inline constexpr index_t softmax_split_min_keys = 1024;

/**
 * The direct kernel prefetches each block's V rows during the block before it when the keys it
 * reads hold at least this many bytes of K and V (past a core's L2). A decode step over a KV
 * cache streams them from L3 or DRAM, and V, read in column passes of VU vectors over the
 * block's rows, is what the hardware prefetchers followed badly (K, read W rows at a time, they
 * follow); prefetching K as well gained nothing. Below the threshold (K and V in L2, or in L3
 * between calls) the instructions only cost time (bench/results/tuning.md#softmax-direct-prefetch).
 */
inline constexpr std::size_t softmax_direct_prefetch_bytes = std::size_t(1) << 20;

/**
 * The softmax backward splits the key tiles into this many interleaved groups (tiles g, g + G,
 * …), each summing its own partial dQ, added in group order at the end: the pool's threads take
 * whole groups, so dQ is the same bit for bit on any number of threads, and causal work (early
 * key tiles see the most queries) spreads evenly. Memory: G partial dQs of n_q × d.
 */
inline constexpr index_t softmax_backward_groups = 8;

// ---- linear attention and the encoder features (linear.hpp)

/// Keys per K̃ᵀV block of `accumulate_keys`. Its micro-kernel sweeps the block once per 6×2W
/// tile of S: at 64 keys (d = 64 float) the block's V rows and the tile's K̃ lines (20 KiB)
/// stay in L1 across the sweeps, where 256 keys (64 KiB of V) went to L2 on every one
/// (bench/results/tuning.md#linear-key-block).
inline constexpr index_t linear_key_block = 64;

/// Output bytes of one (batch, head) problem from which linear attention writes its output
/// rows with non-temporal stores (`linear_run::streams_output`): past a core's L2, so the rows
/// would not stay cached for the next operation anyway, and the stores neither read each line
/// first nor evict the inputs. 8 heads, d = 64: n ≥ 8192 (bench/results/tuning.md#linear-stream-bytes).
inline constexpr std::size_t linear_stream_bytes = std::size_t{2} << 20;

/// Rows from which `features` runs any lrpe encoder through the SIMD encoder with its default
/// (stepped) tables. Below, a decode step's one row per head: encoders whose SIMD kernels cost
/// nothing to build (`few_rows_simd_v`) run with direct tables, the others by the scalar
/// encoder per row (building a permutation's indices or a DCT's d² matrix per call would cost
/// more than the rows). Same features within rounding either way.
inline constexpr index_t simd_encoder_min_rows = 8;

/// Rows whose features `linear_fused` computes at a time: 4 one-vector chunks of float on
/// AVX-512 (32 KiB of Q̃ and K̃ at d = 64, L2-resident); one chunk at a time was slower end to
/// end, paying the encoder's per-call and per-position-run costs four times as often
/// (bench/results/tuning.md#linear-fused-block).
inline constexpr index_t fused_block = 64;

// ---- P and Λ row kernels (detail/kernels.hpp)

/// Rows ahead of the one being mapped whose input is prefetched: a row's Λ waits for its μ (a
/// dot product over the whole row), so fewer loads are in flight than for P = I and the
/// hardware prefetchers alone left Householder·rotation memory-latency-bound. 32 rows = 8 KiB
/// at d = 64 float (bench/results/tuning.md#mapped-prefetch-rows).
inline constexpr index_t mapped_prefetch_rows = 32;

/// Rows ahead whose input a P kernel's row loop prefetches (a permutation P alone here, a
/// dense or DCT P into the fused chain's scratch in encode.hpp): 24 rows = 6 KiB at d = 64
/// float, chosen over 8 while that path also ran Householder chains (bench/results/tuning.md#p-prefetch-rows).
inline constexpr index_t p_prefetch_rows = 24;

/// Widest row `permute_row_bytes` takes (its indices are bytes; its staged row lives on the stack).
inline constexpr index_t byte_permute_max_d = 256;

/// Widest row the tile permute takes (its column block: d·w scalars on the stack, 8 KiB).
inline constexpr index_t tile_permute_max_d = 256;

}  // namespace simd_detail
}  // namespace backend
}  // namespace v0
}  // namespace lrpe
