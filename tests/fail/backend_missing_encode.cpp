// SPDX-License-Identifier: MIT
// `lrpe::encode` on a backend that has no encode overload: a compile error naming the pair.
// expect-error: no encode for this \(backend, encoder\) pair
#include <lrpe/lrpe.hpp>

namespace toy {
struct backend {};
}  // namespace toy

void misuse() {
  const lrpe::type1<float> enc(4, 1);
  lrpe::row_matrix<float> x(3, 4), out(3, 4);
  lrpe::encode(toy::backend{}, enc, lrpe::view(x), lrpe::positions(0), lrpe::view(out));
}
