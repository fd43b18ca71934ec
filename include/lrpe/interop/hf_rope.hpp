// SPDX-License-Identifier: MIT
/**
 * @file hf_rope.hpp
 * `lrpe::interop::rope_from_hf`: a Hugging Face config's rotary embedding as an lrpe encoder and
 * its attention factor, for every `rope_type` of transformers 5.24 (`modeling_rope_utils.py`):
 * default, linear, dynamic, yarn, longrope, llama3 and proportional. Fields a config leaves out
 * take HF's defaults (docs/math.md, "Reading a Hugging Face config"); the frequencies are
 * computed in double (HF computes them in float32), by the scalings of freq/scaling.hpp.
 *
 * HF multiplies cos and sin by the attention factor (YaRN's and LongRoPE's; 1 otherwise). That is
 * not a unitary map, so lrpe keeps the encoder unitary and returns the factor: multiply the
 * softmax scale by its square (docs/howto-hf-rope.md).
 */
#pragma once

#include <lrpe/encoder.hpp>
#include <lrpe/freq/scaling.hpp>
#include <lrpe/freq/schedules.hpp>
#include <lrpe/lambda/rotation.hpp>
#include <lrpe/p/identity.hpp>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace interop {

/**
 * The fields of a Hugging Face config that decide its rotary embedding (the top level and
 * `rope_parameters`, or the older `rope_scaling`), by their HF names. An unset optional field
 * is one the config does not have.
 */
struct hf_rope_config {
  index_t head_dim = 0;                ///< `head_dim`, or hidden_size / num_attention_heads
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;
  index_t max_position_embeddings = 0;
  std::string rope_type = "default";   ///< default, linear, dynamic, yarn, longrope, llama3, proportional
  std::optional<double> factor;
  std::optional<double> original_max_position_embeddings;
  std::optional<double> attention_factor;
  std::optional<double> beta_fast, beta_slow;          ///< yarn; absent or 0: 32 and 1
  std::optional<double> mscale, mscale_all_dim;        ///< yarn (DeepSeek)
  bool truncate = true;                                ///< yarn
  std::vector<double> short_factor, long_factor;       ///< longrope
  std::optional<double> low_freq_factor, high_freq_factor;  ///< llama3
};

/// A config's rotary embedding: θ per rotated pair, the rotated width, and HF's attention factor.
struct hf_rope {
  std::vector<double> theta;   ///< rotary_dim/2 frequencies (proportional: head_dim/2, zeros for the unrotated pairs)
  index_t rotary_dim = 0;      ///< the rotated width, 2·theta.size()
  double attention_factor = 1.0;  ///< HF's factor on cos and sin: multiply the softmax scale by its square

  /// The encoder: identity P, rotation Λ with these θ over the first rotary_dim of head_dim
  /// features (HF's `rotate_half` pairing by default; `pairing::interleaved` for GPT-J-style
  /// checkpoints), the rest passing through.
  template <real_scalar T>
  [[nodiscard]] encoder<p::identity<T>, lambda::rotation<T>> make_encoder(index_t head_dim,
                                                                          pairing pairs = pairing::split_half) const {
    return {p::identity<T>(head_dim), lambda::rotation<T>(head_dim, theta, pairs)};
  }
};

namespace hf_detail {

/// A field the rope type needs, or a parameter_error naming it.
inline double required(const std::optional<double>& x, const std::string& type, const char* arg) {
  if (!x) {
    lrpe::detail::fail<parameter_error>("lrpe::interop::rope_from_hf", arg,
                                        lrpe::detail::lazy_concat("is required for rope_type '", type, "'"), "absent");
  }
  return *x;
}

}  // namespace hf_detail

/**
 * The rotary embedding of a Hugging Face config (see the file comment).
 * @param c      the config's fields.
 * @param length the current sequence length (the largest position + 1) for `dynamic` (HF keeps
 *               the longest seen, never below max_position_embeddings) and `longrope` (long
 *               factors past original_max_position_embeddings); 0: HF's value at load time
 *               (max_position_embeddings for dynamic, the short factors for longrope).
 * @throws parameter_error (an unknown rope_type, a field the type needs, head_dim or the rotated
 *         width not positive and even), and the scalings' own errors (freq/scaling.hpp).
 */
inline hf_rope rope_from_hf(const hf_rope_config& c, index_t length = 0) {
  constexpr const char* where = "lrpe::interop::rope_from_hf";
  const std::string& type = c.rope_type;
  lrpe::detail::require_parameter(c.head_dim >= 2, where, "head_dim", "must be >= 2", c.head_dim);
  lrpe::detail::require_parameter(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1, where,
                                  "partial_rotary_factor", "must be in (0, 1]", c.partial_rotary_factor);
  hf_rope out;
  if (type == "proportional") {  // Gemma's p-RoPE: θ_k = base^(−2k/head_dim) for the first pairs, 0 after
    const auto angles = static_cast<index_t>(std::floor(c.partial_rotary_factor * static_cast<double>(c.head_dim) / 2));
    const index_t pairs = c.head_dim / 2;
    std::vector<double> theta(static_cast<std::size_t>(pairs), 0.0);
    const std::vector<double> rotated = freq::rope(pairs, c.rope_theta, c.head_dim);
    const double f = c.factor.value_or(1.0);
    for (index_t k = 0; k < angles; ++k) theta[static_cast<std::size_t>(k)] = rotated[static_cast<std::size_t>(k)] / f;
    out.theta = std::move(theta);
    out.rotary_dim = 2 * pairs;
    return out;
  }
  const auto dim = static_cast<index_t>(std::floor(static_cast<double>(c.head_dim) * c.partial_rotary_factor));
  lrpe::detail::require_parameter(dim >= 2 && dim % 2 == 0, where, "partial_rotary_factor",
                                  lrpe::detail::lazy_concat("must leave an even rotated width >= 2 (head_dim = ",
                                                            c.head_dim, " gives ", dim, ")"),
                                  c.partial_rotary_factor);
  out.rotary_dim = dim;
  const std::vector<double> theta = freq::rope(dim / 2, c.rope_theta, dim);
  const double max_len = static_cast<double>(c.max_position_embeddings);
  const double original = c.original_max_position_embeddings.value_or(max_len);
  if (type != "default" && type != "linear") {  // the types that read a length
    lrpe::detail::require_parameter(c.max_position_embeddings >= 1 || (c.original_max_position_embeddings && type != "dynamic"),
                                    where, "max_position_embeddings",
                                    lrpe::detail::lazy_concat("must be >= 1 for rope_type '", type, "'"),
                                    c.max_position_embeddings);
  }
  if (type == "default") {
    out.theta = theta;
  } else if (type == "linear") {
    out.theta = freq::linear(theta, hf_detail::required(c.factor, type, "factor"));
  } else if (type == "dynamic") {
    const double f = hf_detail::required(c.factor, type, "factor");
    const double l = std::max(static_cast<double>(length), max_len);
    out.theta = freq::rope(dim / 2, freq::dynamic_ntk_base(c.rope_theta, f, l, max_len, dim), dim);
  } else if (type == "yarn") {
    const double f = c.factor ? *c.factor : max_len / original;  // DeepSeek-V3's null factor
    const double fast = c.beta_fast.value_or(0.0) != 0 ? *c.beta_fast : 32.0;
    const double slow = c.beta_slow.value_or(0.0) != 0 ? *c.beta_slow : 1.0;
    out.theta = freq::yarn(theta, f, original, c.rope_theta, fast, slow, c.truncate);
    out.attention_factor = c.attention_factor ? *c.attention_factor
                                              : freq::yarn_attention_factor(f, c.mscale.value_or(0.0),
                                                                            c.mscale_all_dim.value_or(0.0));
  } else if (type == "longrope") {
    const double f = c.factor ? *c.factor : max_len / original;
    out.theta = freq::longrope(theta, c.short_factor, c.long_factor, static_cast<double>(length), original);
    out.attention_factor = c.attention_factor ? *c.attention_factor : freq::longrope_attention_factor(f, original);
  } else if (type == "llama3") {
    const double f = hf_detail::required(c.factor, type, "factor");  // (checked in this order)
    const double low = hf_detail::required(c.low_freq_factor, type, "low_freq_factor");
    const double high = hf_detail::required(c.high_freq_factor, type, "high_freq_factor");
    out.theta = freq::llama3(theta, f, low, high, original);
  } else {
    lrpe::detail::fail<parameter_error>(where, "rope_type",
                                        "must be one of default, linear, dynamic, yarn, longrope, llama3, proportional",
                                        type);
  }
  return out;
}

}  // namespace interop
}  // namespace v0
}  // namespace lrpe
