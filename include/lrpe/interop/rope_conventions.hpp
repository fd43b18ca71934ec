// SPDX-License-Identifier: MIT
/**
 * @file rope_conventions.hpp
 * RoPE as other engines spell it: ONNX Runtime's `RotaryEmbedding`, GGML's rope modes, HF's
 * cos/sin caches, and the Meta ↔ HF LLaMA checkpoint permutation.
 *
 * | engine | interleaved (pairs 2k, 2k+1) | split halves (pairs k, k + e/2) |
 * |---|---|---|
 * | lrpe | `pairing::interleaved`, `rope_gptj` | `pairing::split_half`, `rope_neox` |
 * | ONNX Runtime RotaryEmbedding | attribute `interleaved = 1` | `interleaved = 0` |
 * | GGML / llama.cpp | mode 0 (NORMAL) | mode 2 (NEOX) |
 * | HF transformers | GPT-J `rotate_every_two` | LLaMA / GPT-NeoX `rotate_half` |
 *
 * Meta's LLaMA checkpoints rotate interleaved pairs; HF's conversion script permutes the rows of
 * W_q and W_k of every head so that split-half rotation gives the same scores. That permutation
 * is LRPE's odd-even P: `meta_rows[j] = hf_rows[odd_even_indices(d)[j]]`.
 */
#pragma once

#include <lrpe/lambda/rotation.hpp>
#include <lrpe/p/permutation.hpp>

#include <vector>

namespace lrpe {
inline namespace v0 {
namespace interop {

/// ONNX Runtime RotaryEmbedding's `interleaved` attribute (0 or 1) as an lrpe pairing.
inline pairing onnx_pairing(int interleaved) {
  detail::require_parameter(interleaved == 0 || interleaved == 1, "lrpe::interop::onnx_pairing", "interleaved",
                            "must be 0 (split halves) or 1 (adjacent pairs)", interleaved);
  return interleaved == 1 ? pairing::interleaved : pairing::split_half;
}

/// GGML rope mode (0 = NORMAL, adjacent pairs; 2 = NEOX, split halves) as an lrpe pairing.
inline pairing ggml_pairing(int mode) {
  detail::require_parameter(mode == 0 || mode == 2, "lrpe::interop::ggml_pairing", "mode",
                            "must be 0 (GGML_ROPE_TYPE_NORMAL) or 2 (GGML_ROPE_TYPE_NEOX)", mode);
  return mode == 0 ? pairing::interleaved : pairing::split_half;
}

/**
 * cos/sin caches in the layout ONNX Runtime and HF use: `cos[p][k] = cos(p·θ_k)`,
 * `sin[p][k] = sin(p·θ_k)` for p < max_positions, k < θ.size() (rotary_dim/2), row-major.
 * Angles formed in double, then rounded to T (HF PR 29285: compute in fp32 or better, then cast).
 */
template <real_scalar T>
struct cos_sin_cache {
  row_matrix<T> cos;
  row_matrix<T> sin;
};

template <real_scalar T>
cos_sin_cache<T> make_cos_sin_cache(index_t max_positions, std::span<const double> theta) {
  constexpr const char* where = "lrpe::interop::make_cos_sin_cache";
  detail::require_shape(max_positions >= 1, where, "max_positions", "must be >= 1", max_positions);
  detail::require_shape(!theta.empty(), where, "theta.size()", "must be >= 1", theta.size());
  detail::require_frequencies(theta, where, "theta");
  const auto half = static_cast<index_t>(theta.size());
  cos_sin_cache<T> c{row_matrix<T>(max_positions, half), row_matrix<T>(max_positions, half)};
  for (index_t p = 0; p < max_positions; ++p)
    for (index_t k = 0; k < half; ++k) {
      const auto [cs, sn] = detail::angle_cos_sin(p, theta[static_cast<std::size_t>(k)]);
      c.cos(p, k) = static_cast<T>(cs);
      c.sin(p, k) = static_cast<T>(sn);
    }
  return c;
}

/**
 * cos/sin caches for a list of positions: row i holds cos and sin of positions[i]·θ_k (any int64
 * positions, in any order; exact angles as above). A decode step's or a packed batch's rows,
 * without the table up to the largest position (10⁶ positions × 64 pairs would be 512 MB).
 * @throws shape_error (no θ), as the overload above for θ.
 */
template <real_scalar T>
cos_sin_cache<T> make_cos_sin_cache(std::span<const position_t> positions, std::span<const double> theta) {
  constexpr const char* where = "lrpe::interop::make_cos_sin_cache";
  detail::require_shape(!theta.empty(), where, "theta.size()", "must be >= 1", theta.size());
  detail::require_frequencies(theta, where, "theta");
  const auto rows = static_cast<index_t>(positions.size()), half = static_cast<index_t>(theta.size());
  cos_sin_cache<T> c{row_matrix<T>(rows, half), row_matrix<T>(rows, half)};
  for (index_t i = 0; i < rows; ++i)
    for (index_t k = 0; k < half; ++k) {
      const auto [cs, sn] = detail::angle_cos_sin(positions[static_cast<std::size_t>(i)], theta[static_cast<std::size_t>(k)]);
      c.cos(i, k) = static_cast<T>(cs);
      c.sin(i, k) = static_cast<T>(sn);
    }
  return c;
}

/// Row order that turns an HF (split-half) head into Meta's interleaved one:
/// meta[j] = hf[result[j]] (the odd-even permutation).
inline std::vector<index_t> hf_to_meta_rows(index_t head_dim) {
  detail::require_shape(head_dim >= 2 && head_dim % 2 == 0, "lrpe::interop::hf_to_meta_rows", "head_dim",
                        "must be even and >= 2", head_dim);
  return p::odd_even_indices(head_dim);
}

/// Row order that turns a Meta (interleaved) head into HF's split-half one: hf[j] = meta[result[j]]
/// (the inverse of `hf_to_meta_rows`, i.e. HF's conversion-script permutation).
inline std::vector<index_t> meta_to_hf_rows(index_t head_dim) {
  detail::require_shape(head_dim >= 2 && head_dim % 2 == 0, "lrpe::interop::meta_to_hf_rows", "head_dim",
                        "must be even and >= 2", head_dim);
  const auto fwd = hf_to_meta_rows(head_dim);
  std::vector<index_t> inv(fwd.size());
  for (std::size_t j = 0; j < fwd.size(); ++j) inv[static_cast<std::size_t>(fwd[j])] = static_cast<index_t>(j);
  return inv;
}

}  // namespace interop
}  // namespace v0
}  // namespace lrpe
