// SPDX-License-Identifier: MIT
// Multi-axis RoPE (interop/mrope.hpp): against a long-double loop written from Hugging Face's
// construction (cos and sin of the full head_dim from cat(freqs, freqs), its chunks of
// mrope_section·2 taking the axes in turn, then x·cos + rotate_half(x)·sin; Qwen3-VL's
// interleaved frequencies), the multi-axis relative property, text rows as RoPE, and the errors.
#include <doctest/doctest.h>

#include <lrpe/lrpe.hpp>
#include <lrpe/interop/mrope.hpp>

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

namespace {

using lrpe::index_t;
using lrpe::position_t;
using ld = long double;
namespace li = lrpe::interop;

/// HF's M-RoPE of one row, in long double: the axis of each of the head_dim entries of cos/sin.
std::vector<index_t> hf_axes(index_t d, const std::vector<index_t>& sections, bool interleaved) {
  std::vector<index_t> axis(static_cast<std::size_t>(d));
  if (!interleaved) {  // chunks of sizes sections ++ sections, chunk c from axis c mod A
    std::vector<index_t> chunks(sections);
    chunks.insert(chunks.end(), sections.begin(), sections.end());
    index_t at = 0;
    for (std::size_t c = 0; c < chunks.size(); ++c)
      for (index_t i = 0; i < chunks[c]; ++i) axis[static_cast<std::size_t>(at++)] = static_cast<index_t>(c % sections.size());
  } else {  // freqs_t[..., offset : 3·section[offset] : 3] = freqs[offset] for offset 1, 2; cat(f, f)
    for (index_t j = 0; j < d / 2; ++j) {
      index_t a = 0;
      for (index_t off = 1; off < static_cast<index_t>(sections.size()); ++off)
        if (j % 3 == off && j < 3 * sections[static_cast<std::size_t>(off)]) a = off;
      axis[static_cast<std::size_t>(j)] = axis[static_cast<std::size_t>(j + d / 2)] = a;
    }
  }
  return axis;
}

/// (θ: the encoder's own, in double, whose products with positions up to 1e5 the library forms
/// exactly; that θ is base^(−2j/d) to rounding is checked apart.)
std::vector<ld> hf_row(const std::vector<ld>& x, const std::vector<position_t>& pos, const std::vector<double>& theta,
                       const std::vector<index_t>& axis) {
  const auto d = static_cast<index_t>(x.size());
  std::vector<ld> out(x.size());
  for (index_t i = 0; i < d; ++i) {
    const index_t j = i % (d / 2);
    const ld inv_freq = theta[static_cast<std::size_t>(j)];
    const ld angle = ld(pos[static_cast<std::size_t>(axis[static_cast<std::size_t>(i)])]) * inv_freq;
    const ld rot = i < d / 2 ? -x[static_cast<std::size_t>(i + d / 2)] : x[static_cast<std::size_t>(i - d / 2)];
    out[static_cast<std::size_t>(i)] = x[static_cast<std::size_t>(i)] * std::cos(angle) + rot * std::sin(angle);
  }
  return out;
}

}  // namespace

TEST_CASE_TEMPLATE("multi_axis_rope: Qwen2-VL sections and Qwen3-VL interleaving, as HF builds them", T, float, double) {
  struct config {
    index_t d;
    std::vector<index_t> sections;
    bool interleaved;
  };
  lrpe::generator g(0x3D0'0001);
  for (const config& c : {config{128, {16, 24, 24}, false}, config{128, {24, 20, 20}, true}, config{16, {2, 3, 3}, false},
                          config{16, {4, 2, 2}, true}, config{12, {6}, false}, config{24, {3, 3, 3, 3}, false}}) {
    CAPTURE(c.d);
    CAPTURE(c.interleaved);
    const li::multi_axis_rope<T> rope(c.d, 1e6, c.sections,
                                      c.interleaved ? li::mrope_layout::interleaved : li::mrope_layout::sections);
    const auto axes = static_cast<index_t>(c.sections.size());
    const index_t n = 9;
    lrpe::row_matrix<T> x(n, c.d), out(n, c.d);
    std::vector<position_t> pos;
    for (index_t i = 0; i < n; ++i) {
      for (index_t j = 0; j < c.d; ++j) x(i, j) = static_cast<T>(2 * g.uniform01() - 1);
      for (index_t a = 0; a < axes; ++a)  // small, large and negative coordinates
        pos.push_back(i < 3 ? i * (a + 1) : (i < 6 ? 100000 + 37 * i - 11 * a : -5 * i + a));
    }
    rope.encode(lrpe::view(std::as_const(x)), li::axis_positions{pos, axes}, lrpe::view(out));
    const auto axis = hf_axes(c.d, c.sections, c.interleaved);
    double err = 0;
    for (index_t i = 0; i < n; ++i) {
      std::vector<ld> xi(static_cast<std::size_t>(c.d));
      for (index_t j = 0; j < c.d; ++j) xi[static_cast<std::size_t>(j)] = x(i, j);
      const std::vector<position_t> pi(pos.begin() + i * axes, pos.begin() + (i + 1) * axes);
      const auto want = hf_row(xi, pi, rope.theta(), axis);
      for (index_t j = 0; j < c.d; ++j)
        err = std::max(err, static_cast<double>(std::abs(ld(out(i, j)) - want[static_cast<std::size_t>(j)])));
    }
    // angles up to 1e5 rad: the long-double reference's own rounding of pos·θ stays far below these
    CHECK(err <= (std::is_same_v<T, float> ? 2e-6 : 1e-13));
    // θ_j = base^(−2j/d), HF's inv_freq: to pow's rounding of the exponent −2j/d, in double
    // (≤ ln(base)·2⁻⁵³ relative, 1.5e-15 at base 1e6) and of its result
    for (index_t j = 0; j < c.d / 2; ++j) {
      const ld want = std::pow(1e6L, -ld(2 * j) / ld(c.d));
      CHECK(std::abs(ld(rope.theta()[static_cast<std::size_t>(j)]) - want) <= 2e-15L * want);
    }
    // the axis of each frequency, as HF assigns it (the first half of its cos/sin)
    for (index_t j = 0; j < c.d / 2; ++j) CHECK(rope.axis_of(j) == axis[static_cast<std::size_t>(j)]);
  }
}

TEST_CASE("multi_axis_rope: the relative property on every axis, and a text row is RoPE") {
  const li::multi_axis_rope<double> rope(32, 1e4, {4, 6, 6});
  for (const auto& [s, t] : {std::pair<std::vector<position_t>, std::vector<position_t>>{{0, 0, 0}, {5, 3, 9}},
                             {{100, -7, 3}, {90, 12, 3}}, {{1000000, 2, 2}, {-1000000, 5, 1}}}) {
    const auto r = lrpe::check::relative(rope, std::span<const position_t>(s), std::span<const position_t>(t));
    CAPTURE(r.to_string());
    CHECK(r.passed);
  }
  // a row whose coordinates are equal (a text token) is RoPE at that position
  const lrpe::rope_neox<double> plain(32, 1e4);
  lrpe::row_matrix<double> x = lrpe::row_matrix<double>::Random(5, 32), a(5, 32);
  const std::vector<position_t> text{7, 7, 7, 8, 8, 8, 9, 9, 9, 10, 10, 10, 11, 11, 11};
  rope.encode(lrpe::view(std::as_const(x)), li::axis_positions{text, 3}, lrpe::view(a));
  const lrpe::row_matrix<double> b = plain.encode(x, lrpe::positions(7));
  CHECK((a - b).cwiseAbs().maxCoeff() <= 1e-14);
  // in place
  rope.encode(lrpe::view(std::as_const(x)), li::axis_positions{text, 3}, lrpe::view(x));
  CHECK((x - a).cwiseAbs().maxCoeff() == 0.0);
  // the logits depend on coordinate differences only
  const lrpe::row_matrix<double> q = lrpe::row_matrix<double>::Random(1, 32), k = lrpe::row_matrix<double>::Random(1, 32);
  const auto logit = [&](std::vector<position_t> s, std::vector<position_t> t) {
    lrpe::row_matrix<double> qe(1, 32), ke(1, 32);
    rope.encode(lrpe::view(std::as_const(q)), li::axis_positions{s, 3}, lrpe::view(qe));
    rope.encode(lrpe::view(std::as_const(k)), li::axis_positions{t, 3}, lrpe::view(ke));
    return qe.row(0).dot(ke.row(0));
  };
  CHECK(std::abs(logit({3, 4, 5}, {10, 2, 9}) - logit({103, -96, 1005}, {110, -98, 1009})) <= 1e-12);
  CHECK(std::abs(logit({3, 4, 5}, {10, 2, 9}) - logit({3, 4, 5}, {10, 3, 9})) > 1e-3);
}

TEST_CASE("multi_axis_rope: bad arguments are errors naming them") {
  CHECK_THROWS_AS(li::multi_axis_rope<double>(15, 1e4, {3, 2, 2}), lrpe::parameter_error);
  CHECK_THROWS_AS(li::multi_axis_rope<double>(16, 1e4, {3, 2, 2}), lrpe::parameter_error);   // sums to 7, not 8
  CHECK_THROWS_AS(li::multi_axis_rope<double>(16, 1e4, {}), lrpe::parameter_error);
  CHECK_THROWS_AS(li::multi_axis_rope<double>(16, 1e4, {2, 2, 2, 1, 1}), lrpe::parameter_error);
  CHECK_THROWS_AS(li::multi_axis_rope<double>(16, 1e4, {9, -1}), lrpe::parameter_error);
  const li::multi_axis_rope<double> rope(8, 1e4, {2, 1, 1});
  lrpe::row_matrix<double> x = lrpe::row_matrix<double>::Zero(2, 8), out(2, 8);
  const std::vector<position_t> five{1, 2, 3, 4, 5};
  CHECK_THROWS_AS(rope.encode(lrpe::view(std::as_const(x)), li::axis_positions{five, 3}, lrpe::view(out)),
                  lrpe::shape_error);
  const std::vector<position_t> six{1, 2, 3, 4, 5, 6};
  CHECK_THROWS_AS(rope.encode(lrpe::view(std::as_const(x)), li::axis_positions{six, 2}, lrpe::view(out)),
                  lrpe::shape_error);
}

TEST_CASE("mrope_position_ids: Qwen2-VL's and Qwen2.5-VL's get_rope_index (transformers 5.24)") {
  using seg = li::mrope_segment;
  // 2 text tokens, a 4×4-patch image (2×2 after the 2×2 merge), 3 text tokens
  const std::vector<seg> a{{seg::kind::text, 2}, {seg::kind::image, 0, 1, 4, 4}, {seg::kind::text, 3}};
  const std::vector<position_t> want_a{0, 0, 0,  1, 1, 1,                                  // text
                                       2, 2, 2,  2, 2, 3,  2, 3, 2,  2, 3, 3,              // image rows
                                       4, 4, 4,  5, 5, 5,  6, 6, 6};                        // p = 2 + max(4, 4)/2
  CHECK(li::mrope_position_ids(a) == want_a);
  // HF's docstring grid: 3 temporal patches of 2×2 (merged), interval 50 (25 tokens/s, 2 frames a patch, fps 1)
  const std::vector<seg> b{{seg::kind::video, 0, 3, 4, 4, 50.0}, {seg::kind::text, 1}};
  const auto ids = li::mrope_position_ids(b);
  REQUIRE(ids.size() == 3 * 13);
  const position_t t_want[] = {0, 0, 0, 0, 50, 50, 50, 50, 100, 100, 100, 100, 2};
  const position_t h_want[] = {0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 2};
  const position_t w_want[] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2};
  for (std::size_t i = 0; i < 13; ++i) {
    CAPTURE(i);
    CHECK(ids[3 * i] == t_want[i]);
    CHECK(ids[3 * i + 1] == h_want[i]);
    CHECK(ids[3 * i + 2] == w_want[i]);
  }
  // an image's time does not scale; a fractional interval truncates; a start offset
  const std::vector<seg> c{{seg::kind::image, 0, 2, 2, 6, 9.0}, {seg::kind::video, 0, 3, 2, 2, 0.5}};
  const auto ids_c = li::mrope_position_ids(c, 2, 10);
  const std::vector<position_t> want_c{10, 10, 10, 10, 10, 11, 10, 10, 12,   // image T = 2: times 10, 11
                                       11, 10, 10, 11, 10, 11, 11, 10, 12,
                                       13, 13, 13, 13, 13, 13, 14, 13, 13};  // p = 10 + 3; times ⌊0, 0.5, 1⌋
  CHECK(ids_c == want_c);
  // fps 3 (second_per_grid_t = 2/3): HF's float32 interval 25·f32(2/3); at t = 3 the product is
  // 50.000004 in float32 (HF: 50), 49.99… in double
  const float interval = 25.0f * static_cast<float>(2.0 / 3.0);
  const auto ids_d = li::mrope_position_ids(std::vector<seg>{{seg::kind::video, 0, 4, 2, 2, static_cast<double>(interval)}});
  REQUIRE(ids_d.size() == 12);
  CHECK(ids_d[9] == 50);
  CHECK(ids_d[6] == 33);
  CHECK_THROWS_AS(li::mrope_position_ids(std::vector<seg>{{seg::kind::image, 0, 1, 1, 4}}), lrpe::parameter_error);
  CHECK_THROWS_AS(li::mrope_position_ids(std::vector<seg>{{seg::kind::text, -1}}), lrpe::parameter_error);
  CHECK_THROWS_AS(li::mrope_position_ids(std::vector<seg>{{seg::kind::video, 0, 1, 2, 2, -1.0}}), lrpe::parameter_error);
  CHECK_THROWS_AS(li::mrope_position_ids(a, 0), lrpe::parameter_error);
}

TEST_CASE_TEMPLATE("vision_rope_2d: Qwen2-VL's axial frequencies and Pixtral's alternating ones, as HF builds them",
                   T, float, double) {
  lrpe::generator g(0x3D0'0005);
  for (const auto kind : {li::vision_frequencies::repeated, li::vision_frequencies::alternating}) {
    const bool repeated = kind == li::vision_frequencies::repeated;
    CAPTURE(repeated);
    for (const index_t d : {index_t{8}, index_t{80}}) {
      const double base = repeated ? 10000.0 : 1e4 + 1;
      const auto rope = li::vision_rope_2d<T>(d, base, kind);
      REQUIRE(rope.axes() == 2);
      // HF: Qwen2VLVisionRotaryEmbedding's inv_freq over spatial_dim = d/2, for h and then w;
      // Pixtral's inv_freq over d, [0::2] for h and [1::2] for w
      for (index_t i = 0; i < d / 4; ++i) {
        const ld h = repeated ? std::pow(ld(base), -ld(2 * i) / ld(d / 2)) : std::pow(ld(base), -ld(4 * i) / ld(d));
        const ld w = repeated ? h : std::pow(ld(base), -ld(4 * i + 2) / ld(d));
        CHECK(std::abs(ld(rope.theta()[static_cast<std::size_t>(i)]) - h) <= 4e-15L * h);
        CHECK(std::abs(ld(rope.theta()[static_cast<std::size_t>(d / 4 + i)]) - w) <= 4e-15L * w);
        CHECK(rope.axis_of(i) == 0);
        CHECK(rope.axis_of(d / 4 + i) == 1);
      }
      // the rows: cos/sin of cat(h·θ_h, w·θ_w) twice, then x·cos + rotate_half(x)·sin
      const index_t n = 6;
      lrpe::row_matrix<T> x(n, d), out(n, d);
      for (index_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<T>(2 * g.uniform01() - 1);
      const std::vector<position_t> pos{0, 0, 3, 7, 40, 2, 9, 31, 1000, 5, -3, 12};
      rope.encode(lrpe::view(std::as_const(x)), li::axis_positions{pos, 2}, lrpe::view(out));
      std::vector<index_t> axis(static_cast<std::size_t>(d));
      for (index_t j = 0; j < d; ++j) axis[static_cast<std::size_t>(j)] = (j % (d / 2)) < d / 4 ? 0 : 1;
      double err = 0;
      for (index_t i = 0; i < n; ++i) {
        std::vector<ld> xi(static_cast<std::size_t>(d));
        for (index_t j = 0; j < d; ++j) xi[static_cast<std::size_t>(j)] = x(i, j);
        const auto want = hf_row(xi, {pos[static_cast<std::size_t>(2 * i)], pos[static_cast<std::size_t>(2 * i + 1)]},
                                 rope.theta(), axis);
        for (index_t j = 0; j < d; ++j) err = std::max(err, double(std::abs(ld(out(i, j)) - want[static_cast<std::size_t>(j)])));
      }
      CHECK(err <= (std::is_same_v<T, float> ? 2e-6 : 1e-13));
    }
  }
  // the relative property in 2-D
  const auto rope = li::vision_rope_2d<double>(16, 10000.0, li::vision_frequencies::alternating);
  const std::vector<position_t> s{3, 9}, t{40, -2};
  CHECK(lrpe::check::relative(rope, std::span<const position_t>(s), std::span<const position_t>(t)).passed);
  CHECK_THROWS_AS((void)li::vision_rope_2d<double>(18, 10000.0, li::vision_frequencies::repeated), lrpe::parameter_error);
}

TEST_CASE("vision_position_ids: HF's get_vision_position_ids (merge blocks, block-major; frames repeated)") {
  // a 4 × 4 grid with 2 × 2 merge blocks, transcribed from HF's reshape(h/m, m, w/m, m).transpose(1, 2)
  const std::vector<li::vision_grid> one{{1, 4, 4}};
  const std::vector<position_t> want{0, 0, 0, 1, 1, 0, 1, 1, 0, 2, 0, 3, 1, 2, 1, 3,
                                     2, 0, 2, 1, 3, 0, 3, 1, 2, 2, 2, 3, 3, 2, 3, 3};
  CHECK(li::vision_position_ids(one, 2) == want);
  // merge size 1 is the row-major grid (Pixtral); t frames repeat the grid; images follow each other
  const std::vector<li::vision_grid> two{{2, 2, 3}, {1, 1, 2}};
  const std::vector<position_t> plain{0, 0, 0, 1, 0, 2, 1, 0, 1, 1, 1, 2, 0, 0, 0, 1, 0, 2, 1, 0, 1, 1, 1, 2, 0, 0, 0, 1};
  CHECK(li::vision_position_ids(two, 1) == plain);
  // every block of a larger grid holds its m × m patches, and every patch appears once
  const std::vector<li::vision_grid> big{{1, 6, 8}};
  const auto ids = li::vision_position_ids(big, 2);
  REQUIRE(ids.size() == 96);
  std::vector<int> seen(48, 0);
  for (std::size_t k = 0; k < 48; ++k) {
    const position_t h = ids[2 * k], w = ids[2 * k + 1];
    ++seen[static_cast<std::size_t>(h * 8 + w)];
    CHECK(static_cast<position_t>(k / 4) == (h / 2) * 4 + w / 2);  // block index, block-major
  }
  CHECK(std::count(seen.begin(), seen.end(), 1) == 48);
  const std::vector<li::vision_grid> odd{{1, 3, 4}};
  CHECK_THROWS_AS((void)li::vision_position_ids(odd, 2), lrpe::parameter_error);
  CHECK_THROWS_AS((void)li::vision_position_ids(one, 0), lrpe::parameter_error);
}

TEST_CASE("freq::with_factors: theta_j / f_j (ggml's freq_factors), and bad factors") {
  const std::vector<double> theta = lrpe::freq::rope(4, 10000.0, 8), factors{1.0, 2.0, 4.0, 8.0};
  const auto out = lrpe::freq::with_factors(theta, factors);
  for (std::size_t j = 0; j < 4; ++j) CHECK(out[j] == theta[j] / factors[j]);
  CHECK_THROWS_AS((void)lrpe::freq::with_factors(theta, std::vector<double>{1.0}), lrpe::shape_error);
  CHECK_THROWS_AS((void)lrpe::freq::with_factors(theta, std::vector<double>{1.0, 0.0, 1.0, 1.0}), lrpe::parameter_error);
  CHECK_THROWS_AS((void)lrpe::freq::with_factors(theta, std::vector<double>{1.0, NAN, 1.0, 1.0}), lrpe::domain_error);
}
