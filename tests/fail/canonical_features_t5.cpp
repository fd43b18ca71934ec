// SPDX-License-Identifier: MIT
// Must not compile: T5's bucketed bias is not linearizable, so asking for its features is a
// compile error with a readable message (lrpe::canonical::features' static_assert).
// expect-error: is not linearizable
#include <lrpe/lrpe.hpp>

#include <vector>

int main() {
  const lrpe::canonical::t5_bias<float> bias(4, {}, std::vector<float>(32, 0.0f));
  const float x[4] = {1, 2, 3, 4};
  float out[8];
  lrpe::canonical::features(bias, lrpe::canonical::side::query, x, 0, out);
  return static_cast<int>(out[0]);
}
