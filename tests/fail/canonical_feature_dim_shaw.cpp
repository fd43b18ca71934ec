// SPDX-License-Identifier: MIT
// Must not compile: Shaw's clipped key term is not linearizable; feature_dim of it is a
// compile error with the same readable message.
// expect-error: is not linearizable
#include <lrpe/lrpe.hpp>

int main() {
  const lrpe::canonical::shaw<double> shaw(2, 1, lrpe::row_matrix<double>::Zero(3, 2));
  return static_cast<int>(lrpe::canonical::feature_dim(shaw));
}
