// SPDX-License-Identifier: MIT
// Must not compile: P and Λ of different scalar types.
// expect-error: must have the same scalar type
#include <lrpe/lrpe.hpp>

int main() {
  lrpe::encoder<lrpe::p::identity<float>, lrpe::lambda::rotation<double>> e{lrpe::p::identity<float>(4),
                                                                             lrpe::lambda::rotation<double>(4)};
  return static_cast<int>(e.dim());
}
