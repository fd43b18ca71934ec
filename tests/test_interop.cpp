// SPDX-License-Identifier: MIT
// RoPE conventions of other engines: pairings, cos/sin caches, Meta ↔ HF row permutations,
// each against an independent formula or the published conversion.
#include <lrpe/lrpe.hpp>

#include <doctest/doctest.h>

#include <cmath>

using lrpe::index_t;

TEST_CASE("ONNX and GGML pairings") {
  CHECK(lrpe::interop::onnx_pairing(1) == lrpe::pairing::interleaved);
  CHECK(lrpe::interop::onnx_pairing(0) == lrpe::pairing::split_half);
  CHECK(lrpe::interop::ggml_pairing(0) == lrpe::pairing::interleaved);
  CHECK(lrpe::interop::ggml_pairing(2) == lrpe::pairing::split_half);
  CHECK_THROWS_AS(lrpe::interop::onnx_pairing(2), lrpe::parameter_error);
  CHECK_THROWS_AS(lrpe::interop::ggml_pairing(1), lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(lrpe::interop::meta_to_hf_rows(3), doctest::Contains("lrpe::interop::meta_to_hf_rows: argument 'head_dim'"),
                       lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::interop::hf_to_meta_rows(0), doctest::Contains("lrpe::interop::hf_to_meta_rows"), lrpe::shape_error);
}

TEST_CASE("cos/sin cache: layout (max_pos, rotary_dim/2), angles in double") {
  const auto theta = lrpe::freq::rope(16);
  const auto c = lrpe::interop::make_cos_sin_cache<float>(4096, theta);
  REQUIRE(c.cos.rows() == 4096);
  REQUIRE(c.cos.cols() == 16);
  for (index_t p : {0, 1, 1000, 4095})
    for (index_t k = 0; k < 16; ++k) {
      const long double a = static_cast<long double>(p) * std::pow(10000.0L, -2.0L * k / 32);
      CHECK(std::abs(c.cos(p, k) - std::cos(a)) <= 1.2e-7L);
      CHECK(std::abs(c.sin(p, k) - std::sin(a)) <= 1.2e-7L);
    }
  CHECK_THROWS_AS(lrpe::interop::make_cos_sin_cache<float>(0, theta), lrpe::shape_error);
  // |θ| ≥ 2^960, as every rotation: p·θ overflowed, NaN rows from p = 2 on
  CHECK_THROWS_WITH_AS(lrpe::interop::make_cos_sin_cache<double>(3, std::vector<double>{1.5e308}),
                       doctest::Contains("argument 'theta' must have |theta| < 2^960"), lrpe::parameter_error);
}

TEST_CASE("HF conversion permutation: HF's view/transpose formula, and NeoX on HF rows == GPT-J on Meta rows") {
  constexpr index_t d = 8;
  // HF convert_llama_weights_to_hf: w.view(n_heads, d/2, 2, dim).transpose(1, 2).reshape(...):
  // HF row (j·d/2 + i) = Meta row (2i + j).
  const auto m2h = lrpe::interop::meta_to_hf_rows(d);
  for (index_t j = 0; j < 2; ++j)
    for (index_t i = 0; i < d / 2; ++i) CHECK(m2h[static_cast<std::size_t>(j * (d / 2) + i)] == 2 * i + j);
  const auto h2m = lrpe::interop::hf_to_meta_rows(d);
  for (index_t r = 0; r < d; ++r) CHECK(m2h[static_cast<std::size_t>(h2m[static_cast<std::size_t>(r)])] == r);

  // Same scores: a Meta-layout q, k under GPT-J RoPE and their HF-layout rows under NeoX RoPE.
  const lrpe::rope_gptj<double> gptj(d);
  const lrpe::rope_neox<double> neox(d);
  lrpe::generator g(5);
  lrpe::row_matrix<double> q_meta(1, d), k_meta(1, d), q_hf(1, d), k_hf(1, d);
  for (index_t j = 0; j < d; ++j) {
    q_meta(0, j) = g.normal();
    k_meta(0, j) = g.normal();
  }
  for (index_t j = 0; j < d; ++j) {
    q_hf(0, j) = q_meta(0, m2h[static_cast<std::size_t>(j)]);
    k_hf(0, j) = k_meta(0, m2h[static_cast<std::size_t>(j)]);
  }
  for (lrpe::position_t s : {0, 3, 77}) {
    const double a = gptj.score(q_meta.data(), s, k_meta.data(), 100);
    const double b = neox.score(q_hf.data(), s, k_hf.data(), 100);
    CHECK(a == doctest::Approx(b).epsilon(1e-12));
  }
}
