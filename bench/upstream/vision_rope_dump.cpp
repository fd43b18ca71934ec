// SPDX-License-Identifier: MIT
// lrpe's 2-D vision RoPE (interop::vision_rope_2d, interop::vision_position_ids) on the cases
// bench/upstream/vision_rope_compare.py writes as text; prints, per case, the patches' (h, w),
// the frequencies and the encoded rows as JSON on stdout. The script recomputes them with
// transformers' own Qwen2-VL and Pixtral vision rotary code. Not a test.
//
// Input (whitespace-separated):
//   cases
//   per case: name kind(0 repeated, 1 alternating) head_dim base merge images (t h w per image)
//             then x [rows][head_dim] (rows = Σ t·h·w)
// Output: {"name": {"ids": [rows·2], "theta": [head_dim/2], "out": [rows·head_dim]}, ...}
#include <lrpe/lrpe.hpp>
#include <lrpe/interop/mrope.hpp>

#include "text_reader.hpp"

#include <cstdio>
#include <string>
#include <vector>

namespace {

template <class V>
void print_list(const char* name, const V& v, bool comma) {
  std::printf("%s\"%s\": [", comma ? ", " : "", name);
  for (std::size_t i = 0; i < v.size(); ++i) std::printf("%s%.17g", i == 0 ? "" : ", ", static_cast<double>(v[i]));
  std::printf("]");
}

}  // namespace

int main(int argc, char** argv) {
  namespace li = lrpe::interop;
  if (argc != 2) {
    std::fprintf(stderr, "usage: vision_rope_dump <inputs.txt>\n");
    return 2;
  }
  upstream::text_reader in(argv[1]);
  const long long cases = in.integer();
  std::printf("{");
  for (long long c = 0; c < cases; ++c) {
    const std::string name = in.word();
    const auto kind = in.integer() == 0 ? li::vision_frequencies::repeated : li::vision_frequencies::alternating;
    const auto d = static_cast<lrpe::index_t>(in.integer());
    const double base = in.number();
    const auto merge = static_cast<lrpe::index_t>(in.integer());
    std::vector<li::vision_grid> grids(static_cast<std::size_t>(in.integer()));
    for (auto& g : grids) {
      g.t = static_cast<lrpe::index_t>(in.integer());
      g.h = static_cast<lrpe::index_t>(in.integer());
      g.w = static_cast<lrpe::index_t>(in.integer());
    }
    const std::vector<lrpe::position_t> ids = li::vision_position_ids(grids, merge);
    const auto rows = static_cast<lrpe::index_t>(ids.size() / 2);
    lrpe::row_matrix<double> x(rows, d), out(rows, d);
    for (lrpe::index_t i = 0; i < x.size(); ++i) x.data()[i] = in.number();
    const auto rope = li::vision_rope_2d<double>(d, base, kind);
    rope.encode(lrpe::view(std::as_const(x)), li::axis_positions{ids, 2}, lrpe::view(out));
    std::printf("%s\"%s\": {", c == 0 ? "" : ", ", name.c_str());
    print_list("ids", ids, false);
    print_list("theta", rope.theta(), true);
    print_list("out", std::vector<double>(out.data(), out.data() + out.size()), true);
    std::printf("}");
  }
  std::printf("}\n");
  return 0;
}
