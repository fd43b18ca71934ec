// SPDX-License-Identifier: MIT
// lrpe's absolute and 2-D encodings on the cases bench/upstream/literature_compare.py writes as
// text; prints them as JSON on stdout. The script builds the same tables with transformers' own
// code and prints the agreement. Not a test: torch is never a dependency.
//
// Input (whitespace-separated):
//   n d                                  sinusoidal tables of positions 0 … n − 1, width d
//   windows  then (h w) per window       Swin windows
//   n1 n2 d1 d2  then E1 (n1·d1) E2 (n2·d2), row-major   Reformer's axial tables
// Output: {"vaswani": [...], "t2t": [...], "swin_HxW": [...], "axial": [...]} (row-major)
#include <lrpe/lrpe.hpp>

#include "text_reader.hpp"

#include <cstdio>
#include <string>

namespace {

template <class M>
void print_matrix(const char* name, const M& m, bool& first) {
  std::printf("%s\"%s\": [", first ? "" : ", ", name);
  for (lrpe::index_t i = 0; i < m.size(); ++i) std::printf("%s%.17g", i == 0 ? "" : ", ", static_cast<double>(m.data()[i]));
  std::printf("]");
  first = false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: literature_dump <inputs.txt>\n");
    return 2;
  }
  upstream::text_reader in(argv[1]);
  namespace ab = lrpe::absolute;
  bool first = true;
  std::printf("{");
  const auto n = static_cast<lrpe::index_t>(in.integer()), d = static_cast<lrpe::index_t>(in.integer());
  print_matrix("vaswani", ab::sinusoidal(n, d), first);
  print_matrix("t2t", ab::sinusoidal(n, d, {ab::sinusoid_convention::tensor2tensor, 10000.0}), first);
  const auto windows = in.integer();
  for (long long w = 0; w < windows; ++w) {
    const auto h = static_cast<lrpe::index_t>(in.integer()), wd = static_cast<lrpe::index_t>(in.integer());
    const std::string name = "swin_" + std::to_string(h) + "x" + std::to_string(wd);
    print_matrix(name.c_str(), lrpe::canonical::swin_relative_position_index(h, wd), first);
  }
  const auto n1 = static_cast<lrpe::index_t>(in.integer()), n2 = static_cast<lrpe::index_t>(in.integer());
  const auto d1 = static_cast<lrpe::index_t>(in.integer()), d2 = static_cast<lrpe::index_t>(in.integer());
  lrpe::row_matrix<double> e1(n1, d1), e2(n2, d2);
  for (lrpe::index_t i = 0; i < e1.size(); ++i) e1.data()[i] = in.number();
  for (lrpe::index_t i = 0; i < e2.size(); ++i) e2.data()[i] = in.number();
  print_matrix("axial", ab::axial_positions<double>(e1, e2).dense(), first);
  std::printf("}\n");
  return 0;
}
