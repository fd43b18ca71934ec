// SPDX-License-Identifier: MIT
// lrpe's rope_from_hf for the configs of docs/howto-hf-rope.md (and dynamic, proportional), as
// JSON on stdout, for bench/upstream/hf_rope_compare.py: it recomputes each with transformers'
// own ROPE_INIT_FUNCTIONS and prints the agreement. Not a test: torch is never a dependency.
#include <lrpe/lrpe.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace {

void put(const char* name, const lrpe::interop::hf_rope_config& c, lrpe::index_t length, bool last = false) {
  const auto r = lrpe::interop::rope_from_hf(c, length);
  std::printf("\"%s\": {\"length\": %ld, \"attention_factor\": %.17g, \"theta\": [", name, static_cast<long>(length),
              r.attention_factor);
  for (std::size_t k = 0; k < r.theta.size(); ++k) std::printf("%s%.17g", k ? ", " : "", r.theta[k]);
  std::printf("]}%s\n", last ? "" : ",");
}

}  // namespace

int main() {
  lrpe::interop::hf_rope_config llama;
  llama.head_dim = 128;
  llama.rope_theta = 500000.0;
  llama.max_position_embeddings = 131072;
  llama.rope_type = "llama3";
  llama.factor = 8.0;
  llama.low_freq_factor = 1.0;
  llama.high_freq_factor = 4.0;
  llama.original_max_position_embeddings = 8192;
  lrpe::interop::hf_rope_config qwen;
  qwen.head_dim = 128;
  qwen.rope_theta = 1000000.0;
  qwen.max_position_embeddings = 32768;
  qwen.rope_type = "yarn";
  qwen.factor = 4.0;
  qwen.original_max_position_embeddings = 32768;
  lrpe::interop::hf_rope_config deepseek;
  deepseek.head_dim = 64;
  deepseek.rope_theta = 10000;
  deepseek.max_position_embeddings = 163840;
  deepseek.rope_type = "yarn";
  deepseek.factor = 40;
  deepseek.beta_fast = 32;
  deepseek.beta_slow = 1;
  deepseek.mscale = 0.707;  // (DeepSeek-V2-Lite's: a ratio other than 1)
  deepseek.mscale_all_dim = 1.0;
  deepseek.original_max_position_embeddings = 4096;
  lrpe::interop::hf_rope_config phi3;
  phi3.head_dim = 96;
  phi3.rope_theta = 10000.0;
  phi3.max_position_embeddings = 131072;
  phi3.original_max_position_embeddings = 4096;
  phi3.rope_type = "longrope";
  for (int k = 0; k < 48; ++k) {  // the shape of Phi-3's lists (values of its own)
    phi3.short_factor.push_back(1.0 + 0.05 * k);
    phi3.long_factor.push_back(1.0 + 1.3 * k);
  }
  lrpe::interop::hf_rope_config gemma;
  gemma.head_dim = 256;
  gemma.rope_theta = 1000000.0;
  gemma.max_position_embeddings = 131072;
  gemma.rope_type = "linear";
  gemma.factor = 8.0;
  lrpe::interop::hf_rope_config dynamic = gemma;
  dynamic.head_dim = 128;
  dynamic.rope_theta = 10000;
  dynamic.max_position_embeddings = 4096;
  dynamic.rope_type = "dynamic";
  dynamic.factor = 2.0;
  lrpe::interop::hf_rope_config proportional = gemma;
  proportional.rope_type = "proportional";
  proportional.factor.reset();
  proportional.partial_rotary_factor = 0.25;
  std::printf("{\n");
  put("llama3", llama, 0);
  put("yarn_qwen", qwen, 0);
  put("yarn_deepseek", deepseek, 0);
  put("longrope_short", phi3, 2048);
  put("longrope_long", phi3, 100000);
  put("linear", gemma, 0);
  put("dynamic", dynamic, 10000);
  put("proportional", proportional, 0, true);
  std::printf("}\n");
}
