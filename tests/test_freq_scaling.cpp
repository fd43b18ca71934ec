// SPDX-License-Identifier: MIT
// RoPE scalings (linear, dynamic NTK, YaRN, llama3) against the values and formulas published in
// REFERENCE.md (read from HF transformers' modeling_rope_utils.py).
#include <lrpe/lrpe.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <utility>
#include <vector>

TEST_CASE("linear scaling divides every frequency by the factor") {
  const auto theta = lrpe::freq::rope(32);
  const auto s = lrpe::freq::linear(theta, 4);
  for (std::size_t k = 0; k < theta.size(); ++k) CHECK(s[k] == doctest::Approx(theta[k] / 4).epsilon(1e-15));
}

TEST_CASE("dynamic NTK base: published example and no change within the trained length") {
  CHECK(lrpe::freq::dynamic_ntk_base(1e4, 2, 8192, 4096, 128) == doctest::Approx(30527.74).epsilon(1e-6));
  CHECK(lrpe::freq::dynamic_ntk_base(1e4, 2, 4096, 4096, 128) == 1e4);
  CHECK(lrpe::freq::dynamic_ntk_base(1e4, 2, 100, 4096, 128) == 1e4);
}

TEST_CASE("YaRN: correction range, ramp and attention factor") {
  // dim 128, base 1e4, L_orig 4096: corr(32) = 20.944..., corr(1) = 45.027... (REFERENCE.md).
  CHECK(lrpe::freq::yarn_correction_dim(32, 128, 1e4, 4096) == doctest::Approx(20.944).epsilon(1e-4));
  CHECK(lrpe::freq::yarn_correction_dim(1, 128, 1e4, 4096) == doctest::Approx(45.027).epsilon(1e-4));
  CHECK(lrpe::freq::yarn_attention_factor(4) == doctest::Approx(1.138629).epsilon(1e-6));
  CHECK(lrpe::freq::yarn_attention_factor(1) == 1.0);
  const auto theta = lrpe::freq::rope(64, 1e4);
  const auto y = lrpe::freq::yarn(theta, 4, 4096, 1e4);
  // low = 20, high = 46: k ≤ 20 extrapolated (unchanged), k ≥ 46 interpolated (θ/4), linear between.
  for (std::size_t k = 0; k <= 20; ++k) CHECK(y[k] == theta[k]);
  for (std::size_t k = 46; k < 64; ++k) CHECK(y[k] == doctest::Approx(theta[k] / 4).epsilon(1e-15));
  const double ramp = (33.0 - 20.0) / (46.0 - 20.0);
  CHECK(y[33] == doctest::Approx(theta[33] / 4 * ramp + theta[33] * (1 - ramp)).epsilon(1e-15));
}

TEST_CASE("YaRN with truncate = false and the mscale attention factor: HF transformers 5.24's values") {
  // head_dim 64, rope_theta 1e4, factor 2, original_max_position_embeddings 2048, truncate False:
  // HF's low/high = 8.064000845006177 / 20.105200671565424 (unrounded) and these inverse
  // frequencies (its functions run in float64, 2026-11-25).
  const auto theta = lrpe::freq::rope(32, 1e4);
  const auto y = lrpe::freq::yarn(theta, 2, 2048, 1e4, 32, 1, /*truncate=*/false);
  const std::pair<std::size_t, double> hf[] = {{9, 0.07207484283313897}, {16, 0.006704647680752957},
                                                {20, 0.0015949528078570802}};
  for (const auto& entry : hf) {  // (CAPTURE is a lambda: no structured binding for clang < 16)
    const std::size_t k = entry.first;
    const double v = entry.second;
    CAPTURE(k);
    CHECK(std::abs(y[k] / v - 1) <= 1e-14);
  }
  for (std::size_t k = 0; k <= 8; ++k) CHECK(y[k] == theta[k]);  // below low: kept
  for (std::size_t k = 21; k < 32; ++k) CHECK(std::abs(y[k] / (theta[k] / 2) - 1) <= 1e-15);
  // truncated (the default): low 8, high 21, so entry 9 differs
  const auto yt = lrpe::freq::yarn(theta, 2, 2048, 1e4);
  CHECK(std::abs(yt[9] / hf[0].second - 1) > 1e-4);
  // attention factor: f = 40 with DeepSeek-style mscale / mscale_all_dim (HF's get_mscale ratio)
  CHECK(lrpe::freq::yarn_attention_factor(40, 1, 1) == 1.0);
  CHECK(std::abs(lrpe::freq::yarn_attention_factor(40, 2, 1) - (0.2 * std::log(40.0) + 1) / (0.1 * std::log(40.0) + 1)) <= 1e-15);
  CHECK(std::abs(lrpe::freq::yarn_attention_factor(40, 2, 1) - 1.26948) <= 1e-6);
  CHECK(lrpe::freq::yarn_attention_factor(40, 1, 0) == lrpe::freq::yarn_attention_factor(40));  // unset: plain
  CHECK(lrpe::freq::yarn_attention_factor(40, 0, 1) == lrpe::freq::yarn_attention_factor(40));
  CHECK(lrpe::freq::yarn_attention_factor(0.5, 2, 1) == 1.0);
  CHECK_THROWS_WITH_AS(lrpe::freq::yarn_attention_factor(40, -1, 1), doctest::Contains("'mscale' must be >= 0"),
                       lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(lrpe::freq::yarn_attention_factor(40, 1, NAN), doctest::Contains("'mscale_all_dim' must be finite"),
                       lrpe::domain_error);
  CHECK_THROWS_AS(lrpe::freq::yarn_attention_factor(INFINITY, 1, 1), lrpe::domain_error);
}

TEST_CASE("longrope: short factors up to L_orig, long ones past it; HF transformers 5.24's values") {
  // HF longrope, head_dim 8, rope_theta 1e4, short [1, 1.5, 2, 3], long [2, 4, 8, 16],
  // original 4096, max_position_embeddings 131072 (factor 32); HF computes in float32.
  const auto theta = lrpe::freq::rope(4, 1e4);
  const std::vector<double> sf{1.0, 1.5, 2.0, 3.0}, lf{2.0, 4.0, 8.0, 16.0};
  const double hf_short[] = {1.0, 0.06666667014360428, 0.004999999888241291, 0.00033333332976326346};
  const double hf_long[] = {0.5, 0.02500000037252903, 0.0012499999720603228, 6.25000029685907e-05};
  for (const double L : {0.0, 100.0, 4096.0, 4097.0, 8192.0}) {
    CAPTURE(L);
    const auto y = lrpe::freq::longrope(theta, sf, lf, L, 4096);
    const double* hf = L > 4096 ? hf_long : hf_short;
    for (std::size_t k = 0; k < 4; ++k) {
      CHECK(std::abs(y[k] / hf[k] - 1) <= 2e-7);  // float32 on HF's side
      CHECK(y[k] == theta[k] / (L > 4096 ? lf[k] : sf[k]));
    }
  }
  CHECK(std::abs(lrpe::freq::longrope_attention_factor(32, 4096) - 1.1902380714238083) <= 1e-15);
  CHECK(lrpe::freq::longrope_attention_factor(1, 4096) == 1.0);
  CHECK_THROWS_WITH_AS(lrpe::freq::longrope(theta, std::vector<double>{1, 2}, lf, 0, 4096),
                       doctest::Contains("'short_factor' must have theta.size() = 4 entries; got 2"), lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::freq::longrope(theta, sf, std::vector<double>{1, 2, 0, 4}, 0, 4096),
                       doctest::Contains("'long_factor' must be > 0 (at index 2)"), lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(lrpe::freq::longrope(theta, sf, std::vector<double>{1, NAN, 3, 4}, 0, 4096),
                       doctest::Contains("at index 1"), lrpe::domain_error);
  CHECK_THROWS_AS(lrpe::freq::longrope(theta, sf, lf, -1, 4096), lrpe::parameter_error);
  CHECK_THROWS_AS(lrpe::freq::longrope(theta, sf, lf, 0, 0), lrpe::parameter_error);
  CHECK_THROWS_AS(lrpe::freq::longrope_attention_factor(32, 1), lrpe::parameter_error);
  CHECK_THROWS_AS(lrpe::freq::longrope_attention_factor(NAN, 4096), lrpe::domain_error);
}

TEST_CASE("llama3: long wavelengths divided by the factor, short ones kept, continuous between") {
  const auto theta = lrpe::freq::rope(64, 500000.0);
  const auto l3 = lrpe::freq::llama3(theta);  // factor 8, low 1, high 4, L_orig 8192
  int kept = 0, divided = 0, smoothed = 0;
  for (std::size_t k = 0; k < theta.size(); ++k) {
    const double wavelen = 2 * std::numbers::pi / theta[k];
    if (wavelen < 8192.0 / 4) {
      CHECK(l3[k] == theta[k]);
      ++kept;
    } else if (wavelen > 8192.0) {
      CHECK(l3[k] == doctest::Approx(theta[k] / 8).epsilon(1e-15));
      ++divided;
    } else {
      const double s = (8192.0 / wavelen - 1) / (4 - 1);
      CHECK(l3[k] == doctest::Approx((1 - s) * theta[k] / 8 + s * theta[k]).epsilon(1e-15));
      CHECK(l3[k] < theta[k]);
      CHECK(l3[k] > theta[k] / 8);
      ++smoothed;
    }
  }
  CHECK(kept > 0);
  CHECK(divided > 0);
  CHECK(smoothed > 0);
}

TEST_CASE("scalings validate their parameters") {
  const auto theta = lrpe::freq::rope(4);
  CHECK_THROWS_AS(lrpe::freq::linear(theta, 0.5), lrpe::parameter_error);
  CHECK_THROWS_AS(lrpe::freq::linear(theta, NAN), lrpe::domain_error);
  CHECK_THROWS_AS(lrpe::freq::dynamic_ntk_base(1e4, 2, 8192, 0, 128), lrpe::parameter_error);
  CHECK_THROWS_AS(lrpe::freq::dynamic_ntk_base(1e4, 2, 8192, 4096, 3), lrpe::shape_error);
  CHECK_THROWS_AS(lrpe::freq::yarn(theta, 4, -1), lrpe::parameter_error);
  // β_fast below β_slow would turn the ramp around (and leave the low frequencies unscaled)
  CHECK_THROWS_WITH_AS(lrpe::freq::yarn(theta, 4, 4096, 1e4, 1, 32), doctest::Contains("'beta_fast' must be >= beta_slow = 32"),
                       lrpe::parameter_error);
  CHECK_NOTHROW(lrpe::freq::yarn(theta, 4, 4096, 1e4, 8, 8));
  CHECK_THROWS_WITH_AS(lrpe::freq::yarn_correction_dim(0, 128, 1e4, 4096), doctest::Contains("'rotations' must be > 0"),
                       lrpe::parameter_error);
  CHECK_THROWS_AS(lrpe::freq::yarn_correction_dim(-1, 128, 1e4, 4096), lrpe::parameter_error);
  CHECK_THROWS_AS(lrpe::freq::yarn_correction_dim(NAN, 128, 1e4, 4096), lrpe::domain_error);
  CHECK_THROWS_AS(lrpe::freq::yarn_correction_dim(32, 0, 1e4, 4096), lrpe::shape_error);
  CHECK_THROWS_AS(lrpe::freq::yarn_correction_dim(32, 128, 1.0, 4096), lrpe::parameter_error);
  CHECK_THROWS_AS(lrpe::freq::yarn_correction_dim(32, 128, 1e4, 0), lrpe::parameter_error);
  CHECK_THROWS_AS(lrpe::freq::yarn_attention_factor(NAN), lrpe::domain_error);
  CHECK_THROWS_AS(lrpe::freq::yarn_attention_factor(INFINITY), lrpe::domain_error);
  CHECK(lrpe::freq::yarn_attention_factor(0.5) == 1.0);
  CHECK_THROWS_AS(lrpe::freq::llama3(theta, 8, 4, 1), lrpe::parameter_error);
  // an infinite high_freq_factor divided every theta by the factor; NaN is a domain error as elsewhere
  CHECK_THROWS_WITH_AS(lrpe::freq::llama3(theta, 8, 1, INFINITY), doctest::Contains("'high_freq_factor' must be finite"),
                       lrpe::domain_error);
  CHECK_THROWS_AS(lrpe::freq::llama3(theta, 8, 1, NAN), lrpe::domain_error);
  {  // a negative theta is scaled as |theta| (it was always left unscaled, as a high frequency)
    std::vector<double> neg(theta.begin(), theta.end());
    for (auto& x : neg) x = -x;
    const auto a = lrpe::freq::llama3(theta), b = lrpe::freq::llama3(neg);
    for (std::size_t k = 0; k < a.size(); ++k) CHECK(b[k] == -a[k]);
  }
  const std::vector<double> bad{1.0, INFINITY};
  CHECK_THROWS_AS(lrpe::freq::linear(bad, 2), lrpe::domain_error);
  // A scaled schedule plugs into a RoPE encoder.
  const lrpe::lambda::rotation<float> rot(8, lrpe::freq::yarn(theta, 4, 4096));
  CHECK(rot.rotated_dim() == 8);
}

TEST_CASE("finite, accepted arguments that would give an infinite or NaN result are errors naming the argument") {
  // Each of these returned inf or NaN before (found by an error-path audit, 2026-11-25).
  const std::vector<double> two{1.0, 0.01};
  CHECK_THROWS_WITH_AS(lrpe::freq::dynamic_ntk_base(1e308, 2, 8192, 4096, 128),
                       doctest::Contains("argument 'length' must keep the scaled base finite"), lrpe::parameter_error);
  CHECK(std::isfinite(lrpe::freq::dynamic_ntk_base(1e300, 2, 8192, 4096, 128)));
  // L_orig/(2π·β) past DBL_MAX: both correction dimensions were +inf, the ramp NaN
  CHECK_THROWS_WITH_AS(lrpe::freq::yarn(two, 2, 1e300, 1e4, 1e-300, 1e-300),
                       doctest::Contains("lrpe::freq::yarn: argument 'beta_fast' must keep original_length/(2*pi*beta_fast)"),
                       lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(lrpe::freq::yarn(two, 2, 1e300, 1e4, 1, 1e-300),
                       doctest::Contains("argument 'beta_slow' must keep"), lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(lrpe::freq::yarn_correction_dim(1e-300, 4, 1e4, 1e300),
                       doctest::Contains("argument 'rotations' must keep original_length/(2*pi*rotations) a finite, nonzero"),
                       lrpe::parameter_error);
  CHECK_THROWS_AS(lrpe::freq::yarn_correction_dim(1e300, 4, 1e4, 1e-300), lrpe::parameter_error);  // ratio 0: -inf
  // the extremes that stay finite still work, as HF: L_orig = 1e300 puts low = corr(32) = 148
  // past high = dim − 1 = 3, and the reversed ramp clamps to 1 (every θ interpolated, θ/f)
  const auto far = lrpe::freq::yarn(two, 2, 1e300);
  CHECK(far == std::vector<double>{0.5, 0.005});
  // θ/ext past 2^960
  CHECK_THROWS_WITH_AS(lrpe::freq::longrope(std::vector<double>{1.0}, std::vector<double>{1e-310},
                                            std::vector<double>{1.0}, 0, 10),
                       doctest::Contains("argument 'short_factor' must give frequencies with |theta| < 2^960"),
                       lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(lrpe::freq::longrope(std::vector<double>{1.0}, std::vector<double>{1.0},
                                            std::vector<double>{1e-300}, 20, 10),
                       doctest::Contains("argument 'long_factor' must give"), lrpe::parameter_error);
  // θ = π/(2L) past 2^960 for L below ~1.6e-289
  CHECK_THROWS_WITH_AS(lrpe::freq::theta_b(2, 1e-320), doctest::Contains("argument 'length' must give frequencies"),
                       lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(lrpe::freq::theta_c(2, 1e-320), doctest::Contains("argument 'length' must give frequencies"),
                       lrpe::parameter_error);
  CHECK(lrpe::freq::theta_c(2, 1e-280)[0] == std::numbers::pi / 2e-280);
  // 2·pairs past index_t
  CHECK_THROWS_WITH_AS(lrpe::freq::rope(std::numeric_limits<lrpe::index_t>::max() / 2 + 1),
                       doctest::Contains("argument 'pairs' must be >= 1 and 2*pairs an index_t"), lrpe::shape_error);
}

TEST_CASE("yarn_attention_factor with huge mscales: the finite ratio, not inf/inf") {
  // m(c) = 0.1·c·ln f + 1 overflows for c near DBL_MAX; the ratio is ≈ c₁/c₂
  const double big = 1.7e308;
  CHECK(lrpe::freq::yarn_attention_factor(1e300, big, big) == doctest::Approx(1.0).epsilon(1e-15));
  CHECK(lrpe::freq::yarn_attention_factor(1e300, big, big / 4) == doctest::Approx(4.0).epsilon(1e-15));
  // and the ordinary values are unchanged: HF's mscale example (f = 40, mscale 2, mscale_all_dim 1)
  const double a = 0.1 * std::log(40.0);
  CHECK(lrpe::freq::yarn_attention_factor(40, 2, 1) == (2 * a + 1) / (a + 1));
  // a true ratio past DBL_MAX is an error
  CHECK_THROWS_WITH_AS(lrpe::freq::yarn_attention_factor(1e300, big, 1e-300), doctest::Contains("argument 'mscale' must keep the factor finite"),
                       lrpe::parameter_error);
}
