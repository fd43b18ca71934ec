// SPDX-License-Identifier: MIT
// `lrpe::encode_backward` on a backend that has no overload: a compile error naming the pair.
// expect-error: no encode_backward for this \(backend, encoder\) pair
#include <lrpe/lrpe.hpp>

namespace toy {
struct backend {};
}  // namespace toy

void misuse() {
  const lrpe::type2<float> enc(4);
  lrpe::row_matrix<float> x(3, 4), g(3, 4), dx(3, 4);
  auto grad = enc.make_gradient();
  lrpe::encode_backward(toy::backend{}, enc, lrpe::view(x), lrpe::positions(0), lrpe::view(g), lrpe::view(dx), &grad);
}
