// SPDX-License-Identifier: MIT
// Linear attention needs a per-position feature map; an additive bias (ALiBi, T5, ...) has
// none, so passing one must fail to compile with a readable message.
// expect-error: the encoding is not linearizable
#include <lrpe/attention/attention.hpp>

namespace {
struct alibi_like {  // a valid additive_encoding, but not linearizable
  using scalar = float;
  static constexpr bool is_additive = true;
  [[nodiscard]] lrpe::index_t dim() const { return 4; }
  [[nodiscard]] double bias(lrpe::position_t s, lrpe::position_t t) const { return -0.5 * static_cast<double>(s - t); }
  [[nodiscard]] double score(const float*, lrpe::position_t s, const float*, lrpe::position_t t) const { return bias(s, t); }
};
static_assert(lrpe::additive_encoding<alibi_like>);
}  // namespace

void misuse() {
  lrpe::row_matrix<float> q(3, 4), k(3, 4), v(3, 4), out(3, 4);
  lrpe::linear_attention(q, k, v, out, alibi_like{}, lrpe::feature_maps::elu_plus_one{});
}
