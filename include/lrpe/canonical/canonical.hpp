// SPDX-License-Identifier: MIT
/**
 * @file canonical.hpp
 * Umbrella of lrpe/canonical: the canonical form f_rel(q_s, k_t) = Σ_l Re(q̂_s⁽ˡ⁾ᴴ W⁽ˡ⁾_{t−s} k̂_t⁽ˡ⁾)
 * and the relative encodings of the literature (docs/canonical.md has the table).
 *
 * | variant | kind | m | linearizable |
 * |---|---|---|---|
 * | `multiplicative<E>` (any encoder: LRPE Types 1–8, RoPE, PermuteFormer) | multiplicative | 1 | yes |
 * | `toeplitz_bias` (learned, clipped) | additive | 2 | no |
 * | `t5_bias` | additive | 2 | no |
 * | `alibi` | additive | 2 | no |
 * | `shaw` | key + value terms | 2 | no |
 * | `deberta_v2` | c2c + c2p + p2c | 3 | no |
 * | `cosformer` | Toeplitz scalar | 1 | yes |
 * | `transformer_xl` | content + position, u, v | 2 | yes |
 * | `xpos` (RoPE with a decay per pair, ζ^{(s − t)/γ}) | multiplicative, scaled | – | yes (centred) |
 * | `clamped_transformer_xl` (`clamp_len`) | content + position, u, v | 2 | no |
 * | `composite<T, Bias>` (Chang et al.: Shaw + an offset bias) | key + value terms, unscaled bias | – | no |
 * | `da_transformer` | ReLU(q·k) times a learned distance curve | – | no |
 * | `urpe` | post-softmax reweighting (not an f_rel) | – | – |
 * | `pair_bias` (Swin's window bias, Graphormer's spatial encoding) | additive, keyed on (s, t) | – | no |
 * | `tupe` (untied absolute positions, relative buckets, [CLS] reset) | additive, keyed on (s, t) | – | no |
 * | `sine_spe`, `conv_spe` → `spe_code` (stochastic positional encoding) | random features, relative in expectation | – | yes (a draw) |
 */
#pragma once

#include <lrpe/canonical/buckets.hpp>
#include <lrpe/canonical/canonical_form.hpp>
#include <lrpe/canonical/linearizable.hpp>
#include <lrpe/canonical/primitives.hpp>

#include <lrpe/canonical/alibi.hpp>
#include <lrpe/canonical/composite.hpp>
#include <lrpe/canonical/cosformer.hpp>
#include <lrpe/canonical/da_transformer.hpp>
#include <lrpe/canonical/deberta.hpp>
#include <lrpe/canonical/graph.hpp>
#include <lrpe/canonical/huang2020.hpp>
#include <lrpe/canonical/multiplicative.hpp>
#include <lrpe/canonical/pair_bias.hpp>
#include <lrpe/canonical/shaw.hpp>
#include <lrpe/canonical/spe.hpp>
#include <lrpe/canonical/t5_bias.hpp>
#include <lrpe/canonical/toeplitz_bias.hpp>
#include <lrpe/canonical/transformer_xl.hpp>
#include <lrpe/canonical/tupe.hpp>
#include <lrpe/canonical/urpe.hpp>
#include <lrpe/canonical/xpos.hpp>
