// SPDX-License-Identifier: MIT
// Compile-time yardstick: a plain Eigen translation unit that multiplies two matrices.
#include <Eigen/Dense>

#include <iostream>

int main() {
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(64, 64), b = Eigen::MatrixXf::Random(64, 64);
  Eigen::MatrixXf c = a * b;
  std::cout << c.norm() << '\n';
}
