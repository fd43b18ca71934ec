// SPDX-License-Identifier: MIT
// lrpe's multi-head softmax attention (reference backend, double) with the inference options of
// softmax_options (causal, window, chunk, softcap, head_sinks, scale, positions), on the cases
// that bench/upstream/attention_options_compare.py writes as text; prints the outputs as JSON on
// stdout. The script recomputes each case with transformers' own eager attention code and
// prints the agreement. Not a test: torch is never a dependency.
//
// Input (whitespace-separated; numbers as Python's repr, which round-trips doubles exactly):
//   cases
//   per case: name batch heads kv_heads seq_q seq_k d dv causal window chunk softcap scale
//             q_offset k_offset rope_base sinks   (rope_base 0: no encoding, else rope_neox(d, rope_base);
//                                                  sinks: 0 or heads)
//             the sinks, then q [batch][heads][seq_q][d], k [batch][kv_heads][seq_k][d],
//             v [batch][kv_heads][seq_k][dv]
// Output: {"name": [out [batch][heads][seq_q][dv], flattened], ...}
#include <lrpe/lrpe.hpp>

#include "text_reader.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

template <class Encoding>
void run(const Encoding& encoding, const lrpe::softmax_options<>& o, std::vector<double>& q,
         std::vector<double>& k, std::vector<double>& v, std::vector<double>& out, long batch, long heads,
         long kv_heads, long seq_q, long seq_k, long d, long dv) {
  const auto qh = lrpe::bnsh(q.data(), batch, heads, seq_q, d);
  const auto kh = lrpe::bnsh(k.data(), batch, kv_heads, seq_k, d);
  const auto vh = lrpe::bnsh(v.data(), batch, kv_heads, seq_k, dv);
  const auto oh = lrpe::bnsh(out.data(), batch, heads, seq_q, dv);
  lrpe::softmax_attention(qh, kh, vh, oh, encoding, o);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s INPUT\n", argv[0]);
    return 2;
  }
  try {
    upstream::text_reader r(argv[1]);
    const long cases = static_cast<long>(r.integer());
    std::printf("{\n");
    for (long c = 0; c < cases; ++c) {
      const std::string name = r.word();
      const long batch = static_cast<long>(r.integer()), heads = static_cast<long>(r.integer()),
                 kv_heads = static_cast<long>(r.integer());
      const long seq_q = static_cast<long>(r.integer()), seq_k = static_cast<long>(r.integer()),
                 d = static_cast<long>(r.integer()), dv = static_cast<long>(r.integer());
      lrpe::softmax_options<> o;
      o.causal = r.integer() != 0;
      o.window = r.integer();
      o.chunk = r.integer();
      o.softcap = r.number();
      o.scale = r.number();
      o.q_positions = lrpe::positions(r.integer());
      o.k_positions = lrpe::positions(r.integer());
      const double rope_base = r.number();
      const std::vector<double> sinks = r.numbers(r.integer());
      o.head_sinks = std::span<const double>(sinks);
      std::vector<double> q = r.numbers(batch * heads * seq_q * d);
      std::vector<double> k = r.numbers(batch * kv_heads * seq_k * d);
      std::vector<double> v = r.numbers(batch * kv_heads * seq_k * dv);
      std::vector<double> out(static_cast<std::size_t>(batch * heads * seq_q * dv));
      if (rope_base > 0) {
        run(lrpe::rope_neox<double>(d, rope_base), o, q, k, v, out, batch, heads, kv_heads, seq_q, seq_k, d, dv);
      } else {
        run(lrpe::no_encoding{}, o, q, k, v, out, batch, heads, kv_heads, seq_q, seq_k, d, dv);
      }
      std::printf("\"%s\": [", name.c_str());
      for (std::size_t i = 0; i < out.size(); ++i) std::printf("%s%.17g", i ? ", " : "", out[i]);
      std::printf("]%s\n", c + 1 < cases ? "," : "");
    }
    std::printf("}\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_options_dump: %s\n", e.what());
    return 1;
  }
}
