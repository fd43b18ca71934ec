// SPDX-License-Identifier: MIT
// The SIMD backend's extension point for a user Λ (`backend::simd_lambda_kernel`,
// lambda_kernel.hpp): a specialisation moves every encoder with that Λ to the vectorised path,
// its kernel is what runs (counted), and the rows, softmax and linear attention agree with the
// reference backend, which never uses a kernel. The user Λ here is exact in floating point, so
// with P = I the SIMD rows must equal the reference rows bit for bit.
#include "simd_attention_helpers.hpp"

namespace {

/// Λ⁽ˢ⁾ = diag(σ_j^s), σ_j ∈ {+1, −1}: unitary, and relative because σ_j² = 1.
template <class T>
struct parity_signs {
  using scalar = T;
  static constexpr bool is_complex = false;

  std::vector<int> sigma;

  [[nodiscard]] lrpe::index_t dim() const { return static_cast<lrpe::index_t>(sigma.size()); }
  [[nodiscard]] bool flips(lrpe::position_t s, lrpe::index_t j) const {
    return s % 2 != 0 && sigma[static_cast<std::size_t>(j)] < 0;
  }
  template <class V>
  void apply(lrpe::position_t s, const V* x, V* y) const {
    for (lrpe::index_t j = 0; j < dim(); ++j) y[j] = flips(s, j) ? -x[j] : x[j];
  }
  [[nodiscard]] lrpe::dense_matrix<T> matrix(lrpe::position_t s) const {
    lrpe::dense_matrix<T> m = lrpe::dense_matrix<T>::Zero(dim(), dim());
    for (lrpe::index_t j = 0; j < dim(); ++j) m(j, j) = flips(s, j) ? T(-1) : T(1);
    return m;
  }
};

/// The same Λ under another name, with no kernel: the control that takes the reference path.
template <class T>
struct parity_signs_plain : parity_signs<T> {};

/// Rows the user kernel has encoded (its `apply` calls), over every thread.
std::atomic<long> kernel_rows{0};

}  // namespace

template <class Arch, class T>
struct lrpe::backend::simd_lambda_kernel<Arch, parity_signs<T>> {
  static constexpr bool vectorised = true;
  static constexpr bool is_identity = false;
  using entry = T;
  using batch = xsimd::batch<T, Arch>;

  explicit simd_lambda_kernel(const parity_signs<T>& l) : lambda(&l) {}

  [[nodiscard]] lrpe::index_t table_width() const { return lambda->dim(); }
  [[nodiscard]] lrpe::index_t angle_count() const { return 0; }
  [[nodiscard]] bool stream_layout_ok() const { return false; }

  void fill(lrpe::position_t s, T* row, double*, double*) const {
    for (lrpe::index_t j = 0; j < lambda->dim(); ++j) row[j] = lambda->flips(s, j) ? T(-1) : T(1);
  }
  template <bool Stream>
  void apply(const T* row, const T* x, T* y) const {
    kernel_rows.fetch_add(1, std::memory_order_relaxed);
    const lrpe::index_t d = lambda->dim(), w = static_cast<lrpe::index_t>(batch::size);
    lrpe::index_t j = 0;
    for (; j + w <= d; j += w) (batch::load_unaligned(x + j) * batch::load_unaligned(row + j)).store_unaligned(y + j);
    for (; j < d; ++j) y[j] = x[j] * row[j];
  }

  const parity_signs<T>* lambda;
};

namespace {

using namespace simd_attention_test;

template <class T>
parity_signs<T> random_signs(lrpe::generator& g, index_t d) {
  parity_signs<T> l;
  for (index_t j = 0; j < d; ++j) l.sigma.push_back(g.below(2) == 0 ? 1 : -1);
  return l;
}

template <class T>
lrpe::p::householder<T> random_reflector(lrpe::generator& g, index_t d) {
  std::vector<T> v(static_cast<std::size_t>(d));
  for (auto& e : v) e = static_cast<T>(g.normal());
  return lrpe::p::householder<T>(v);
}

template <class E>
rm<typename E::scalar> encode_on(const auto& backend, const E& enc, const rm<typename E::scalar>& x,
                                 lrpe::positions pos) {
  rm<typename E::scalar> out(x.rows(), enc.feature_dim());
  lrpe::encode(backend, enc, lrpe::view(x), pos, lrpe::view(out));
  return out;
}

using id_float = lrpe::encoder<lrpe::p::identity<float>, parity_signs<float>>;
using hh_double = lrpe::encoder<lrpe::p::householder<double>, parity_signs<double>>;
using plain_float = lrpe::encoder<lrpe::p::identity<float>, parity_signs_plain<float>>;
static_assert(lrpe::simd_encoder<id_float>::path == lrpe::simd_path::vectorised);
static_assert(lrpe::simd_encoder<hh_double>::path == lrpe::simd_path::vectorised);
static_assert(lrpe::simd_encoder<plain_float>::path == lrpe::simd_path::reference);
static_assert(lrpe::backend::simd_lambda_kernel_for<lrpe::backend::simd_lambda_kernel<xsimd::default_arch, parity_signs<float>>,
                                                    parity_signs<float>>);

TEST_CASE_TEMPLATE("a user Λ kernel encodes rows as the reference backend does", T, float, double) {
  lrpe::generator g(0x5eed);
  for (const index_t d : {1, 3, 8, 17, 64, 100}) {
    CAPTURE(d);
    const auto signs = random_signs<T>(g, d);
    const lrpe::encoder id_enc(lrpe::p::identity<T>(d), signs);
    const lrpe::encoder hh_enc(random_reflector<T>(g, d), signs);
    for (const index_t n : {1, 5, 300}) {
      CAPTURE(n);
      const rm<T> x = random_matrix<T>(g, n, d);
      std::vector<position_t> at(static_cast<std::size_t>(n));
      for (auto& p : at) p = static_cast<position_t>(g.below(2001)) - 1000;  // odd and even, negative too
      for (const lrpe::positions pos : {lrpe::positions(-1'000'001), lrpe::positions(at)}) {
        const long before = kernel_rows.load();
        const rm<T> simd_id = encode_on(lrpe::backend::simd<>{}, id_enc, x, pos);
        CHECK(kernel_rows.load() - before == n);  // the user's kernel ran, once per row
        const long after = kernel_rows.load();
        const rm<T> ref_id = encode_on(lrpe::backend::reference{}, id_enc, x, pos);
        CHECK(kernel_rows.load() == after);  // the reference backend never uses it
        CHECK(simd_id == ref_id);            // ±x: exact on both paths

        const rm<T> simd_hh = encode_on(lrpe::backend::simd<>{}, hh_enc, x, pos);
        const rm<T> ref_hh = encode_on(lrpe::backend::reference{}, hh_enc, x, pos);
        CHECK(diff(simd_hh, ref_hh) <= kernel_vs_kernel<T>());
      }
    }
  }
}

TEST_CASE_TEMPLATE("attention with a user Λ kernel agrees with the reference backend", T, float, double) {
  lrpe::generator g(0xa77e);
  for (const shape& s : shapes(0xa77e, 8)) {
    SHAPE_INFO(s);
    const lrpe::encoder enc(random_reflector<T>(g, s.d), random_signs<T>(g, s.d));
    const rm<T> q = random_matrix<T>(g, s.nq, s.d), k = random_matrix<T>(g, s.nk, s.d),
                v = random_matrix<T>(g, s.nk, s.dv);
    rm<T> o_simd(s.nq, s.dv), o_ref(s.nq, s.dv);

    const lrpe::softmax_options<> so{.causal = s.causal, .q_positions = s.q_offset, .k_positions = s.k_offset};
    const long before = kernel_rows.load();
    lrpe::softmax_attention(q, k, v, o_simd, enc, so, lrpe::backend::simd<>{});
    // (a call of fewer rows than simd_encoder_min_rows encodes them by the policy's own apply)
    if (std::max(s.nq, s.nk) >= lrpe::backend::simd_detail::simd_encoder_min_rows) CHECK(kernel_rows.load() > before);
    lrpe::softmax_attention(q, k, v, o_ref, enc, so, lrpe::backend::reference{});
    CHECK(diff(o_simd, o_ref) <= kernel_vs_kernel<T>());

    // linear attention: keys at or before their queries when causal
    const lrpe::linear_options lo{.causal = s.causal, .norm = lrpe::normalisation::denominator,
                                  .q_positions = s.q_offset + s.nk, .k_positions = s.k_offset};
    lrpe::linear_attention(q, k, v, o_simd, enc, lrpe::feature_maps::elu_plus_one{}, lo, lrpe::backend::simd<>{});
    lrpe::linear_attention(q, k, v, o_ref, enc, lrpe::feature_maps::elu_plus_one{}, lo, lrpe::backend::reference{});
    CHECK(diff(o_simd, o_ref) <= kernel_vs_kernel<T>());
  }
}

}  // namespace
