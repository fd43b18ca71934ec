// SPDX-License-Identifier: MIT
// Downstream use of an installed lrpe: the umbrella header, the version macros, Eigen.
#include <lrpe/lrpe.hpp>

#include <Eigen/Dense>

#include <cstdio>
#include <string>

int main() {
  const std::string version = std::to_string(LRPE_VERSION_MAJOR) + "." +
                              std::to_string(LRPE_VERSION_MINOR) + "." +
                              std::to_string(LRPE_VERSION_PATCH);
  std::printf("lrpe %s (LRPE_VERSION=%d)\n", version.c_str(), LRPE_VERSION);
  if (version != LRPE_CONSUMER_EXPECT_VERSION_STRING) {
    std::printf("error: headers say %s, the CMake package says %s\n", version.c_str(),
                LRPE_CONSUMER_EXPECT_VERSION_STRING);
    return 1;
  }

  // Eigen comes with lrpe::lrpe: a 90-degree rotation is orthogonal.
  Eigen::Matrix2d r;
  r << 0.0, -1.0, 1.0, 0.0;
  const double err = (r.transpose() * r - Eigen::Matrix2d::Identity()).norm();
  std::printf("|R^T R - I| = %g\n", err);
  const lrpe::position_t offset = -3;  // positions are signed
  return (err == 0.0 && offset < 0) ? 0 : 1;
}
