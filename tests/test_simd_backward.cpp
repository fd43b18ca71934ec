// SPDX-License-Identifier: MIT
// The backward on the SIMD backend == the reference backend: encode_backward and
// encode_qk_backward (RoPE in both pairings and permutation powers on the SIMD kernels of the
// transposed encoder, every int64 position; the fallbacks: dx = x, other encoders), and the attention backwards (which run the
// reference kernels on SIMD-encoded features). Tolerances: simd_attention_helpers.hpp.
#include "simd_attention_helpers.hpp"

#include <limits>
#include <vector>

using namespace simd_attention_test;

namespace {

/// max |a − b| / (1 + max |b|) of two parameter gradients.
double vec_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return err / (1 + scale);
}

/// The size of θ's gradient's terms, Σ_i |s_i|·‖x_i‖·‖g_i‖: dL/dθ sums s·(x_i·dx_j − x_j·dx_i)
/// over rows, so two kernels whose dx agree to a relative δ agree on it to about δ times this
/// (the sum itself may cancel far below it).
template <class T>
double theta_terms(const rm<T>& x, const rm<T>& g, const lrpe::positions& pos) {
  double sum = 0;
  for (lrpe::index_t i = 0; i < x.rows(); ++i)
    sum += std::abs(static_cast<double>(pos[i])) * static_cast<double>(x.row(i).norm()) * static_cast<double>(g.row(i).norm());
  return sum;
}

template <class T, class E>
void backward_both(const E& enc, lrpe::index_t n, lrpe::positions pos, std::uint64_t seed) {
  lrpe::generator g(seed);
  const rm<T> x = random_matrix<T>(g, n, enc.dim()), d_out = random_matrix<T>(g, n, enc.feature_dim());
  rm<T> dx_ref(n, enc.dim()), dx(n, enc.dim());
  auto g_ref = enc.make_gradient(), g_simd = enc.make_gradient();
  lrpe::encode_backward(lrpe::backend::reference{}, enc, lrpe::view(x), pos, lrpe::view(d_out), lrpe::view(dx_ref),
                        &g_ref);
  lrpe::encode_backward(lrpe::backend::simd<>{}, enc, lrpe::view(x), pos, lrpe::view(d_out), lrpe::view(dx), &g_simd);
  CHECK(diff(dx, dx_ref) <= kernel_vs_kernel<T>());
  for (std::size_t j = 0; j < g_ref.lambda.size(); ++j)
    CHECK(std::abs(g_simd.lambda[j] - g_ref.lambda[j]) <= kernel_vs_kernel<T>() * (1 + theta_terms(x, d_out, pos)));
  CHECK(g_simd.p == g_ref.p);
  // dx = x in place: the fallback, the same result
  rm<T> inplace = x;
  lrpe::encode_backward(lrpe::backend::simd<>{}, enc, lrpe::view(std::as_const(inplace)), pos, lrpe::view(d_out),
                        lrpe::view(inplace));
  CHECK(diff(inplace, dx_ref) <= kernel_vs_kernel<T>());
}

}  // namespace

static_assert(lrpe::backend::simd_detail::simd_backward_v<lrpe::encoder<lrpe::p::identity<float>, lrpe::lambda::rotation<float>>>,
              "RoPE's backward runs on the SIMD kernels");

TEST_CASE_TEMPLATE("simd encode_backward == reference: RoPE, permutation powers, fallbacks", T, float, double) {
  const std::vector<position_t> far{-7, 0, 3, 1'000'003, -3'000'000'000LL, 2, 2, 9};
  const std::vector<position_t> extreme{std::numeric_limits<position_t>::min(), 5, std::numeric_limits<position_t>::max()};
  for (lrpe::index_t d : {8, 64, 13}) {
    CAPTURE(d);
    const lrpe::rope_gptj<T> gptj(d);
    const lrpe::rope_neox<T> neox(d);
    const lrpe::permuteformer<T> perm(d);
    const lrpe::type3<T> type3(d);  // not a SIMD backward: encoder::backward
    for (lrpe::index_t n : {1, 70, 200}) {
      CAPTURE(n);
      backward_both<T>(gptj, n, lrpe::positions(-5), 11);
      backward_both<T>(neox, n, lrpe::positions(100000), 12);
      backward_both<T>(perm, n, lrpe::positions(3), 13);
      backward_both<T>(type3, n, lrpe::positions(0), 14);
    }
    backward_both<T>(gptj, 8, far, 15);
    backward_both<T>(neox, 3, extreme, 16);  // ±2^63: Λ⁽ˢ⁾ᵀ without forming −s
    backward_both<T>(perm, 3, extreme, 17);
  }
}

TEST_CASE_TEMPLATE("simd encode_qk_backward == reference (every head a block of positions at a time)", T, float,
                   double) {
  const lrpe::rope_neox<T> enc(16);
  const lrpe::index_t B = 2, H = 3, nq = 9, nk = 150, d = 16;  // blocks of 64 rows; Q's end first
  lrpe::generator g(21);
  const rm<T> q = random_matrix<T>(g, B * H * nq, d), k = random_matrix<T>(g, B * H * nk, d);
  const rm<T> gq = random_matrix<T>(g, B * H * nq, d), gk = random_matrix<T>(g, B * H * nk, d);
  rm<T> dq1(B * H * nq, d), dk1(B * H * nk, d), dq2(B * H * nq, d), dk2(B * H * nk, d);
  auto g1 = enc.make_gradient(), g2 = enc.make_gradient();
  const auto heads = [&](const rm<T>& m, lrpe::index_t n) { return lrpe::bnsh(m.data(), B, H, n, d); };
  lrpe::encode_qk_backward(lrpe::backend::reference{}, enc, heads(q, nq), 4, heads(k, nk), 0, heads(gq, nq), heads(gk, nk),
                           lrpe::bnsh(dq1.data(), B, H, nq, d), lrpe::bnsh(dk1.data(), B, H, nk, d), &g1);
  lrpe::encode_qk_backward(lrpe::backend::simd<>{}, enc, heads(q, nq), 4, heads(k, nk), 0, heads(gq, nq), heads(gk, nk),
                           lrpe::bnsh(dq2.data(), B, H, nq, d), lrpe::bnsh(dk2.data(), B, H, nk, d), &g2);
  CHECK(diff(dq2, dq1) <= kernel_vs_kernel<T>());
  CHECK(diff(dk2, dk1) <= kernel_vs_kernel<T>());
  CHECK(vec_diff(g2.lambda, g1.lambda) <= kernel_vs_kernel<T>());
}

TEST_CASE_TEMPLATE("softmax and linear attention backward on the SIMD backend == reference", T, float, double) {
  const lrpe::index_t n = 40, d = 16, dv = 8;
  lrpe::generator g(31);
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, dv);
  const rm<T> d_out = random_matrix<T>(g, n, dv);
  const lrpe::type2<T> enc(d);
  lrpe::softmax_options<> so;
  so.causal = true;
  rm<T> out(n, dv), dq1(n, d), dk1(n, d), dv1(n, dv), dq2(n, d), dk2(n, d), dv2(n, dv);
  lrpe::softmax_attention(q, k, v, out, enc, so);
  auto g1 = enc.make_gradient(), g2 = enc.make_gradient();
  lrpe::softmax_attention_backward(q, k, v, out, d_out, {}, dq1, dk1, dv1, enc, so, &g1);
  lrpe::softmax_attention_backward(q, k, v, out, d_out, {}, dq2, dk2, dv2, enc, so, &g2, lrpe::backend::simd<>{});
  CHECK(diff(dq2, dq1) <= kernel_vs_kernel<T>());
  CHECK(diff(dk2, dk1) <= kernel_vs_kernel<T>());
  CHECK(diff(dv2, dv1) <= kernel_vs_kernel<T>());
  CHECK(vec_diff(g2.lambda, g1.lambda) <= kernel_vs_kernel<T>());

  lrpe::linear_options lo;
  lo.causal = true;
  lo.decay = 0.9;
  const lrpe::feature_maps::elu_plus_one phi;
  auto g3 = enc.make_gradient(), g4 = enc.make_gradient();
  lrpe::linear_attention_backward(q, k, v, d_out, dq1, dk1, dv1, enc, phi, lo, &g3);
  lrpe::linear_attention_backward(q, k, v, d_out, dq2, dk2, dv2, enc, phi, lo, &g4, lrpe::backend::simd<>{});
  CHECK(diff(dq2, dq1) <= kernel_vs_kernel<T>());
  CHECK(diff(dk2, dk1) <= kernel_vs_kernel<T>());
  CHECK(diff(dv2, dv1) <= kernel_vs_kernel<T>());
  CHECK(vec_diff(g4.lambda, g3.lambda) <= kernel_vs_kernel<T>());
}
