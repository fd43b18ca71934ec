// SPDX-License-Identifier: MIT
// A backend tag without a linear-attention kernel: a compile error naming the missing hook.
// expect-error: no linear_kernel for this backend
#include <lrpe/lrpe.hpp>

namespace toy {
struct backend {};
}  // namespace toy

void misuse() {
  lrpe::row_matrix<float> q(3, 4), k(3, 4), v(3, 4), out(3, 4);
  lrpe::linear_attention(q, k, v, out, lrpe::no_encoding{}, lrpe::feature_maps::elu_plus_one{}, {}, toy::backend{});
}
