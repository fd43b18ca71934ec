// SPDX-License-Identifier: MIT
// A `backend::simd_lambda_kernel` specialisation that opts in but lacks `fill`: a compile error
// naming the extension point, not a failure deep inside the SIMD encoder.
// expect-error: simd_lambda_kernel<Arch, L> is specialised for this
#include <lrpe/simd.hpp>

#include <vector>

struct flips {
  using scalar = float;
  static constexpr bool is_complex = false;
  lrpe::index_t d;
  lrpe::index_t dim() const { return d; }
  template <class V>
  void apply(lrpe::position_t s, const V* x, V* y) const {
    for (lrpe::index_t j = 0; j < d; ++j) y[j] = s % 2 != 0 ? -x[j] : x[j];
  }
  lrpe::dense_matrix<float> matrix(lrpe::position_t s) const {
    return lrpe::dense_matrix<float>::Identity(d, d) * (s % 2 != 0 ? -1.0f : 1.0f);
  }
};

template <class Arch>
struct lrpe::backend::simd_lambda_kernel<Arch, flips> {
  static constexpr bool vectorised = true;
  static constexpr bool is_identity = false;
  using entry = float;
  explicit simd_lambda_kernel(const flips&) {}
  lrpe::index_t table_width() const { return 1; }
  lrpe::index_t angle_count() const { return 0; }
  bool stream_layout_ok() const { return false; }
  template <bool Stream>
  void apply(const float*, const float*, float*) const {}
  // no fill(position, entry*, double*, double*)
};

void misuse() {
  const lrpe::encoder enc(lrpe::p::identity<float>(4), flips{4});
  lrpe::row_matrix<float> x(3, 4), out(3, 4);
  lrpe::encode(lrpe::backend::simd<>{}, enc, lrpe::view(x), lrpe::positions(0), lrpe::view(out));
}
