// SPDX-License-Identifier: MIT
/**
 * @file attention.hpp
 * Attention with relative positional encodings: softmax (any encoding, URPE reweighting),
 * linear (LRPE encoders, feature maps, causal chunks, decay), streaming state, multi-head
 * strided views, and the merge of partial results (split keys, sharded sequences). The math and the API are in docs/attention.md.
 */
#pragma once

#include <lrpe/attention/feature_map.hpp>
#include <lrpe/attention/kv_cache.hpp>
#include <lrpe/attention/linear.hpp>
#include <lrpe/attention/linear_backward.hpp>
#include <lrpe/attention/merge.hpp>
#include <lrpe/attention/multihead.hpp>
#include <lrpe/attention/options.hpp>
#include <lrpe/attention/paged_kv.hpp>
#include <lrpe/attention/softmax.hpp>
#include <lrpe/attention/softmax_backward.hpp>
#include <lrpe/attention/state.hpp>
