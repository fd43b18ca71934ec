// SPDX-License-Identifier: MIT
// Must not compile: 16-bit K and V (computed in float) with a double Q and out.
// expect-error: or be 16-bit storage of it
#include <lrpe/lrpe.hpp>

int main() {
  const lrpe::row_matrix<double> q = lrpe::row_matrix<double>::Zero(2, 4);
  const lrpe::row_matrix<lrpe::half> k = lrpe::row_matrix<lrpe::half>::Zero(3, 4), v = k;
  lrpe::row_matrix<double> out(2, 4);
  lrpe::softmax_attention(q, k, v, out, lrpe::no_encoding{});
  return 0;
}
