// SPDX-License-Identifier: MIT
// lrpe's multi-axis RoPE (interop::multi_axis_rope<double>, built from head_dim and base as a user
// would, reference backend) on the cases that bench/upstream/mrope_compare.py writes as text;
// prints each case's frequencies and encoded rows as JSON on stdout. The script recomputes every
// case with transformers' own Qwen2-VL / Qwen2.5-VL / Qwen3-VL rotary code and prints the
// agreement. Not a test: torch is never a dependency.
//
// Input (whitespace-separated; numbers as Python's repr, which round-trips doubles exactly):
//   cases
//   per case: name head_dim base layout axes section_0 .. section_{axes-1} rows
//             (layout: 0 sections (Qwen2-VL, Qwen2.5-VL), 1 interleaved (Qwen3-VL))
//             the positions [rows][axes] (integers), then x [rows][head_dim]
// Output: {"name": {"theta": [head_dim/2], "out": [rows][head_dim], flattened}, ...}
#include <lrpe/lrpe.hpp>
#include <lrpe/interop/mrope.hpp>

#include "text_reader.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

int main(int argc, char** argv) {
  namespace li = lrpe::interop;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s INPUT\n", argv[0]);
    return 2;
  }
  try {
    upstream::text_reader r(argv[1]);
    const long long cases = r.integer();
    std::printf("{\n");
    for (long long c = 0; c < cases; ++c) {
      const std::string name = r.word();
      const auto d = static_cast<lrpe::index_t>(r.integer());
      const double base = r.number();
      const auto layout = r.integer() == 0 ? li::mrope_layout::sections : li::mrope_layout::interleaved;
      const auto axes = static_cast<lrpe::index_t>(r.integer());
      std::vector<lrpe::index_t> sections(static_cast<std::size_t>(axes));
      for (auto& s : sections) s = static_cast<lrpe::index_t>(r.integer());
      const auto rows = static_cast<lrpe::index_t>(r.integer());
      std::vector<lrpe::position_t> pos(static_cast<std::size_t>(rows * axes));
      for (auto& p : pos) p = static_cast<lrpe::position_t>(r.integer());
      lrpe::row_matrix<double> x(rows, d), out(rows, d);
      for (lrpe::index_t i = 0; i < rows; ++i)
        for (lrpe::index_t j = 0; j < d; ++j) x(i, j) = r.number();

      const li::multi_axis_rope<double> rope(d, base, sections, layout);  // HF's rotate_half pairing (default)
      rope.encode(lrpe::matrix_view<const double>(x.data(), rows, d, d), li::axis_positions{pos, axes},
                  lrpe::view(out));

      std::printf("\"%s\": {\"theta\": [", name.c_str());
      for (std::size_t k = 0; k < rope.theta().size(); ++k) std::printf("%s%.17g", k ? ", " : "", rope.theta()[k]);
      std::printf("], \"out\": [");
      for (lrpe::index_t i = 0; i < rows; ++i)
        for (lrpe::index_t j = 0; j < d; ++j) std::printf("%s%.17g", i + j ? ", " : "", out(i, j));
      std::printf("]}%s\n", c + 1 < cases ? "," : "");
    }
    std::printf("}\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mrope_dump: %s\n", e.what());
    return 1;
  }
}
