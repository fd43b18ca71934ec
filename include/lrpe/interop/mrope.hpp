// SPDX-License-Identifier: MIT
/**
 * @file mrope.hpp
 * Multi-axis rotary embeddings: a row's position has several coordinates (time, height, width,
 * …), and each rotated pair of features turns by the coordinate of its own axis. Qwen2-VL's and
 * Qwen2.5-VL's M-RoPE (`mrope_section`, e.g. [16, 24, 24] for head_dim 128: frequencies 0–15 turn
 * with time, 16–39 with height, 40–63 with width) and Qwen3-VL's interleaved M-RoPE (frequency
 * j turns with height when j ≡ 1 (mod 3) and j < 3·section[1], with width when j ≡ 2 and
 * j < 3·section[2], with time otherwise), on HF's `rotate_half` pairing by default.
 *
 * The encoding is M(s) = Π_a R_a(s_a), the rotations by θ on axis a's frequencies at coordinate
 * s_a. They turn disjoint planes, so they commute, each is unitary, and
 * M(s)ᵀ M(t) = Π_a R_a(t_a − s_a): the logits depend on the coordinate differences only (the
 * relative property in the multi-axis sense; `check::relative` below verifies it). A row whose
 * coordinates are all equal (a text token) is encoded as by RoPE at that position.
 *
 * 2-D RoPE of vision towers (`vision_rope_2d`: Qwen2-VL's family, Pixtral) is the two-axis case,
 * with the patches' (h, w) from `vision_position_ids`.
 *
 * Attention takes the encoded rows with `no_encoding{}` and `options.scale` = 1/√head_dim; its
 * `causal` mask reads the rows' sequence positions (`q_positions`, `k_positions`), which for a
 * multimodal sequence are not the rotary coordinates (docs/howto-hf-rope.md).
 */
#pragma once

#include <lrpe/backend/reference.hpp>
#include <lrpe/check/check.hpp>
#include <lrpe/encoder.hpp>
#include <lrpe/freq/schedules.hpp>
#include <lrpe/lambda/rotation.hpp>
#include <lrpe/p/identity.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <span>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace interop {

/// The coordinates of rows of a multi-axis encoding, row-major: coordinate a of row i is
/// `data[i·axes + a]`.
struct axis_positions {
  std::span<const position_t> data;
  index_t axes = 1;

  [[nodiscard]] index_t rows() const noexcept {
    return axes > 0 ? static_cast<index_t>(data.size()) / axes : 0;
  }
  [[nodiscard]] position_t operator()(index_t i, index_t a) const noexcept {
    return data[static_cast<std::size_t>(i * axes + a)];
  }
};

/// How the frequencies are shared among the axes.
enum class mrope_layout {
  sections,     ///< contiguous runs of section[a] frequencies per axis (Qwen2-VL, Qwen2.5-VL)
  interleaved,  ///< t, h, w, t, h, w, … while each axis has frequencies left (Qwen3-VL)
};

/**
 * A multi-axis rotary embedding (see the file comment): head_dim features, head_dim/2 rotated
 * pairs with frequencies θ, pair j turning with coordinate `axis_of(j)`.
 */
template <real_scalar T>
class multi_axis_rope {
 public:
  using scalar = T;
  /// The rotation of one axis: θ on that axis's frequencies, 0 (identity) on the others.
  using axis_encoder = encoder<p::identity<T>, lambda::rotation<T>>;

  /**
   * @param head_dim  features per head (even).
   * @param theta     head_dim/2 frequencies (RoPE's base^(−2j/head_dim): `freq::rope(head_dim/2,
   *                  base, head_dim)`, or a scaled schedule).
   * @param sections  frequencies per axis (1 to 4 axes), summing to head_dim/2 (`mrope_section`).
   * @throws parameter_error (head_dim odd or < 2, θ's count, no or more than 4 axes, a section
   *         < 0, sections not summing to head_dim/2).
   */
  multi_axis_rope(index_t head_dim, std::vector<double> theta, std::vector<index_t> sections,
                  mrope_layout layout = mrope_layout::sections, pairing pairs = pairing::split_half)
      : d_(head_dim), theta_(std::move(theta)), sections_(std::move(sections)), layout_(layout) {
    constexpr const char* where = "lrpe::interop::multi_axis_rope";
    lrpe::detail::require_parameter(d_ >= 2 && d_ % 2 == 0, where, "head_dim", "must be even and >= 2", d_);
    lrpe::detail::require_size(static_cast<index_t>(theta_.size()), d_ / 2, where, "theta");
    const auto axes = static_cast<index_t>(sections_.size());
    lrpe::detail::require_parameter(axes >= 1 && axes <= 4, where, "sections.size()", "must be 1 to 4 (axes)", axes);
    for (const index_t s : sections_) lrpe::detail::require_parameter(s >= 0, where, "sections[a]", "must be >= 0", s);
    const index_t total = std::accumulate(sections_.begin(), sections_.end(), index_t{0});
    lrpe::detail::require_parameter(total == d_ / 2, where, "sections",
                                    lrpe::detail::lazy_concat("must sum to head_dim / 2 = ", d_ / 2), total);
    axis_.resize(static_cast<std::size_t>(d_ / 2));
    for (index_t j = 0; j < d_ / 2; ++j) axis_[static_cast<std::size_t>(j)] = compute_axis(j);
    for (index_t a = 0; a < axes; ++a) {
      std::vector<double> own(theta_.size(), 0.0);
      for (std::size_t j = 0; j < theta_.size(); ++j)
        if (axis_[j] == a) own[j] = theta_[j];
      encoders_.push_back(axis_encoder(p::identity<T>(d_), lambda::rotation<T>(d_, std::move(own), pairs)));
    }
  }

  /// RoPE's frequencies base^(−2j/head_dim) (Qwen2-VL: base 10⁶, sections [16, 24, 24]).
  multi_axis_rope(index_t head_dim, double base, std::vector<index_t> sections,
                  mrope_layout layout = mrope_layout::sections, pairing pairs = pairing::split_half)
      : multi_axis_rope(head_dim, rope_frequencies(head_dim, base), std::move(sections), layout, pairs) {}

  [[nodiscard]] index_t dim() const noexcept { return d_; }
  [[nodiscard]] index_t axes() const noexcept { return static_cast<index_t>(sections_.size()); }
  [[nodiscard]] const std::vector<double>& theta() const noexcept { return theta_; }
  [[nodiscard]] const std::vector<index_t>& sections() const noexcept { return sections_; }
  [[nodiscard]] mrope_layout layout() const noexcept { return layout_; }
  /// The axis whose coordinate turns frequency j.
  [[nodiscard]] index_t axis_of(index_t j) const { return axis_.at(static_cast<std::size_t>(j)); }
  /// Axis a's rotation (an `lrpe::encoder`: every backend and check takes it).
  [[nodiscard]] const axis_encoder& axis(index_t a) const { return encoders_.at(static_cast<std::size_t>(a)); }

  /**
   * out_i = M(pos_i) x_i for every row: the axes' rotations one after the other, each by
   * `lrpe::encode` on `backend` (the reference by default; `backend::simd<>` with <lrpe/simd.hpp>).
   * out may be x (in place).
   * @throws shape_error (x or out not rows × head_dim, pos not rows × axes()).
   */
  template <class Backend = backend::reference>
  void encode(matrix_view<const T> x, axis_positions pos, matrix_view<T> out, Backend backend = {}) const {
    constexpr const char* where = "lrpe::interop::multi_axis_rope::encode";
    validate(x, where, "x");
    validate(out, where, "out");
    lrpe::detail::require_equal(x.cols, d_, where, "x.cols", "head_dim");
    lrpe::detail::require_equal(out.rows, x.rows, where, "out.rows", "x.rows");
    lrpe::detail::require_equal(out.cols, d_, where, "out.cols", "head_dim");
    lrpe::detail::require_equal(pos.axes, axes(), where, "pos.axes", "axes()");
    lrpe::detail::require_shape(static_cast<index_t>(pos.data.size()) == x.rows * axes(), where, "pos.data.size()",
                                lrpe::detail::lazy_concat("must be x.rows * axes() = ", x.rows * axes()),
                                pos.data.size());
    // x is copied first (out may be x), then each axis encodes one buffer into the other
    std::vector<position_t> coordinate(static_cast<std::size_t>(x.rows));
    row_matrix<T> from(x.rows, d_), next(axes() > 1 ? x.rows : 0, d_);
    for (index_t i = 0; i < x.rows; ++i)
      for (index_t c = 0; c < d_; ++c) from(i, c) = x.row(i)[c];
    for (index_t a = 0; a < axes(); ++a) {
      for (index_t i = 0; i < x.rows; ++i) coordinate[static_cast<std::size_t>(i)] = pos(i, a);
      const matrix_view<T> to = a + 1 == axes() ? out : view(next);
      lrpe::encode(backend, axis(a), matrix_view<const T>(view(from)), positions(std::span<const position_t>(coordinate)),
                   to);
      if (a + 1 < axes()) from.swap(next);
    }
  }

  /// M(s) as a dense head_dim × head_dim matrix (s: axes() coordinates).
  [[nodiscard]] dense_matrix<T> transform_matrix(std::span<const position_t> s) const {
    return product(s, [](const axis_encoder& e, position_t c) { return dense_matrix<T>(e.transform_matrix(c)); });
  }

  /// W(δ) = M(0)ᵀ M(δ) as a dense matrix, δ the coordinate differences (axes() of them).
  [[nodiscard]] dense_matrix<T> relative_matrix(std::span<const position_t> delta) const {
    return product(delta, [](const axis_encoder& e, position_t c) { return dense_matrix<T>(e.relative_matrix(c)); });
  }

 private:
  static std::vector<double> rope_frequencies(index_t head_dim, double base) {
    lrpe::detail::require_parameter(head_dim >= 2 && head_dim % 2 == 0, "lrpe::interop::multi_axis_rope", "head_dim",
                                    "must be even and >= 2", head_dim);
    return freq::rope(head_dim / 2, base, head_dim);
  }

  [[nodiscard]] index_t compute_axis(index_t j) const {
    if (layout_ == mrope_layout::sections) {
      index_t end = 0;
      for (index_t a = 0; a < axes(); ++a) {
        end += sections_[static_cast<std::size_t>(a)];
        if (j < end) return a;
      }
      return axes() - 1;
    }
    // interleaved: frequency j belongs to axis j mod A while that axis's run (A·section[a]) lasts
    const index_t a = j % axes();
    return a > 0 && j < axes() * sections_[static_cast<std::size_t>(a)] ? a : 0;
  }

  template <class F>
  dense_matrix<T> product(std::span<const position_t> s, const F& of) const {
    lrpe::detail::require_size(static_cast<index_t>(s.size()), axes(), "lrpe::interop::multi_axis_rope", "coordinates");
    dense_matrix<T> m = dense_matrix<T>::Identity(d_, d_);
    for (index_t a = 0; a < axes(); ++a) m = (of(axis(a), s[static_cast<std::size_t>(a)]) * m).eval();
    return m;
  }

  index_t d_;
  std::vector<double> theta_;
  std::vector<index_t> sections_;
  mrope_layout layout_;
  std::vector<index_t> axis_;
  std::vector<axis_encoder> encoders_;
};

/// How 2-D vision RoPE shares RoPE's frequencies between the height and width axes.
enum class vision_frequencies {
  /// Both axes take base^(−2i/(head_dim/2)), i < head_dim/4: HF's "axial" rope of the Qwen2-VL,
  /// Qwen2.5-VL, Qwen3-VL and GLM-4V vision towers (`VisionRotaryEmbedding`).
  repeated,
  /// RoPE's head_dim/2 frequencies base^(−2j/head_dim), the even j to height and the odd j to
  /// width: Pixtral's vision encoder (`PixtralVisionRotaryEmbedding`).
  alternating,
};

/**
 * 2-D RoPE over a vision tower's patches: a `multi_axis_rope` with two axes (height, width),
 * head_dim/4 frequencies each, laid out as HF's vision rotary modules lay them (height's then
 * width's, for rotate_half's halves). Positions are the patches' (h, w) (`vision_position_ids`).
 * @throws parameter_error (head_dim not a multiple of 4, or < 4; base ≤ 1).
 */
template <real_scalar T>
multi_axis_rope<T> vision_rope_2d(index_t head_dim, double base, vision_frequencies frequencies,
                                  pairing pairs = pairing::split_half) {
  lrpe::detail::require_parameter(head_dim >= 4 && head_dim % 4 == 0, "lrpe::interop::vision_rope_2d", "head_dim",
                                  "must be a multiple of 4 (head_dim/4 frequencies per axis)", head_dim);
  const index_t quarter = head_dim / 4;
  std::vector<double> theta;
  if (frequencies == vision_frequencies::repeated) {
    theta = freq::rope(quarter, base, head_dim / 2);
    theta.insert(theta.end(), theta.begin(), theta.end());
  } else {
    const std::vector<double> all = freq::rope(head_dim / 2, base, head_dim);
    for (const int parity : {0, 1})
      for (index_t i = 0; i < quarter; ++i) theta.push_back(all[static_cast<std::size_t>(2 * i + parity)]);
  }
  return multi_axis_rope<T>(head_dim, std::move(theta), {quarter, quarter}, mrope_layout::sections, pairs);
}

/// One image (or video) of a vision tower's input: its patch grid, HF's `grid_thw` row.
struct vision_grid {
  index_t t = 1, h = 0, w = 0;
};

/**
 * The (h, w) coordinates of a vision tower's patches, in the order the tower sees them, as
 * transformers 5.24's `get_vision_position_ids` gives them: per image, the h × w grid in
 * spatial_merge_size × spatial_merge_size blocks, block-major (row-major blocks, each row-major
 * inside), repeated for each of its t frames. spatial_merge_size = 1 is the plain row-major
 * grid (Pixtral).
 * @returns rows × 2 coordinates, row-major (`axis_positions{ids, 2}`).
 * @throws parameter_error (spatial_merge_size < 1, t < 1, h or w < 1 or not a multiple of
 *         spatial_merge_size).
 */
inline std::vector<position_t> vision_position_ids(std::span<const vision_grid> grids, index_t spatial_merge_size = 1) {
  constexpr const char* where = "lrpe::interop::vision_position_ids";
  const index_t m = spatial_merge_size;
  lrpe::detail::require_parameter(m >= 1, where, "spatial_merge_size", "must be >= 1", m);
  std::vector<position_t> ids;
  for (const vision_grid& g : grids) {
    lrpe::detail::require_parameter(g.t >= 1 && g.h >= 1 && g.w >= 1 && g.h % m == 0 && g.w % m == 0, where,
                                    "grids[i]", "must have t >= 1 and h, w positive multiples of spatial_merge_size",
                                    lrpe::detail::lazy_concat(g.t, "x", g.h, "x", g.w));
    for (index_t frame = 0; frame < g.t; ++frame)
      for (index_t bh = 0; bh < g.h / m; ++bh)
        for (index_t bw = 0; bw < g.w / m; ++bw)
          for (index_t ih = 0; ih < m; ++ih)
            for (index_t iw = 0; iw < m; ++iw) ids.insert(ids.end(), {bh * m + ih, bw * m + iw});
  }
  return ids;
}

/// One run of a multimodal sequence: text tokens, or an image's or a video's patch grid.
struct mrope_segment {
  enum class kind { text, image, video };
  kind type = kind::text;
  index_t tokens = 0;  ///< text: the run's length
  index_t grid_t = 1, grid_h = 0, grid_w = 0;  ///< image, video: HF's `image_grid_thw` / `video_grid_thw` row (patches)
  /// video: the temporal spacing, as HF forms it in float32 for Qwen2.5-VL
  /// (float(tokens_per_second · float(second_per_grid_t))); 1 otherwise
  double time_interval = 1.0;
};

/**
 * The (t, h, w) rotary coordinates of a text + image + video sequence, as Qwen2-VL's and
 * Qwen2.5-VL's `get_rope_index` gives them in transformers 5.24: a text run counts on from the
 * current position p on every axis (p, p + 1, …); a vision block of llm grid (T, H/m, W/m) (m
 * = spatial_merge_size) gives its tokens, time-major then row-major, (p + ⌊t·interval⌋, p + h,
 * p + w) (the product t·interval in float32, as HF forms it), and then p advances by
 * ⌊max(H, W)/m⌋. (Earlier transformers advanced p to the block's
 * largest coordinate + 1, which differs after a video whose scaled time runs past its height and
 * width.) Images take interval 1.
 * @returns rows × 3 coordinates, row-major (`axis_positions{ids, 3}`); rows = the text tokens
 *          plus T·⌊H/m⌋·⌊W/m⌋ per block.
 * @throws parameter_error (a negative text length, a vision grid with T < 1 or H/m, W/m < 1, a
 *         time interval that is negative or not finite, spatial_merge_size < 1).
 */
inline std::vector<position_t> mrope_position_ids(std::span<const mrope_segment> segments,
                                                  index_t spatial_merge_size = 2, position_t start = 0) {
  constexpr const char* where = "lrpe::interop::mrope_position_ids";
  lrpe::detail::require_parameter(spatial_merge_size >= 1, where, "spatial_merge_size", "must be >= 1",
                                  spatial_merge_size);
  std::vector<position_t> ids;
  position_t p = start;
  for (const mrope_segment& seg : segments) {
    if (seg.type == mrope_segment::kind::text) {
      lrpe::detail::require_parameter(seg.tokens >= 0, where, "segments[i].tokens", "must be >= 0", seg.tokens);
      for (index_t i = 0; i < seg.tokens; ++i) ids.insert(ids.end(), {p + i, p + i, p + i});
      p += seg.tokens;
      continue;
    }
    const index_t gt = seg.grid_t, gh = seg.grid_h / spatial_merge_size, gw = seg.grid_w / spatial_merge_size;
    lrpe::detail::require_parameter(gt >= 1 && gh >= 1 && gw >= 1, where, "segments[i].grid_thw",
                                    "must give T >= 1 and H, W >= spatial_merge_size",
                                    lrpe::detail::lazy_concat(seg.grid_t, "x", seg.grid_h, "x", seg.grid_w));
    const double interval = seg.type == mrope_segment::kind::video ? seg.time_interval : 1.0;
    lrpe::detail::require_parameter(std::isfinite(interval) && interval >= 0, where, "segments[i].time_interval",
                                    "must be finite and >= 0", interval);
    for (index_t t = 0; t < gt; ++t) {
      // HF's float32 product, then .long() (truncation): in double, t·interval may round to the
      // other side of an integer (2/3 · 75 is 49.99…) and the coordinate differ by one
      const auto time = p + static_cast<position_t>(static_cast<float>(t) * static_cast<float>(interval));
      for (index_t h = 0; h < gh; ++h)
        for (index_t w = 0; w < gw; ++w) ids.insert(ids.end(), {time, p + h, p + w});
    }
    p += std::max(seg.grid_h, seg.grid_w) / spatial_merge_size;
  }
  return ids;
}

}  // namespace interop

namespace check {

/**
 * The multi-axis relative property: W(s)ᵀ W(t) = W(t − s) coordinate by coordinate, in long
 * double from each axis's own W, and M(s) = W(s) (identity P) applied by `encode` to the unit
 * vectors at s and at t.
 * @param s, t  axes() coordinates each.
 * @param tol   negative: `default_tolerance` of the axes' encoders.
 */
template <class T>
report relative(const interop::multi_axis_rope<T>& e, std::span<const position_t> s, std::span<const position_t> t,
                double tol = -1) {
  constexpr const char* where = "lrpe::check::relative (multi-axis)";
  lrpe::detail::require_size(static_cast<index_t>(s.size()), e.axes(), where, "s");
  lrpe::detail::require_size(static_cast<index_t>(t.size()), e.axes(), where, "t");
  report r{"W(s)^T W(t) = W(t-s) on every axis, and encode = M(s)", true, 0,
           detail::resolve(tol, default_tolerance(e.axis(0)), where)};
  std::vector<position_t> delta(s.size());
  for (std::size_t a = 0; a < s.size(); ++a)
    delta[a] = ::lrpe::detail::checked_offset(s[a], t[a], where);
  using L = detail::ld_t<T>;
  const auto ld_of = [](const dense_matrix<T>& m) { return m.template cast<L>().eval(); };
  const auto ws = ld_of(e.relative_matrix(s)), wt = ld_of(e.relative_matrix(t));
  detail::fold_max(r, (ws.transpose() * wt - ld_of(e.relative_matrix(delta))).eval(), s.empty() ? 0 : s[0],
                   t.empty() ? 0 : t[0]);
  // encode applies M at the rows' coordinates: rows of the identity give M(s)ᵀ's rows
  const index_t d = e.dim();
  const row_matrix<T> eye = row_matrix<T>::Identity(d, d);
  for (const auto& at : {s, t}) {
    std::vector<position_t> rows(static_cast<std::size_t>(d) * at.size());
    for (index_t i = 0; i < d; ++i)
      for (std::size_t a = 0; a < at.size(); ++a) rows[static_cast<std::size_t>(i) * at.size() + a] = at[a];
    row_matrix<T> out(d, d);
    e.encode(view(eye), interop::axis_positions{rows, e.axes()}, view(out));
    const dense_matrix<T> m = e.transform_matrix(at);
    detail::fold_max(r, (out.transpose().template cast<L>() - m.template cast<L>()).eval(), s.empty() ? 0 : s[0],
                     t.empty() ? 0 : t[0]);
  }
  r.passed = r.max_error <= r.tolerance;
  return r;
}

}  // namespace check
}  // namespace v0
}  // namespace lrpe
