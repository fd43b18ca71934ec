// SPDX-License-Identifier: MIT
// lrpe's interop::mrope_position_ids on the cases that bench/upstream/mrope_ids_compare.py writes
// as text; prints each case's (t, h, w) coordinates as JSON on stdout. The script recomputes every
// case with transformers' own Qwen2-VL / Qwen2.5-VL get_rope_index and compares the integers.
// Not a test: torch is never a dependency.
//
// Input (whitespace-separated; numbers as Python's repr, which round-trips doubles exactly):
//   cases
//   per case: name spatial_merge_size start segments
//             per segment: kind (0 text, 1 image, 2 video), then
//               text:  tokens
//               image: grid_t grid_h grid_w
//               video: grid_t grid_h grid_w time_interval
// Output: {"name": [rows * 3 coordinates, row-major (t, h, w)], ...}
#include <lrpe/lrpe.hpp>
#include <lrpe/interop/mrope.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct reader {
  std::ifstream in;
  explicit reader(const char* path) : in(path) {
    if (!in) throw std::runtime_error(std::string("cannot open ") + path);
  }
  template <class V>
  V next() {
    V v{};
    if (!(in >> v)) throw std::runtime_error("malformed input");
    return v;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s inputs.txt\n", argv[0]);
    return 2;
  }
  try {
    reader r(argv[1]);
    using seg = lrpe::interop::mrope_segment;
    const auto cases = r.next<long>();
    std::printf("{\n");
    for (long c = 0; c < cases; ++c) {
      const auto name = r.next<std::string>();
      const auto merge = static_cast<lrpe::index_t>(r.next<long>());
      const auto start = static_cast<lrpe::position_t>(r.next<long long>());
      const auto count = r.next<long>();
      std::vector<seg> segments;
      for (long k = 0; k < count; ++k) {
        seg s;
        const int kind = r.next<int>();
        if (kind == 0) {
          s.type = seg::kind::text;
          s.tokens = static_cast<lrpe::index_t>(r.next<long>());
        } else {
          s.type = kind == 1 ? seg::kind::image : seg::kind::video;
          s.grid_t = static_cast<lrpe::index_t>(r.next<long>());
          s.grid_h = static_cast<lrpe::index_t>(r.next<long>());
          s.grid_w = static_cast<lrpe::index_t>(r.next<long>());
          if (kind == 2) s.time_interval = r.next<double>();
        }
        segments.push_back(s);
      }
      const std::vector<lrpe::position_t> ids = lrpe::interop::mrope_position_ids(segments, merge, start);
      std::printf("\"%s\": [", name.c_str());
      for (std::size_t i = 0; i < ids.size(); ++i) std::printf("%s%lld", i ? ", " : "", static_cast<long long>(ids[i]));
      std::printf("]%s\n", c + 1 < cases ? "," : "");
    }
    std::printf("}\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mrope_ids_dump: %s\n", e.what());
    return 1;
  }
}
