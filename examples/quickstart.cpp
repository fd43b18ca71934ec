// The README quick start (the block between the [quickstart] markers, verbatim), compiled and
// run by CI; tests/test_doc_snippets checks that the two stay the same.
#include <lrpe/lrpe.hpp>

#include <cmath>
#include <iostream>

int main() {
  // [quickstart]
  lrpe::type1<float> enc(/*d=*/64, /*seed=*/7);                  // Householder × rotation blocks
  Eigen::MatrixXf w5 = enc.relative_matrix(5);                   // dense W_{t-s}, t - s = 5
  lrpe::row_matrix<float> q = lrpe::row_matrix<float>::Random(16, 64);
  lrpe::row_matrix<float> q_tilde = enc.encode(q, /*offset=*/100);  // or a span of positions
  auto report = lrpe::check::relative(enc, /*s=*/-3, /*t=*/1'000'000);
  std::cout << report.to_string() << '\n';
  // [quickstart]

  // Scores depend only on t - s: q̃_s · k̃_t = q_sᵀ W_{t-s} k_t (query at 100, key at 105).
  const float direct = q_tilde.row(0).dot(enc.encode(q.row(1), 105).row(0));
  const float relative = q.row(0).dot(w5 * q.row(1).transpose());
  std::cout << "score via encode " << direct << ", via W_{t-s} " << relative << '\n';
  return report.passed && std::abs(direct - relative) < 1e-4f ? 0 : 1;
}
