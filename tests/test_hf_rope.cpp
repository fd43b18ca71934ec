// SPDX-License-Identifier: MIT
// interop::rope_from_hf against the formulas of transformers 5.24's modeling_rope_utils.py,
// written here again in long double from HF's code (default, linear, dynamic, yarn with
// DeepSeek's mscales and a null factor, longrope short and long, llama3, proportional), with
// the configs of real checkpoints; the encoder it makes; and its errors.
#include <lrpe/lrpe.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <numbers>
#include <vector>

using lrpe::index_t;
using lrpe::interop::hf_rope_config;
using ld = long double;

namespace {

/// θ_k = base^(−2k/dim), k < dim/2 (HF's default inverse frequencies).
std::vector<ld> base_theta(ld base, index_t dim) {
  std::vector<ld> t;
  for (index_t k = 0; k < dim / 2; ++k) t.push_back(std::pow(base, -ld(2 * k) / ld(dim)));
  return t;
}

void check_theta(const std::vector<double>& got, const std::vector<ld>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t k = 0; k < got.size(); ++k) {
    CAPTURE(k);
    CHECK(std::abs(ld(got[k]) - want[k]) <= 1e-14L * std::abs(want[k]));
  }
}

ld mscale(ld f, ld m = 1) { return f <= 1 ? 1 : 0.1L * m * std::log(f) + 1; }

}  // namespace

TEST_CASE("rope_from_hf: default, linear and dynamic (Llama 2, Qwen2.5, partial rotary)") {
  hf_rope_config c;
  c.head_dim = 128;
  c.rope_theta = 1e6;
  c.max_position_embeddings = 32768;
  auto r = lrpe::interop::rope_from_hf(c);
  check_theta(r.theta, base_theta(1e6L, 128));
  CHECK(r.rotary_dim == 128);
  CHECK(r.attention_factor == 1.0);
  // partial rotary (e.g. Phi-2, StableLM: partial_rotary_factor 0.4 of 80 → 32)
  c.head_dim = 80;
  c.partial_rotary_factor = 0.4;
  c.rope_theta = 10000;
  r = lrpe::interop::rope_from_hf(c);
  CHECK(r.rotary_dim == 32);
  check_theta(r.theta, base_theta(10000.0L, 32));
  // linear
  c.partial_rotary_factor = 1.0;
  c.head_dim = 128;
  c.rope_type = "linear";
  c.factor = 4.0;
  r = lrpe::interop::rope_from_hf(c);
  auto want = base_theta(10000.0L, 128);
  for (auto& x : want) x /= 4;
  check_theta(r.theta, want);
  // dynamic: the base grows with the length past max_position_embeddings
  c.rope_type = "dynamic";
  c.factor = 2.0;
  c.max_position_embeddings = 4096;
  check_theta(lrpe::interop::rope_from_hf(c, 1000).theta, base_theta(10000.0L, 128));  // below: unchanged
  const ld grown = 10000.0L * std::pow(2.0L * 8192 / 4096 - 1, 128.0L / 126);
  check_theta(lrpe::interop::rope_from_hf(c, 8192).theta, base_theta(grown, 128));
}

TEST_CASE("rope_from_hf: yarn as DeepSeek-V3 configures it (null factor, mscale, mscale_all_dim) and as gpt-oss "
          "(no truncation)") {
  const auto yarn = [](ld base, index_t dim, ld f, ld orig, ld fast, ld slow, bool truncate) {
    const auto corr = [&](ld rot) { return ld(dim) * std::log(orig / (rot * 2 * std::numbers::pi_v<ld>)) / (2 * std::log(base)); };
    ld low = corr(fast), high = corr(slow);
    if (truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max<ld>(low, 0);
    high = std::min<ld>(high, ld(dim - 1));
    if (low == high) high += 0.001L;
    std::vector<ld> out;
    for (index_t k = 0; k < dim / 2; ++k) {
      const ld pos = std::pow(base, ld(2 * k) / ld(dim));
      const ld ramp = std::clamp((ld(k) - low) / (high - low), ld(0), ld(1));
      const ld extra = 1 - ramp;
      out.push_back(1 / (f * pos) * (1 - extra) + 1 / pos * extra);
    }
    return out;
  };
  hf_rope_config c;  // DeepSeek-V3: qk_rope_head_dim 64, factor 40, orig 4096, mscale = mscale_all_dim = 1
  c.head_dim = 64;
  c.rope_theta = 10000;
  c.max_position_embeddings = 163840;
  c.rope_type = "yarn";
  c.factor = 40.0;
  c.original_max_position_embeddings = 4096;
  c.beta_fast = 32;
  c.beta_slow = 1;
  c.mscale = 1.0;
  c.mscale_all_dim = 1.0;
  auto r = lrpe::interop::rope_from_hf(c);
  check_theta(r.theta, yarn(10000, 64, 40, 4096, 32, 1, true));
  CHECK(r.attention_factor == doctest::Approx(double(mscale(40, 1) / mscale(40, 1))).epsilon(1e-15));
  // mscale 0.707 against mscale_all_dim 1 (a ratio below 1), and a null factor: max/orig = 40
  c.factor.reset();
  c.mscale = 0.707;
  r = lrpe::interop::rope_from_hf(c);
  CHECK(r.attention_factor == doctest::Approx(double(mscale(40, 0.707L) / mscale(40, 1))).epsilon(1e-15));
  // no mscales: 0.1 ln f + 1; absent or zero betas: 32 and 1; gpt-oss's truncate = false
  c.mscale.reset();
  c.mscale_all_dim.reset();
  c.beta_fast = 0;
  c.beta_slow.reset();
  c.truncate = false;
  c.factor = 32.0;
  c.rope_theta = 150000;
  r = lrpe::interop::rope_from_hf(c);
  check_theta(r.theta, yarn(150000, 64, 32, 4096, 32, 1, false));
  CHECK(r.attention_factor == doctest::Approx(double(mscale(32))).epsilon(1e-15));
  c.attention_factor = 1.5;  // an explicit one is taken as it is
  CHECK(lrpe::interop::rope_from_hf(c).attention_factor == 1.5);
}

TEST_CASE("rope_from_hf: longrope (short and long factors by length, Phi-3's attention factor), llama3 (Llama 3.1), "
          "proportional (Gemma)") {
  hf_rope_config c;
  c.head_dim = 8;
  c.rope_theta = 10000;
  c.rope_type = "longrope";
  c.max_position_embeddings = 131072;
  c.original_max_position_embeddings = 4096;
  c.short_factor = {1.0, 1.1, 1.3, 1.7};
  c.long_factor = {1.0, 2.0, 8.0, 30.0};
  const auto theta = base_theta(10000.0L, 8);
  auto by = [&](const std::vector<double>& ext) {
    std::vector<ld> out;
    for (std::size_t k = 0; k < theta.size(); ++k) out.push_back(theta[k] / ld(ext[k]));
    return out;
  };
  auto r = lrpe::interop::rope_from_hf(c, 4096);
  check_theta(r.theta, by(c.short_factor));
  CHECK(r.attention_factor == doctest::Approx(double(std::sqrt(1 + std::log(32.0L) / std::log(4096.0L)))).epsilon(1e-15));
  check_theta(lrpe::interop::rope_from_hf(c, 4097).theta, by(c.long_factor));
  // llama3 (Llama 3.1 8B: θ 500000, factor 8, low 1, high 4, orig 8192)
  hf_rope_config l;
  l.head_dim = 128;
  l.rope_theta = 500000;
  l.max_position_embeddings = 131072;
  l.rope_type = "llama3";
  l.factor = 8;
  l.low_freq_factor = 1;
  l.high_freq_factor = 4;
  l.original_max_position_embeddings = 8192;
  std::vector<ld> want;
  for (ld x : base_theta(500000.0L, 128)) {
    const ld wavelen = 2 * std::numbers::pi_v<ld> / x;
    if (wavelen > 8192.0L / 1) want.push_back(x / 8);
    else if (wavelen < 8192.0L / 4) want.push_back(x);
    else {
      const ld s = (8192 / wavelen - 1) / (4 - 1);
      want.push_back((1 - s) * x / 8 + s * x);
    }
  }
  r = lrpe::interop::rope_from_hf(l);
  check_theta(r.theta, want);
  CHECK(r.attention_factor == 1.0);
  // proportional: 256-wide heads, a quarter of the pairs rotated at base^(−2k/256), the rest 0
  hf_rope_config g;
  g.head_dim = 256;
  g.rope_theta = 1e6;
  g.max_position_embeddings = 131072;
  g.rope_type = "proportional";
  g.partial_rotary_factor = 0.25;
  r = lrpe::interop::rope_from_hf(g);
  CHECK(r.rotary_dim == 256);
  auto p = base_theta(1e6L, 256);
  for (std::size_t k = 32; k < p.size(); ++k) p[k] = 0;
  check_theta(r.theta, p);
}

TEST_CASE("rope_from_hf: the encoder equals the RoPE preset; bad configs are clear errors") {
  hf_rope_config c;
  c.head_dim = 64;
  const auto enc = lrpe::interop::rope_from_hf(c).make_encoder<double>(64);
  const lrpe::rope_neox<double> neox(64);
  const lrpe::row_matrix<double> x = lrpe::row_matrix<double>::Random(5, 64);
  CHECK((enc.encode(x, 1000) - neox.encode(x, 1000)).cwiseAbs().maxCoeff() == 0);
  c.rope_type = "su";
  CHECK_THROWS_WITH_AS((void)lrpe::interop::rope_from_hf(c), doctest::Contains("rope_type"), lrpe::parameter_error);
  c.rope_type = "linear";
  CHECK_THROWS_WITH_AS((void)lrpe::interop::rope_from_hf(c), doctest::Contains("'factor' is required"),
                       lrpe::parameter_error);
  c.rope_type = "llama3";
  c.factor = 8;
  c.max_position_embeddings = 8192;
  CHECK_THROWS_WITH_AS((void)lrpe::interop::rope_from_hf(c), doctest::Contains("low_freq_factor"),
                       lrpe::parameter_error);
  c.rope_type = "default";
  c.partial_rotary_factor = 0.01;
  CHECK_THROWS_WITH_AS((void)lrpe::interop::rope_from_hf(c), doctest::Contains("partial_rotary_factor"),
                       lrpe::parameter_error);
  c.partial_rotary_factor = 1;
  c.head_dim = 0;
  CHECK_THROWS_WITH_AS((void)lrpe::interop::rope_from_hf(c), doctest::Contains("head_dim"), lrpe::parameter_error);
  c.head_dim = 64;
  c.rope_type = "dynamic";
  c.max_position_embeddings = 0;
  CHECK_THROWS_WITH_AS((void)lrpe::interop::rope_from_hf(c), doctest::Contains("max_position_embeddings"),
                       lrpe::parameter_error);
}

TEST_CASE("make_cos_sin_cache from a list of positions: the rows of the table at those positions, far ones too") {
  const std::vector<double> theta = lrpe::freq::rope(4, 10000.0, 8);
  const auto table = lrpe::interop::make_cos_sin_cache<double>(20, theta);
  const std::vector<lrpe::position_t> pos{7, 0, 19, 7};
  const auto rows = lrpe::interop::make_cos_sin_cache<double>(std::span<const lrpe::position_t>(pos), theta);
  REQUIRE(rows.cos.rows() == 4);
  for (std::size_t i = 0; i < pos.size(); ++i) {
    CHECK(rows.cos.row(index_t(i)) == table.cos.row(pos[i]));
    CHECK(rows.sin.row(index_t(i)) == table.sin.row(pos[i]));
  }
  const std::vector<lrpe::position_t> far{lrpe::position_t(1) << 40};
  const auto f = lrpe::interop::make_cos_sin_cache<double>(std::span<const lrpe::position_t>(far), theta);
  const ld angle = ld(far[0]) * ld(theta[3]);  // exact in long double (2^40 · a double)
  CHECK(std::abs(ld(f.cos(0, 3)) - std::cos(angle)) <= 1e-15L);
  CHECK_THROWS_AS((void)lrpe::interop::make_cos_sin_cache<double>(std::span<const lrpe::position_t>(pos), {}),
                  lrpe::shape_error);
}
