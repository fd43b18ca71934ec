// SPDX-License-Identifier: MIT
// canonical::alibi is an additive bias, not linearizable: linear attention must refuse it at
// compile time with a readable message.
// expect-error: the encoding is not linearizable
#include <lrpe/lrpe.hpp>
#include <lrpe/canonical/canonical.hpp>

void misuse() {
  lrpe::row_matrix<float> q(3, 4), k(3, 4), v(3, 4), out(3, 4);
  const auto alibi = lrpe::canonical::alibi<float>::for_heads(4, 1);
  lrpe::linear_attention(q, k, v, out, alibi, lrpe::feature_maps::elu_plus_one{});
}
