// SPDX-License-Identifier: MIT
// 16-bit storage (lrpe::half, lrpe::bfloat16) in softmax attention, on the reference and SIMD
// backends. Widening is exact, so a call on 16-bit K and V must equal, bit for bit, the same
// backend's float call on the widened values (the test widens with Eigen's casts, not the
// library's): the direct kernel (decode), the tiled kernel, split-KV on a pool, multi-head GQA,
// encoders and biases, the options, stored NaN/∞. Q and out in 16 bits: widened, and rounded
// once. Against the unrounded inputs: the stated error bound, checked with a long-double loop.
#include "attention_helpers.hpp"

#include <lrpe/simd.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace {

using attention_test::ld;
using attention_test::random_matrix;
using attention_test::rm;
using lrpe::index_t;
using lrpe::position_t;

/// Bitwise equality of two float matrices (NaN equal to NaN).
bool same_bits(const rm<float>& a, const rm<float>& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (index_t i = 0; i < a.size(); ++i) {
    const float x = a.data()[i], y = b.data()[i];
    if (!(x == y || (std::isnan(x) && std::isnan(y)))) return false;
  }
  return true;
}

template <class S>
rm<float> widened(const rm<S>& x) {
  return x.template cast<float>();
}

struct options_case {
  const char* name;
  bool causal;
  position_t window;
  double softcap;
  double sink;
};

const options_case option_cases[] = {
    {"plain", false, 0, 0, -std::numeric_limits<double>::infinity()},
    {"causal", true, 0, 0, -std::numeric_limits<double>::infinity()},
    {"causal window 40, softcap 5, sink 0.5", true, 40, 5.0, 0.5},
};

/// softmax_attention on (q, k, v) stored as S, against the same backend on the widened values.
template <class S, class Enc, class Backend>
void check_same_as_widened(const Enc& enc, index_t nq, index_t nk, index_t d, index_t dv, const options_case& oc,
                           std::uint64_t seed, Backend backend) {
  lrpe::generator g(seed);
  const rm<float> q = random_matrix<float>(g, nq, d);
  const rm<S> k = random_matrix<float>(g, nk, d).template cast<S>(), v = random_matrix<float>(g, nk, dv).template cast<S>();
  lrpe::softmax_options<> o;
  o.causal = oc.causal;
  o.window = oc.window;
  o.softcap = oc.softcap;
  o.sink = oc.sink;
  o.q_positions = nk - nq;
  rm<float> got(nq, dv), want(nq, dv);
  std::vector<float> lse_got(static_cast<std::size_t>(nq)), lse_want(static_cast<std::size_t>(nq));
  lrpe::softmax_attention_lse(q, k, v, got, std::span<float>(lse_got), enc, o, backend);
  lrpe::softmax_attention_lse(q, widened(k), widened(v), want, std::span<float>(lse_want), enc, o, backend);
  CAPTURE(oc.name);
  CAPTURE(nq);
  CAPTURE(nk);
  CAPTURE(d);
  CAPTURE(dv);
  CHECK(same_bits(got, want));
  for (std::size_t i = 0; i < lse_got.size(); ++i) CHECK(lse_got[i] == lse_want[i]);
}

template <class S>
void same_as_widened_everywhere() {
  const lrpe::backend::simd<> simd;
  const lrpe::backend::reference ref;
  std::uint64_t seed = 1;
  for (const auto& oc : option_cases) {
    // direct kernel rows (decode, short blocks) and tiled query blocks; widths that are and are
    // not a whole number of vectors
    for (const index_t nq : {1, 3, 4, 9, 70})
      for (const index_t nk : {0, 1, 50, 300})
        for (const auto& [d, dv] : {std::pair<index_t, index_t>{8, 8}, {37, 5}, {64, 64}, {128, 40}}) {
          if (nq > nk && oc.causal && nk > 0) continue;
          check_same_as_widened<S>(lrpe::no_encoding{}, nq, nk, d, dv, oc, ++seed, simd);
        }
    check_same_as_widened<S>(lrpe::canonical::alibi<float>::for_heads(64, 8), 5, 200, 64, 64, oc, ++seed, simd);
    check_same_as_widened<S>(lrpe::canonical::alibi<float>::for_heads(64, 8), 80, 200, 64, 64, oc, ++seed, simd);
    check_same_as_widened<S>(lrpe::rope_neox<float>(64), 2, 150, 64, 48, oc, ++seed, simd);
    check_same_as_widened<S>(lrpe::rope_neox<float>(64), 90, 150, 64, 48, oc, ++seed, simd);
    // the reference widens K and V itself: the same bits as its float call
    check_same_as_widened<S>(lrpe::no_encoding{}, 7, 90, 24, 16, oc, ++seed, ref);
    check_same_as_widened<S>(lrpe::rope_gptj<float>(24), 7, 90, 24, 16, oc, ++seed, ref);
  }
}

TEST_CASE("16-bit K and V: the same bits as the float call on the widened values (SIMD and reference)") {
  SUBCASE("bfloat16") { same_as_widened_everywhere<lrpe::bfloat16>(); }
  SUBCASE("half") { same_as_widened_everywhere<lrpe::half>(); }
}

TEST_CASE("16-bit K and V: split-KV decode on a pool, and an encoding the SIMD kernel does not read (Shaw)") {
  lrpe::backend::simd_threads pool(2);
  const lrpe::backend::simd_policy<> on_pool{&pool};
  for (const auto& oc : option_cases) {
    check_same_as_widened<lrpe::bfloat16>(lrpe::no_encoding{}, 1, 3000, 64, 64, oc, 7, on_pool);
    check_same_as_widened<lrpe::half>(lrpe::no_encoding{}, 2, 2600, 128, 128, oc, 8, on_pool);
  }
  lrpe::generator g(3);
  const lrpe::canonical::shaw<float> shaw(16, 4, random_matrix<float>(g, 9, 16), random_matrix<float>(g, 9, 16));
  check_same_as_widened<lrpe::bfloat16>(shaw, 6, 40, 16, 16, option_cases[1], 9, lrpe::backend::simd<>{});
}

TEST_CASE("16-bit Q and out: Q widened, out rounded once from the float result") {
  lrpe::generator g(11);
  const index_t nq = 6, nk = 120, d = 32, dv = 24;
  const rm<lrpe::half> q = random_matrix<float>(g, nq, d).cast<lrpe::half>();
  const rm<lrpe::bfloat16> k = random_matrix<float>(g, nk, d).cast<lrpe::bfloat16>();
  const rm<lrpe::bfloat16> v = random_matrix<float>(g, nk, dv).cast<lrpe::bfloat16>();
  lrpe::softmax_options<> o;
  o.causal = true;
  o.q_positions = nk - nq;
  for (const bool simd : {false, true}) {
    rm<lrpe::bfloat16> out(nq, dv);
    rm<float> want(nq, dv);
    if (simd) {
      lrpe::softmax_attention(q, k, v, out, lrpe::rope_neox<float>(d), o, lrpe::backend::simd<>{});
      lrpe::softmax_attention(widened(q), widened(k), widened(v), want, lrpe::rope_neox<float>(d), o,
                              lrpe::backend::simd<>{});
    } else {
      lrpe::softmax_attention(q, k, v, out, lrpe::rope_neox<float>(d), o);
      lrpe::softmax_attention(widened(q), widened(k), widened(v), want, lrpe::rope_neox<float>(d), o);
    }
    const rm<lrpe::bfloat16> rounded = want.cast<lrpe::bfloat16>();
    CAPTURE(simd);
    for (index_t i = 0; i < out.size(); ++i)
      CHECK(Eigen::numext::bit_cast<std::uint16_t>(out.data()[i]) ==
            Eigen::numext::bit_cast<std::uint16_t>(rounded.data()[i]));
  }
}

TEST_CASE("16-bit K and V: NaN and infinity stored at hidden keys do not reach the rows") {
  // keys after the query (causal) hold ∞ and NaN in the same block as visible keys: their zero
  // weights must not multiply them (0·∞ = NaN); a visible NaN key does reach its rows
  const index_t nk = 40, d = 16, dv = 16;
  lrpe::generator g(5);
  const rm<float> q = random_matrix<float>(g, 2, d);
  rm<lrpe::bfloat16> k = random_matrix<float>(g, nk, d).cast<lrpe::bfloat16>();
  rm<lrpe::bfloat16> v = random_matrix<float>(g, nk, dv).cast<lrpe::bfloat16>();
  v(30, 3) = lrpe::bfloat16(std::numeric_limits<float>::infinity());
  v(31, 0) = lrpe::bfloat16(std::numeric_limits<float>::quiet_NaN());
  lrpe::softmax_options<> o;
  o.causal = true;
  o.q_positions = 20;
  rm<float> got(2, dv), want(2, dv);
  lrpe::softmax_attention(q, k, v, got, lrpe::no_encoding{}, o, lrpe::backend::simd<>{});
  lrpe::softmax_attention(q, widened(k), widened(v), want, lrpe::no_encoding{}, o, lrpe::backend::simd<>{});
  CHECK(got.allFinite());
  CHECK(same_bits(got, want));
  o.q_positions = 30;  // row 0 now sees key 30's ∞
  lrpe::softmax_attention(q, k, v, got, lrpe::no_encoding{}, o, lrpe::backend::simd<>{});
  CHECK(!std::isfinite(got(0, 3)));
  CHECK(std::isfinite(got(0, 4)));
}

TEST_CASE("16-bit K and V (grouped-query decode, multi-head): the same bits as the widened call") {
  const index_t batch = 2, heads = 8, kv_heads = 2, n = 700, d = 64;
  lrpe::generator g(21);
  const rm<float> q = random_matrix<float>(g, batch * heads, d);
  const rm<lrpe::bfloat16> k = random_matrix<float>(g, batch * kv_heads * n, d).cast<lrpe::bfloat16>();
  const rm<lrpe::bfloat16> v = random_matrix<float>(g, batch * kv_heads * n, d).cast<lrpe::bfloat16>();
  const rm<float> kw = widened(k), vw = widened(v);
  rm<float> got(batch * heads, d), want(batch * heads, d);
  lrpe::softmax_options<> o;
  o.causal = true;
  o.q_positions = n - 1;
  o.window = 256;
  const auto qv = lrpe::bnsh(q.data(), batch, heads, 1, d);
  lrpe::softmax_attention(qv, lrpe::bnsh(k.data(), batch, kv_heads, n, d), lrpe::bnsh(v.data(), batch, kv_heads, n, d),
                          lrpe::bnsh(got.data(), batch, heads, 1, d), lrpe::no_encoding{}, o, lrpe::backend::simd<>{});
  lrpe::softmax_attention(qv, lrpe::bnsh(kw.data(), batch, kv_heads, n, d),
                          lrpe::bnsh(vw.data(), batch, kv_heads, n, d), lrpe::bnsh(want.data(), batch, heads, 1, d),
                          lrpe::no_encoding{}, o, lrpe::backend::simd<>{});
  CHECK(same_bits(got, want));
}

template <class S>
void append_kv_16bit_case() {
  const index_t batch = 2, heads = 3, d = 16, dv = 8, capacity = 12, m = 2, n_past = 5;
  lrpe::generator g(41);
  const rm<float> kn = random_matrix<float>(g, batch * heads * m, d), vn = random_matrix<float>(g, batch * heads * m, dv);
  const auto k_new = lrpe::bnsh(kn.data(), batch, heads, m, d);
  const auto v_new = lrpe::bnsh(vn.data(), batch, heads, m, dv);
  const lrpe::rope_neox<float> rope(d, 1e4);
  const lrpe::type1<float> t1(d);  // the generic path (lrpe::encode)
  const auto run = [&](const auto& enc, bool simd) {
    index_t f = d;
    if constexpr (!std::is_same_v<std::decay_t<decltype(enc)>, lrpe::no_encoding>) f = static_cast<index_t>(enc.feature_dim());
    rm<S> kc = rm<S>::Constant(batch * heads * capacity, f, S(7.0f)), vc = rm<S>::Constant(batch * heads * capacity, dv, S(7.0f));
    rm<float> kf = rm<float>::Constant(kc.rows(), f, 7.0f), vf = rm<float>::Constant(vc.rows(), dv, 7.0f);
    const auto k16 = lrpe::bsnh(kc.data(), batch, capacity, heads, f), v16 = lrpe::bsnh(vc.data(), batch, capacity, heads, dv);
    const auto k32 = lrpe::bsnh(kf.data(), batch, capacity, heads, f), v32 = lrpe::bsnh(vf.data(), batch, capacity, heads, dv);
    const auto& e = enc;
    if (simd) {
      lrpe::append_kv(k_new, v_new, k16, v16, n_past, e, std::nullopt, lrpe::backend::simd<>{});
      lrpe::append_kv(k_new, v_new, k32, v32, n_past, e, std::nullopt, lrpe::backend::simd<>{});
    } else {
      lrpe::append_kv(k_new, v_new, k16, v16, n_past, e);
      lrpe::append_kv(k_new, v_new, k32, v32, n_past, e);
    }
    const rm<S> k_want = kf.template cast<S>(), v_want = vf.template cast<S>();
    CAPTURE(simd);
    for (index_t i = 0; i < kc.size(); ++i)
      CHECK(Eigen::numext::bit_cast<std::uint16_t>(kc.data()[i]) == Eigen::numext::bit_cast<std::uint16_t>(k_want.data()[i]));
    for (index_t i = 0; i < vc.size(); ++i)
      CHECK(Eigen::numext::bit_cast<std::uint16_t>(vc.data()[i]) == Eigen::numext::bit_cast<std::uint16_t>(v_want.data()[i]));
  };
  for (const bool simd : {false, true}) {
    run(rope, simd);
    run(t1, simd);
    run(lrpe::no_encoding{}, simd);
  }
}

TEST_CASE("append_kv into a 16-bit cache: the float rows, rounded once as they are stored") {
  SUBCASE("bfloat16") { append_kv_16bit_case<lrpe::bfloat16>(); }
  SUBCASE("half") { append_kv_16bit_case<lrpe::half>(); }
}

/**
 * The bound docs/attention.md states for K and V rounded to S (unit roundoff u) from exact
 * values: each logit moves by at most δ = scale·max_s Σ_t-free Σ_c |q_sc|·|k_tc|·u, so each
 * probability by a factor within e^{±2δ}, and
 *     |o − o_exact| ≤ max|v|·(e^{2δ} − 1 + u)   (plus float's own rounding).
 */
template <class S>
void error_bound_case(double u) {
  lrpe::generator g(31);
  const index_t nq = 9, nk = 400, d = 64, dv = 32;
  const rm<float> q = random_matrix<float>(g, nq, d), k = random_matrix<float>(g, nk, d), v = random_matrix<float>(g, nk, dv);
  const double scale = 1.0 / std::sqrt(double(d));
  double delta = 0, vmax = 0;
  for (index_t s = 0; s < nq; ++s)
    for (index_t t = 0; t < nk; ++t) delta = std::max(delta, scale * u * double(q.row(s).cwiseAbs().dot(k.row(t).cwiseAbs())));
  for (index_t i = 0; i < v.size(); ++i) vmax = std::max(vmax, std::abs(double(v.data()[i])));
  const double bound = vmax * (std::exp(2 * delta) - 1 + u) + 1e-5 * vmax;
  // long double, unrounded inputs
  rm<ld> exact(nq, dv);
  for (index_t s = 0; s < nq; ++s) {
    std::vector<ld> x(static_cast<std::size_t>(nk));
    ld m = -std::numeric_limits<ld>::infinity(), den = 0;
    for (index_t t = 0; t < nk; ++t) {
      ld dot = 0;
      for (index_t c = 0; c < d; ++c) dot += ld(q(s, c)) * ld(k(t, c));
      x[static_cast<std::size_t>(t)] = ld(scale) * dot;
      m = std::max(m, x[static_cast<std::size_t>(t)]);
    }
    for (index_t c = 0; c < dv; ++c) exact(s, c) = 0;
    for (index_t t = 0; t < nk; ++t) {
      const ld w = std::exp(x[static_cast<std::size_t>(t)] - m);
      den += w;
      for (index_t c = 0; c < dv; ++c) exact(s, c) += w * ld(v(t, c));
    }
    for (index_t c = 0; c < dv; ++c) exact(s, c) /= den;
  }
  const rm<S> ks = k.cast<S>(), vs = v.cast<S>();
  for (const bool simd : {false, true}) {
    rm<float> got(nq, dv);
    if (simd) lrpe::softmax_attention(q, ks, vs, got, lrpe::no_encoding{}, {}, lrpe::backend::simd<>{});
    else lrpe::softmax_attention(q, ks, vs, got, lrpe::no_encoding{}, {});
    double worst = 0;
    for (index_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, double(std::abs(ld(got.data()[i]) - exact.data()[i])));
    CAPTURE(simd);
    CAPTURE(worst);
    CAPTURE(bound);
    CHECK(worst <= bound);
    CHECK(worst > 0);  // the rounding did reach the output (the inputs were rounded)
  }
}

TEST_CASE("16-bit K and V against long double on the unrounded inputs: within the stated bound") {
  SUBCASE("bfloat16, u = 2^-8") { error_bound_case<lrpe::bfloat16>(std::ldexp(1.0, -8)); }
  SUBCASE("half, u = 2^-11") { error_bound_case<lrpe::half>(std::ldexp(1.0, -11)); }
}

}  // namespace

namespace {

/// A batch of sequences in a paged pool (blocks handed out in a shuffled order) and the same rows
/// contiguous per sequence, written by the test's own index arithmetic.
template <class S>
struct paged_case {
  index_t block_size, kv_heads, d, dv, blocks;
  std::vector<index_t> lengths;
  std::vector<std::int32_t> table;
  index_t stride;
  std::vector<S> k_pool, v_pool;
  std::vector<rm<S>> k_seq, v_seq;  // per sequence: kv_heads·len × d (head-major)
  bool hnd;

  paged_case(std::uint64_t seed, index_t block_size_, index_t kv_heads_, index_t d_, index_t dv_,
             std::vector<index_t> lengths_, bool hnd_)
      : block_size(block_size_), kv_heads(kv_heads_), d(d_), dv(dv_), lengths(std::move(lengths_)), hnd(hnd_) {
    lrpe::generator g(seed);
    stride = 0;
    index_t total = 0;
    for (const index_t len : lengths) {
      stride = std::max(stride, (len + block_size - 1) / block_size);
      total += (len + block_size - 1) / block_size;
    }
    blocks = total + 3;  // some blocks unused
    std::vector<std::int32_t> order(static_cast<std::size_t>(blocks));
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
    for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[g.next() % i]);
    table.assign(lengths.size() * static_cast<std::size_t>(std::max<index_t>(stride, 1)), -1);
    k_pool.assign(static_cast<std::size_t>(blocks * block_size * kv_heads * d), S(0.0f));
    v_pool.assign(static_cast<std::size_t>(blocks * block_size * kv_heads * dv), S(0.0f));
    std::size_t next = 0;
    for (std::size_t b = 0; b < lengths.size(); ++b) {
      const index_t len = lengths[b];
      k_seq.push_back(random_matrix<float>(g, kv_heads * len, d).template cast<S>());
      v_seq.push_back(random_matrix<float>(g, kv_heads * len, dv).template cast<S>());
      for (index_t i = 0; i * block_size < len; ++i) table[b * static_cast<std::size_t>(stride) + static_cast<std::size_t>(i)] = order[next++];
      for (index_t h = 0; h < kv_heads; ++h)
        for (index_t j = 0; j < len; ++j) {
          const index_t blk = table[b * static_cast<std::size_t>(stride) + static_cast<std::size_t>(j / block_size)];
          const index_t r = j % block_size;
          for (index_t c = 0; c < d; ++c) k_pool[static_cast<std::size_t>(at(blk, r, h, d) + c)] = k_seq[b](h * len + j, c);
          for (index_t c = 0; c < dv; ++c) v_pool[static_cast<std::size_t>(at(blk, r, h, dv) + c)] = v_seq[b](h * len + j, c);
        }
    }
  }
  [[nodiscard]] index_t at(index_t blk, index_t r, index_t h, index_t w) const {
    return hnd ? ((blk * kv_heads + h) * block_size + r) * w : ((blk * block_size + r) * kv_heads + h) * w;
  }
  lrpe::paged_kv_view<const S> k() const {
    return hnd ? lrpe::paged_hnd(k_pool.data(), blocks, block_size, kv_heads, d)
               : lrpe::paged_nhd(k_pool.data(), blocks, block_size, kv_heads, d);
  }
  lrpe::paged_kv_view<const S> v() const {
    return hnd ? lrpe::paged_hnd(v_pool.data(), blocks, block_size, kv_heads, dv)
               : lrpe::paged_nhd(v_pool.data(), blocks, block_size, kv_heads, dv);
  }
  lrpe::block_tables tables() const { return {table, stride, lengths}; }
};

/// The paged call against the contiguous call of each sequence, on the same backend.
template <class S, class Enc, class Backend>
void paged_vs_contiguous(const paged_case<S>& pc, index_t q_heads, index_t m, const Enc& enc,
                         const lrpe::softmax_options<>& o, Backend backend, bool bitwise) {
  const auto batch = static_cast<index_t>(pc.lengths.size());
  lrpe::generator g(77);
  const rm<float> q = random_matrix<float>(g, batch * q_heads * m, pc.d);
  rm<float> got = rm<float>::Constant(batch * q_heads * m, pc.dv, 5.0f), want(batch * q_heads * m, pc.dv);
  lrpe::softmax_attention_paged(lrpe::bnsh(q.data(), batch, q_heads, m, pc.d), pc.k(), pc.v(), pc.tables(),
                                lrpe::bnsh(got.data(), batch, q_heads, m, pc.dv), enc, o, backend);
  for (index_t b = 0; b < batch; ++b) {
    const index_t len = pc.lengths[static_cast<std::size_t>(b)];
    lrpe::softmax_options<> ob = o;
    ob.q_positions = len - m;
    const std::size_t bi = static_cast<std::size_t>(b);
    lrpe::softmax_attention(lrpe::bnsh(q.data() + b * q_heads * m * pc.d, 1, q_heads, m, pc.d),
                            lrpe::bnsh(pc.k_seq[bi].data(), 1, pc.kv_heads, len, pc.d),
                            lrpe::bnsh(pc.v_seq[bi].data(), 1, pc.kv_heads, len, pc.dv),
                            lrpe::bnsh(want.data() + b * q_heads * m * pc.dv, 1, q_heads, m, pc.dv), enc, ob,
                            lrpe::backend::simd<>{});
  }
  if (bitwise) {
    CAPTURE((got - want).cwiseAbs().maxCoeff()); CAPTURE(o.head_sinks.size()); CAPTURE(o.window); CAPTURE(std::string(Backend::name)); CHECK(same_bits(got, want));
  } else {
    CHECK((got - want).cwiseAbs().maxCoeff() <= attention_test::kernel_vs_kernel<float>() * (1 + want.cwiseAbs().maxCoeff()));
  }
}

template <class S>
void paged_cases() {
  const std::vector<double> sinks{0.1, -0.5, 1.0, 0.0, 0.3, -1.0, 2.0, 0.7};
  lrpe::backend::simd_threads pool(2);
  for (const bool hnd : {false, true})
    for (const index_t block_size : {1, 16, 32}) {
      const paged_case<S> pc(block_size * 3 + (hnd ? 1 : 0), block_size, 2, 64, 48, {37, 0, 300, 16}, hnd);
      for (const index_t m : {1, 3}) {
        lrpe::softmax_options<> o;
        o.causal = true;
        CAPTURE(hnd);
        CAPTURE(block_size);
        CAPTURE(m);
        paged_vs_contiguous(pc, 8, m, lrpe::no_encoding{}, o, lrpe::backend::simd<>{}, true);
        paged_vs_contiguous(pc, 8, m, lrpe::no_encoding{}, o, lrpe::backend::simd_policy<>{&pool}, true);
        paged_vs_contiguous(pc, 8, m, lrpe::no_encoding{}, o, lrpe::backend::reference{}, false);
        o.window = 50;
        o.softcap = 10;
        o.sink = 0.25;
        paged_vs_contiguous(pc, 8, m, lrpe::canonical::alibi<float>::for_heads(64, 8), o, lrpe::backend::simd<>{}, true);
        o.head_sinks = sinks;
        paged_vs_contiguous(pc, 8, m, lrpe::no_encoding{}, o, lrpe::backend::simd<>{}, true);
        paged_vs_contiguous(pc, 8, m, lrpe::no_encoding{}, o, lrpe::backend::reference{}, false);
      }
    }
}

TEST_CASE("paged KV cache: the same bits as the contiguous call (SIMD), any block size, NHD and HND, GQA, options") {
  SUBCASE("bfloat16") { paged_cases<lrpe::bfloat16>(); }
  SUBCASE("half") { paged_cases<lrpe::half>(); }
  SUBCASE("float") { paged_cases<float>(); }
}

TEST_CASE("paged KV cache: a pair-keyed bias at the tables' positions == the contiguous call; past its index, an error") {
  const paged_case<lrpe::bfloat16> pc(40, 16, 2, 16, 16, {37, 300, 16}, false);
  lrpe::generator g(0x9A6E);
  lrpe::canonical::index_matrix index(300, 300);
  for (index_t i = 0; i < index.size(); ++i) index.data()[i] = static_cast<std::int32_t>(g.below(7));
  const lrpe::canonical::pair_bias<float> pair(16, index, random_matrix<float>(g, 4, 7));
  lrpe::softmax_options<> o;
  o.causal = true;
  for (const index_t m : {1, 3}) {
    paged_vs_contiguous(pc, 4, m, pair, o, lrpe::backend::simd<>{}, true);
    paged_vs_contiguous(pc, 4, m, pair, o, lrpe::backend::reference{}, false);
  }
  const lrpe::canonical::pair_bias<float> small(16, index.topLeftCorner(299, 299), random_matrix<float>(g, 4, 7));
  std::vector<float> q(3 * 4 * 16), out(q.size());
  CHECK_THROWS_AS(lrpe::softmax_attention_paged(lrpe::bnsh(static_cast<const float*>(q.data()), 3, 4, 1, 16), pc.k(),
                                                pc.v(), pc.tables(), lrpe::bnsh(out.data(), 3, 4, 1, 16), small),
                  lrpe::parameter_error);
}

TEST_CASE("paged KV cache: errors name the argument") {
  const paged_case<lrpe::bfloat16> pc(5, 16, 2, 16, 16, {20, 40}, false);
  std::vector<float> q(2 * 4 * 16), out(q.size());
  const auto qv = lrpe::bnsh(static_cast<const float*>(q.data()), 2, 4, 1, 16);
  const auto ov = lrpe::bnsh(out.data(), 2, 4, 1, 16);
  const lrpe::no_encoding none;
  auto k = pc.k();
  auto t = pc.tables();
  CHECK_NOTHROW(lrpe::softmax_attention_paged(qv, k, pc.v(), t, ov, none));
  k.block_size = 12;  // not a power of two
  CHECK_THROWS_AS(lrpe::softmax_attention_paged(qv, k, pc.v(), t, ov, none), lrpe::shape_error);
  std::vector<std::int32_t> bad = pc.table;
  bad[1] = static_cast<std::int32_t>(pc.blocks);  // outside the pool
  t.blocks = bad;
  CHECK_THROWS_AS(lrpe::softmax_attention_paged(qv, pc.k(), pc.v(), t, ov, none), lrpe::shape_error);
  const std::vector<index_t> too_long{20, 16 * pc.stride + 1};
  t = pc.tables();
  t.lengths = too_long;
  CHECK_THROWS_AS(lrpe::softmax_attention_paged(qv, pc.k(), pc.v(), t, ov, none), lrpe::shape_error);
  lrpe::softmax_options<> o;
  o.q_positions = 3;
  CHECK_THROWS_AS(lrpe::softmax_attention_paged(qv, pc.k(), pc.v(), pc.tables(), ov, none, o), lrpe::parameter_error);
  const auto q3 = lrpe::bnsh(static_cast<const float*>(q.data()), 2, 3, 1, 16);
  const auto o3 = lrpe::bnsh(out.data(), 2, 3, 1, 16);
  CHECK_THROWS_AS(lrpe::softmax_attention_paged(q3, pc.k(), pc.v(), pc.tables(), o3, none), lrpe::shape_error);
  // a stride past the table (its products would overflow), extents past index_t, a negative stride
  t = pc.tables();
  t.stride = std::numeric_limits<index_t>::max() / 2;
  CHECK_THROWS_AS(lrpe::softmax_attention_paged(qv, pc.k(), pc.v(), t, ov, none), lrpe::shape_error);
  std::vector<float> one(1);
  CHECK_THROWS_AS(lrpe::paged_nhd(one.data(), index_t(1) << 40, 16, 8, index_t(1) << 20), lrpe::shape_error);
  CHECK_THROWS_AS(lrpe::paged_hnd(one.data(), index_t(1) << 40, 16, 8, index_t(1) << 20), lrpe::shape_error);
  k = pc.k();
  k.row_stride = -16;
  CHECK_THROWS_AS(lrpe::softmax_attention_paged(qv, k, pc.v(), pc.tables(), ov, none), lrpe::shape_error);
  try {
    k = pc.k();
    k.block_size = 12;
    lrpe::softmax_attention_paged(qv, k, pc.v(), pc.tables(), ov, none);
  } catch (const lrpe::shape_error& e) {
    CHECK(std::string(e.what()).find("k_cache") != std::string::npos);
    CHECK(std::string(e.what()).find("12") != std::string::npos);
  }
}

}  // namespace

namespace {

/// append_kv_paged against append_kv into contiguous caches: two sequences of different lengths
/// grown by a prefill and single-token steps, every row compared (bitwise) through the test's own
/// index arithmetic.
template <class S, class Enc, class Backend>
void append_paged_case(const Enc& enc, index_t f, Backend backend) {
  const index_t kv_heads = 2, d = 16, dv = 8, block = 4, blocks = 12, capacity = 24;
  const std::vector<std::int32_t> table{7, 2, 9, 0, 5, 11, 1, 3, 10, 4, 6, 8};  // stride 6: sequence b at 6b
  std::vector<S> kp(static_cast<std::size_t>(blocks * block * kv_heads * f), S(7.0f)), vp(static_cast<std::size_t>(blocks * block * kv_heads * dv), S(7.0f));
  const auto k_pages = lrpe::paged_hnd(kp.data(), blocks, block, kv_heads, f);
  const auto v_pages = lrpe::paged_hnd(vp.data(), blocks, block, kv_heads, dv);
  std::vector<S> kc(static_cast<std::size_t>(2 * kv_heads * capacity * f)), vc(static_cast<std::size_t>(2 * kv_heads * capacity * dv));
  lrpe::generator g(91);
  std::vector<index_t> lengths{0, 0};
  const std::vector<index_t> grow0{5, 1, 1, 1}, grow1{3, 1, 1, 1};  // sequence 1 starts later (positions differ)
  for (std::size_t step = 0; step < grow0.size(); ++step) {
    for (index_t b = 0; b < 2; ++b) {
      const index_t m = b == 0 ? grow0[step] : grow1[step];
      const rm<float> kn = random_matrix<float>(g, kv_heads * m, d), vn = random_matrix<float>(g, kv_heads * m, dv);
      const index_t n_past = lengths[static_cast<std::size_t>(b)];
      lengths[static_cast<std::size_t>(b)] += m;
      // one sequence per call here (the tables' batch is 1: sequence b's row of the table)
      const std::vector<index_t> len1{lengths[static_cast<std::size_t>(b)]};
      const lrpe::block_tables t{std::span<const std::int32_t>(table).subspan(static_cast<std::size_t>(6 * b), 6), 6, len1};
      lrpe::append_kv_paged(lrpe::bnsh(kn.data(), 1, kv_heads, m, d), lrpe::bnsh(vn.data(), 1, kv_heads, m, dv), k_pages,
                            v_pages, t, enc, backend);
      lrpe::append_kv(lrpe::bnsh(kn.data(), 1, kv_heads, m, d), lrpe::bnsh(vn.data(), 1, kv_heads, m, dv),
                      lrpe::bnsh(kc.data() + b * kv_heads * capacity * f, 1, kv_heads, capacity, f),
                      lrpe::bnsh(vc.data() + b * kv_heads * capacity * dv, 1, kv_heads, capacity, dv), n_past, enc,
                      std::nullopt, backend);
    }
  }
  const auto bits = [](S x) { return Eigen::numext::bit_cast<std::conditional_t<sizeof(S) == 2, std::uint16_t, std::uint32_t>>(x); };
  for (index_t b = 0; b < 2; ++b)
    for (index_t h = 0; h < kv_heads; ++h)
      for (index_t j = 0; j < lengths[static_cast<std::size_t>(b)]; ++j) {
        const index_t blk = table[static_cast<std::size_t>(6 * b + j / block)], r = j % block;
        for (index_t c = 0; c < f; ++c)
          CHECK(bits(kp[static_cast<std::size_t>(((blk * kv_heads + h) * block + r) * f + c)]) ==
                bits(kc[static_cast<std::size_t>(((b * kv_heads + h) * capacity + j) * f + c)]));
        for (index_t c = 0; c < dv; ++c)
          CHECK(bits(vp[static_cast<std::size_t>(((blk * kv_heads + h) * block + r) * dv + c)]) ==
                bits(vc[static_cast<std::size_t>(((b * kv_heads + h) * capacity + j) * dv + c)]));
      }
}

TEST_CASE("append_kv_paged: the rows append_kv writes, in the sequences' blocks") {
  const lrpe::rope_neox<float> rope(16, 1e4);
  const lrpe::type1<float> t1(16);
  for (const bool simd : {false, true}) {
    CAPTURE(simd);
    const auto run = [&](auto backend) {
      append_paged_case<lrpe::bfloat16>(rope, 16, backend);
      append_paged_case<lrpe::half>(t1, static_cast<index_t>(t1.feature_dim()), backend);
      append_paged_case<float>(rope, 16, backend);
      append_paged_case<float>(lrpe::no_encoding{}, 16, backend);
    };
    if (simd) run(lrpe::backend::simd<>{});
    else run(lrpe::backend::reference{});
  }
  // a sequence whose length does not count the new rows
  std::vector<float> kp(4 * 4 * 16), vp(kp.size()), kn(16), vn(16);
  const std::vector<std::int32_t> table{0};
  const std::vector<index_t> len{0};
  CHECK_THROWS_AS(lrpe::append_kv_paged(lrpe::bnsh(static_cast<const float*>(kn.data()), 1, 1, 1, 16),
                                        lrpe::bnsh(static_cast<const float*>(vn.data()), 1, 1, 1, 16),
                                        lrpe::paged_nhd(kp.data(), 4, 4, 1, 16), lrpe::paged_nhd(vp.data(), 4, 4, 1, 16),
                                        lrpe::block_tables{table, 1, len}, lrpe::no_encoding{}),
                  lrpe::shape_error);
}

}  // namespace

namespace {

/// encode of 16-bit rows on both tags: the float encoder's rows on the (exactly) widened input,
/// rounded once, bit for bit; rows past one block (storage_block_rows); in place.
template <class S, class E>
void encode_16bit_case(const E& enc, const char* name) {
  CAPTURE(name);
  const index_t n = lrpe::storage_block_rows + 904, d = enc.dim(), f = enc.feature_dim();
  lrpe::generator g(0x16B1'7E);
  rm<S> x(n, d);
  for (index_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<S>(static_cast<float>(g.normal()));
  // a NaN, infinities and values near the type's largest: the rounding's special cases
  const float big = static_cast<float>(std::numeric_limits<S>::max());
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::infinity(), big, -big, 0.75f * big};
  for (std::size_t k = 0; k < std::size(specials); ++k) x(static_cast<index_t>(17 + 301 * k), static_cast<index_t>(k % 2)) = static_cast<S>(specials[k]);
  const rm<float> xf = x.template cast<float>();  // exact
  std::vector<position_t> shuffled(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) shuffled[static_cast<std::size_t>(i)] = 3 * i - 7000;
  for (std::size_t i = shuffled.size(); i > 1; --i) std::swap(shuffled[i - 1], shuffled[g.next() % i]);
  const auto bits = [](S v) { return Eigen::numext::bit_cast<std::uint16_t>(v); };
  for (const bool arrays : {false, true}) {
    const lrpe::positions pos = arrays ? lrpe::positions(std::span<const position_t>(shuffled)) : lrpe::positions(1000);
    const auto run = [&](auto backend) {
      rm<S> out(n, f);
      rm<float> outf(n, f);
      lrpe::encode(backend, enc, lrpe::view(std::as_const(x)), pos, lrpe::view(out));
      lrpe::encode(backend, enc, lrpe::view(xf), pos, lrpe::view(outf));
      const rm<S> want = outf.template cast<S>();
      std::size_t differ = 0;
      for (index_t i = 0; i < out.size(); ++i) differ += bits(out.data()[i]) != bits(want.data()[i]) ? 1 : 0;
      CHECK(differ == 0);
      if (f == d) {  // in place
        rm<S> y = x;
        lrpe::encode(backend, enc, lrpe::view(std::as_const(y)), pos, lrpe::view(y));
        std::size_t moved = 0;
        for (index_t i = 0; i < y.size(); ++i) moved += bits(y.data()[i]) != bits(out.data()[i]) ? 1 : 0;
        CHECK(moved == 0);
      }
    };
    CAPTURE(arrays);
    run(lrpe::backend::reference{});
    run(lrpe::backend::simd<>{});
  }
  rm<S> wrong(n - 1, f);
  CHECK_THROWS_AS(lrpe::encode(lrpe::backend::simd<>{}, enc, lrpe::view(std::as_const(x)), 0, lrpe::view(wrong)),
                  lrpe::shape_error);
  CHECK_THROWS_AS(lrpe::encode(lrpe::backend::reference{}, enc, lrpe::view(std::as_const(x)), 0, lrpe::view(wrong)),
                  lrpe::shape_error);
}

}  // namespace

TEST_CASE("encode with 16-bit rows (bfloat16, half): the float rows on the widened input, rounded once") {
  SUBCASE("bfloat16") {
    encode_16bit_case<lrpe::bfloat16>(lrpe::rope_neox<float>(64, 5e5), "rope_neox");
    encode_16bit_case<lrpe::bfloat16>(lrpe::rope_gptj<float>(48), "rope_gptj");
    encode_16bit_case<lrpe::bfloat16>(lrpe::type1<float>(32), "type1");
    encode_16bit_case<lrpe::bfloat16>(lrpe::type8<float>(16), "type8 (complex: 2d features)");
  }
  SUBCASE("half") {
    encode_16bit_case<lrpe::half>(lrpe::rope_neox<float>(64, 5e5), "rope_neox");
    encode_16bit_case<lrpe::half>(lrpe::permuteformer<float>(32), "permuteformer");
  }
}

namespace {

/// encode_qk of 16-bit Q and K on both tags: every head's rows are the same tag's float
/// `encode_qk` on the (exactly) widened tensors, rounded once, bit for bit. Batch 2, Q with 5
/// heads and K with 3 (more matrices than one stage group holds at d = 64), BSNH and BNSH, seq
/// lengths of several blocks of positions with a tail, positions shared by Q and K or not
/// (an array), in place.
template <class S, class E>
void encode_qk_16bit_case(const E& enc, const char* name) {
  const std::string encoder = name;
  CAPTURE(encoder);
  constexpr index_t batch = 2, hq = 5, hk = 3;
  const index_t d = enc.dim(), f = enc.feature_dim();
  lrpe::generator g(0x16B1'0C);
  // the same bits, any NaN equal to any NaN (the float kernels' paths may differ in a NaN's sign)
  const auto bits = [](S v) {
    return Eigen::numext::isnan(v) ? std::uint16_t{0x7fff} : Eigen::numext::bit_cast<std::uint16_t>(v);
  };
  for (const index_t n : {index_t{1}, index_t{200}}) {
    std::vector<position_t> shuffled(static_cast<std::size_t>(n));
    for (index_t i = 0; i < n; ++i) shuffled[static_cast<std::size_t>(i)] = 5 * i - 900;
    for (std::size_t i = shuffled.size(); i > 1; --i) std::swap(shuffled[i - 1], shuffled[g.next() % i]);
    rm<S> q(batch * hq * n, d), k(batch * hk * n, d);
    for (auto* x : {&q, &k})
      for (index_t i = 0; i < x->size(); ++i) x->data()[i] = static_cast<S>(static_cast<float>(g.normal()));
    q(n / 2, 1) = static_cast<S>(std::numeric_limits<float>::quiet_NaN());  // stays in its own row
    const rm<float> qf = widened(q), kf = widened(k);
    for (const bool bsnh : {false, true}) {
      const auto hv = [&](auto* p, index_t heads, index_t w) {
        return bsnh ? lrpe::bsnh(p, batch, n, heads, w) : lrpe::bnsh(p, batch, heads, n, w);
      };
      // shared with K (an offset), or not (an array)
      const lrpe::positions q_offsets[] = {lrpe::positions(7), lrpe::positions(std::span<const position_t>(shuffled))};
      for (const lrpe::positions& q_pos : q_offsets) {
        const lrpe::positions k_pos(7);
        CAPTURE(n);
        CAPTURE(bsnh);
        CAPTURE(q_pos.is_array());
        const auto run = [&](auto backend) {
          rm<S> qo(q.rows(), f), ko(k.rows(), f);
          rm<float> qof(q.rows(), f), kof(k.rows(), f);
          lrpe::encode_qk(backend, enc, hv(static_cast<const S*>(q.data()), hq, d), q_pos,
                          hv(static_cast<const S*>(k.data()), hk, d), k_pos, hv(qo.data(), hq, f), hv(ko.data(), hk, f));
          lrpe::encode_qk(backend, enc, hv(qf.data(), hq, d), q_pos, hv(kf.data(), hk, d), k_pos, hv(qof.data(), hq, f),
                          hv(kof.data(), hk, f));
          const rm<S> want_q = qof.template cast<S>(), want_k = kof.template cast<S>();
          std::size_t differ = 0;
          for (index_t i = 0; i < qo.size(); ++i) differ += bits(qo.data()[i]) != bits(want_q.data()[i]) ? 1 : 0;
          for (index_t i = 0; i < ko.size(); ++i) differ += bits(ko.data()[i]) != bits(want_k.data()[i]) ? 1 : 0;
          CHECK(differ == 0);
          if (f == d) {  // in place
            rm<S> qi = q, ki = k;
            lrpe::encode_qk(backend, enc, hv(static_cast<const S*>(qi.data()), hq, d), q_pos,
                            hv(static_cast<const S*>(ki.data()), hk, d), k_pos, hv(qi.data(), hq, d), hv(ki.data(), hk, d));
            std::size_t moved = 0;
            for (index_t i = 0; i < qi.size(); ++i) moved += bits(qi.data()[i]) != bits(qo.data()[i]) ? 1 : 0;
            for (index_t i = 0; i < ki.size(); ++i) moved += bits(ki.data()[i]) != bits(ko.data()[i]) ? 1 : 0;
            CHECK(moved == 0);
          }
        };
        run(lrpe::backend::reference{});
        run(lrpe::backend::simd<>{});
      }
    }
  }
}

/// encode_qk's errors with 16-bit tensors name the argument, on both tags.
template <class S>
void encode_qk_16bit_errors() {
  const lrpe::rope_neox<float> enc(16);
  constexpr index_t n = 10;
  rm<S> q(2 * n, 16), k(2 * n, 16), out(2 * n, 16), wide(2 * n, 32);
  const auto cq = lrpe::bnsh(static_cast<const S*>(q.data()), 1, 2, n, 16);
  const auto ck = lrpe::bnsh(static_cast<const S*>(k.data()), 1, 2, n, 16);
  const auto o = lrpe::bnsh(out.data(), 1, 2, n, 16);
  const std::vector<position_t> short_positions(n - 1, 0);
  const auto expect = [&](auto backend) {
    const auto message = [&](auto&& call) {
      try {
        call();
      } catch (const lrpe::shape_error& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    CHECK(message([&] { lrpe::encode_qk(backend, enc, cq, 0, ck, 0, lrpe::bnsh(out.data(), 1, 1, n, 16), o); })
              .find("q_out") != std::string::npos);
    CHECK(message([&] { lrpe::encode_qk(backend, enc, cq, 0, ck, 0, o, lrpe::bnsh(wide.data(), 1, 2, n, 32)); })
              .find("k_out") != std::string::npos);
    CHECK(message([&] { lrpe::encode_qk(backend, enc, lrpe::bnsh(static_cast<const S*>(wide.data()), 1, 2, n, 32), 0, ck, 0, o, o); })
              .find("q") != std::string::npos);
    CHECK(message([&] {
            lrpe::encode_qk(backend, enc, cq, 0, ck, lrpe::positions(std::span<const position_t>(short_positions)), o, o);
          }).find("k_pos") != std::string::npos);
  };
  expect(lrpe::backend::reference{});
  expect(lrpe::backend::simd<>{});
}

}  // namespace

TEST_CASE("encode_qk with 16-bit Q and K (bfloat16, half): the float encode_qk's rows on the widened input, rounded once") {
  SUBCASE("bfloat16") {
    encode_qk_16bit_case<lrpe::bfloat16>(lrpe::rope_neox<float>(64), "rope_neox");
    encode_qk_16bit_case<lrpe::bfloat16>(lrpe::rope_gptj<float>(48), "rope_gptj");
    // (through the float stage in groups of 4 matrices at d = 128; RoPE's shape takes the one-pass kernel)
    encode_qk_16bit_case<lrpe::bfloat16>(lrpe::type1<float>(128), "type1 d = 128");
    encode_qk_16bit_case<lrpe::bfloat16>(lrpe::type8<float>(16), "type8 (complex: 2d features)");
    encode_qk_16bit_errors<lrpe::bfloat16>();
  }
  SUBCASE("half") {
    encode_qk_16bit_case<lrpe::half>(lrpe::rope_neox<float>(128), "rope_neox d = 128");
    encode_qk_16bit_case<lrpe::half>(lrpe::permuteformer<float>(32), "permuteformer");
    encode_qk_16bit_errors<lrpe::half>();
  }
}

namespace {

/// Linear attention with 16-bit q, k, v (and out): the same backend's float call on the
/// widened inputs (out: that result rounded once), bit for bit: causal by chunks with a
/// learned-free decay and normalisation, non-causal, a RoPE encoder with 1+elu features, a
/// segment call continuing a state, a shard's summary, and the multi-head call (GQA, BSNH)
/// with states.
template <class S, class Backend>
void linear_16bit_case(Backend backend) {
  constexpr index_t n = 150, d = 32, dv = 24;
  lrpe::generator g(0x11'16);
  const auto make = [&](index_t rows, index_t cols) {
    rm<S> x(rows, cols);
    for (index_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<S>(static_cast<float>(g.normal()));
    return x;
  };
  const rm<S> q = make(n, d), k = make(n, d), v = make(n, dv);
  const rm<float> qf = widened(q), kf = widened(k), vf = widened(v);
  const auto bits = [](S x) { return Eigen::numext::bit_cast<std::uint16_t>(x); };
  const auto same_stored = [&](const rm<S>& got, const rm<float>& want) {
    const rm<S> rounded = want.template cast<S>();
    std::size_t differ = 0;
    for (index_t i = 0; i < got.size(); ++i) differ += bits(got.data()[i]) != bits(rounded.data()[i]) ? 1 : 0;
    return differ == 0;
  };
  const lrpe::rope_neox<float> rope(d);
  const lrpe::feature_maps::elu_plus_one phi;
  const lrpe::linear_options causal{.causal = true, .norm = lrpe::normalisation::denominator, .chunk = 32, .decay = 0.97};
  const lrpe::linear_options plain{};
  for (const auto* options : {&causal, &plain}) {
    CAPTURE(options->causal);
    rm<float> want(n, dv), got(n, dv);
    lrpe::linear_attention(qf, kf, vf, want, rope, phi, *options, backend);
    lrpe::linear_attention(q, k, v, got, rope, phi, *options, backend);  // 16-bit in, float out
    CHECK(same_bits(got, want));
    rm<S> got16(n, dv);
    lrpe::linear_attention(q, k, v, got16, lrpe::no_encoding{}, lrpe::feature_maps::identity{}, *options, backend);
    lrpe::linear_attention(qf, kf, vf, want, lrpe::no_encoding{}, lrpe::feature_maps::identity{}, *options, backend);
    CHECK(same_stored(got16, want));
  }
  SUBCASE("a segment continuing a state, and a shard's summary") {
    constexpr index_t split = 61;
    const auto rows = [](const auto& x, index_t r0, index_t m) { return x.middleRows(r0, m); };
    lrpe::linear_attention_state<float> s16(d, dv, causal.decay), sf(d, dv, causal.decay);
    rm<S> o16(n, dv);
    rm<float> of(n, dv);
    for (const index_t r0 : {index_t{0}, split}) {
      const index_t m = r0 == 0 ? split : n - split;
      lrpe::linear_options seg = causal;
      seg.q_positions = seg.k_positions = lrpe::positions(r0);
      rm<S> part16(m, dv);
      rm<float> partf(m, dv);
      const rm<S> qs = rows(q, r0, m), ks = rows(k, r0, m), vs = rows(v, r0, m);
      const rm<float> qfs = rows(qf, r0, m), kfs = rows(kf, r0, m), vfs = rows(vf, r0, m);
      lrpe::linear_attention(qs, ks, vs, part16, rope, phi, s16, seg, backend);
      lrpe::linear_attention(qfs, kfs, vfs, partf, rope, phi, sf, seg, backend);
      o16.middleRows(r0, m) = part16;
      of.middleRows(r0, m) = partf;
    }
    CHECK(same_stored(o16, of));
    const auto sum16 = lrpe::linear_attention_summary(k, v, rope, phi, causal, backend);
    const auto sumf = lrpe::linear_attention_summary(kf, vf, rope, phi, causal, backend);
    const auto a = sum16.export_state(), b = sumf.export_state();
    CHECK(a.kv == b.kv);
    CHECK(a.k_sum == b.k_sum);
    CHECK(a.count == n);
  }
  SUBCASE("multi-head, grouped K/V, BSNH, with states") {
    constexpr index_t hq = 4, hk = 2, m = 40;
    const rm<S> qh = make(m * hq, d), kh = make(m * hk, d), vh = make(m * hk, dv);
    const rm<float> qhf = widened(qh), khf = widened(kh), vhf = widened(vh);
    rm<S> o16(m * hq, dv);
    rm<float> of(m * hq, dv);
    std::vector<lrpe::linear_attention_state<float>> st16(hq, lrpe::linear_attention_state<float>(d, dv, causal.decay)),
        stf = st16;
    lrpe::linear_attention(lrpe::bsnh(qh.data(), 1, m, hq, d), lrpe::bsnh(kh.data(), 1, m, hk, d),
                           lrpe::bsnh(vh.data(), 1, m, hk, dv), lrpe::bsnh(o16.data(), 1, m, hq, dv), rope, phi,
                           std::span<lrpe::linear_attention_state<float>>(st16), causal, backend);
    lrpe::linear_attention(lrpe::bsnh(qhf.data(), 1, m, hq, d), lrpe::bsnh(khf.data(), 1, m, hk, d),
                           lrpe::bsnh(vhf.data(), 1, m, hk, dv), lrpe::bsnh(of.data(), 1, m, hq, dv), rope, phi,
                           std::span<lrpe::linear_attention_state<float>>(stf), causal, backend);
    CHECK(same_stored(o16, of));
    rm<S> p16(m * hq, dv);
    rm<float> pf(m * hq, dv);
    lrpe::linear_attention(lrpe::bnsh(qh.data(), 1, hq, m, d), lrpe::bnsh(kh.data(), 1, hk, m, d),
                           lrpe::bnsh(vh.data(), 1, hk, m, dv), lrpe::bnsh(p16.data(), 1, hq, m, dv), rope, phi, plain,
                           backend);
    lrpe::linear_attention(lrpe::bnsh(qhf.data(), 1, hq, m, d), lrpe::bnsh(khf.data(), 1, hk, m, d),
                           lrpe::bnsh(vhf.data(), 1, hk, m, dv), lrpe::bnsh(pf.data(), 1, hq, m, dv), rope, phi, plain,
                           backend);
    CHECK(same_stored(p16, pf));
  }
  SUBCASE("bad views: an error naming the argument, nothing read") {
    rm<S> out(n, dv);
    const lrpe::matrix_view<const S> no_data(nullptr, n, d, d);
    CHECK_THROWS_WITH_AS(lrpe::linear_attention(no_data, lrpe::view(k), lrpe::view(v), lrpe::view(out), rope, phi,
                                                plain, backend),
                         doctest::Contains("q"), lrpe::shape_error);
    rm<S> short_v(n - 1, dv);
    CHECK_THROWS_AS(lrpe::linear_attention(q, k, short_v, out, rope, phi, plain, backend), lrpe::shape_error);
  }
}

}  // namespace

TEST_CASE("linear attention with 16-bit q, k, v, out: the float call on the widened inputs, rounded once") {
  SUBCASE("bfloat16, reference") { linear_16bit_case<lrpe::bfloat16>(lrpe::backend::reference{}); }
  SUBCASE("bfloat16, simd") { linear_16bit_case<lrpe::bfloat16>(lrpe::backend::simd<>{}); }
  SUBCASE("half, simd") { linear_16bit_case<lrpe::half>(lrpe::backend::simd<>{}); }
}
