// The README quick start, compiled and run by CI (keep the two in sync).
#include <lrpe/lrpe.hpp>

#include <iostream>

int main() {
  // LRPE Type 1: Householder P × rotation blocks Λ, head width 64, seed 7.
  lrpe::type1<float> enc(/*d=*/64, /*seed=*/7);

  // The dense relative matrix W_{t-s} for t - s = 5.
  Eigen::MatrixXf w5 = enc.relative_matrix(5);

  // Encode 16 query rows at positions 100..115 (an offset) or at explicit positions.
  lrpe::row_matrix<float> q = lrpe::row_matrix<float>::Random(16, 64);
  lrpe::row_matrix<float> q_tilde = enc.encode(q, /*offset=*/100);

  // Scores depend only on t - s: q̃_s · k̃_t = q_sᵀ W_{t-s} k_t.
  const float direct = q_tilde.row(0).dot(enc.encode(q.row(1), 105).row(0));
  const float relative = q.row(0).dot(w5 * q.row(1).transpose());

  // Property checks any downstream project can run on its own encoders.
  auto report = lrpe::check::relative(enc, /*s=*/-3, /*t=*/1'000'000);
  std::cout << report.to_string() << '\n'
            << "score via encode " << direct << ", via W_{t-s} " << relative << '\n';
  return report.passed && std::abs(direct - relative) < 1e-4f ? 0 : 1;
}
