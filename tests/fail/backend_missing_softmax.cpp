// SPDX-License-Identifier: MIT
// A backend tag without a softmax kernel: softmax attention on it is a compile error naming the
// missing hook (attention/backend_interface.hpp), not an overload wall.
// expect-error: no softmax_kernel for this backend
#include <lrpe/lrpe.hpp>

namespace toy {
struct backend {};
}  // namespace toy

void misuse() {
  lrpe::row_matrix<float> q(3, 4), k(3, 4), v(3, 4), out(3, 4);
  lrpe::softmax_attention(q, k, v, out, lrpe::no_encoding{}, {}, toy::backend{});
}
