// SPDX-License-Identifier: MIT
// Must not compile: a Λ whose apply takes no position is not a lambda_policy, and
// encoder<P, Λ> says so in one line ("constraints not satisfied" / "lambda_policy").
// expect-error: lambda_policy
#include <lrpe/lrpe.hpp>

struct positionless {
  using scalar = float;
  static constexpr bool is_complex = false;
  lrpe::index_t dim() const { return 4; }
  void apply(const float*, float*) const {}
  lrpe::dense_matrix<float> matrix(lrpe::position_t) const { return {}; }
};

int main() {
  lrpe::encoder<lrpe::p::identity<float>, positionless> e{lrpe::p::identity<float>(4), {}};
  return static_cast<int>(e.dim());
}
