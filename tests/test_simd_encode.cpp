// SPDX-License-Identifier: MIT
// SIMD encoders (backend::simd<>) against the reference backend (enc.encode), for every preset,
// the fused P·Λ chains and the fallbacks, in float and double, on random sizes (widths that are
// not multiples of the vector width, odd d, partial rotary, n = 1), positions by offset and by
// array, negative and near 10⁶; plus the exact-angle contract at position 10⁶ and the
// no-allocation contract.
//
// Stated tolerance (docs/backends.md): |simd − reference| ≤ 2·d·ε(T) element-wise for inputs in
// [−1, 1). Both paths form the same double angle s·θ; they differ only by FMA contraction, the
// order of a dot product or FFT, and ≤ 1 double ulp in cos/sin — a few ε(T), far inside the bound,
// while a wrong pairing, sign, table row or position is off by O(1).
#include "reference.hpp"

#include <lrpe/lrpe.hpp>
#include <lrpe/backend/simd/encode.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <limits>
#include <new>
#include <random>
#include <string>
#include <utility>
#include <vector>

// ---------------------------------------------------------------- allocation counter
namespace {
std::atomic<long> g_allocs{0};
std::atomic<std::size_t> g_max_alloc{0};
void note_alloc(std::size_t n) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  std::size_t m = g_max_alloc.load(std::memory_order_relaxed);
  while (n > m && !g_max_alloc.compare_exchange_weak(m, n)) {}
}
}  // namespace

// A counting global operator new/delete on malloc/free. GCC 12 flags free() inside the replaced
// delete as "mismatched" once it inlines a matching new (a known false positive for replacement
// allocation functions).
#if defined(__GNUC__) && !defined(__clang__)
#  pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
  note_alloc(n);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void* operator new[](std::size_t n) {
  note_alloc(n);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace {

using lrpe::index_t;
using lrpe::position_t;
using simd = lrpe::backend::simd<>;
static_assert(lrpe::backend::is_simd_backend_v<simd>);
static_assert(lrpe::backend::is_simd_backend_v<lrpe::backend::simd_policy<>>);
static_assert(!lrpe::backend::is_simd_backend_v<lrpe::backend::reference>);

template <class T>
long double tol(index_t d) {
  return 2.0L * static_cast<long double>(d) * std::numeric_limits<T>::epsilon();
}

/// Positions: by offset (random, negative, near ±10⁶) or by a random array.
struct pos_case {
  bool array;
  position_t offset;
  std::vector<position_t> values;
  lrpe::positions get() const { return array ? lrpe::positions(values) : lrpe::positions(offset); }
};

pos_case random_positions(lrpe::generator& g, index_t n) {
  pos_case p{};
  const auto kind = g.below(5);
  if (kind < 3) {
    const position_t bases[] = {0, -7, 1'000'000 - n / 2};
    p.array = false;
    p.offset = bases[kind] + static_cast<position_t>(g.below(50));
  } else {
    p.array = true;
    for (index_t i = 0; i < n; ++i)
      p.values.push_back(static_cast<position_t>(g.below(2'000'001)) - 1'000'000);
  }
  return p;
}

/// Runs simd and reference on one (encoder, n, positions) case; returns the max |difference|.
template <class E>
long double simd_vs_reference(const E& e, index_t n, const pos_case& pc, std::uint64_t seed) {
  using T = typename E::scalar;
  const auto x = ref::random_rows<T>(n, e.dim(), seed);
  const auto want = e.encode(x, pc.get());
  lrpe::row_matrix<T> got = lrpe::row_matrix<T>::Constant(n, e.feature_dim(), T(1234));
  lrpe::encode(simd{}, e, lrpe::view(x), pc.get(), lrpe::view(got));
  return ref::max_abs_diff(got, want);
}

template <class E>
E make(index_t d) {
  return E(d);
}

/// Widths: tiny, odd, not multiples of 4/8/16, exact multiples, the FFT limit (256), and one
/// past the 256-element stack row of the AVX2 mapped permute (Type 4: its fallback).
constexpr index_t widths[] = {2, 3, 5, 8, 13, 16, 31, 32, 33, 64, 65, 100, 128, 256, 300};

}  // namespace

#define LRPE_PRESETS(T)                                                                        \
  lrpe::type1<T>, lrpe::type2<T>, lrpe::type3<T>, lrpe::type4<T>, lrpe::type5<T>,              \
      lrpe::type6<T>, lrpe::type7<T>, lrpe::type8<T>, lrpe::rope_gptj<T>, lrpe::rope_neox<T>, \
      lrpe::permuteformer<T>

TEST_CASE_TEMPLATE("simd encode == reference for every preset (random n, d, positions)", E,
                   LRPE_PRESETS(float), LRPE_PRESETS(double)) {
  using T = typename E::scalar;
  lrpe::generator g(ref::seed(20261201));
  for (index_t d : widths) {
    const E e = make<E>(d);
    for (int rep = 0; rep < 3; ++rep) {
      // n = 1, a few rows, and more than one 256-position block (runs of 64 across a block edge).
      const index_t n = rep == 0 ? 1 : rep == 1 ? 1 + static_cast<index_t>(g.below(90)) : 257 + static_cast<index_t>(g.below(200));
      const pos_case pc = random_positions(g, n);
      const long double err = simd_vs_reference(e, n, pc, g.next());
      INFO("d = " << d << ", n = " << n << std::string(pc.array ? ", position array" : ", offset ") << pc.offset);
      CHECK(err <= tol<T>(d));
    }
  }
  // Every preset takes a SIMD path (Type 8: d a power of two up to 256).
  static_assert(lrpe::simd_encoder<E>::path != lrpe::simd_path::reference);
  CHECK(lrpe::simd_encoder<E>(make<E>(64)).vectorised());
}

TEST_CASE_TEMPLATE("simd: partial rotary, custom θ, LRPE cosine and fused P·Λ chains == reference", T, float, double) {
  lrpe::generator g(ref::seed(20261201) + 1);
  long double worst = 0;
  for (index_t d : widths) {
    const index_t n = 1 + static_cast<index_t>(g.below(70));
    const pos_case pc = random_positions(g, n);
    const auto check = [&](const auto& e, const char* what) {
      using E = std::remove_cvref_t<decltype(e)>;
      const long double err = simd_vs_reference(e, n, pc, g.next());
      INFO(what << ": d = " << d << ", n = " << n);
      CHECK(err <= tol<T>(d));
      worst = std::max(worst, err);
      return lrpe::simd_encoder<E>::path;
    };
    if (d >= 4) {
      const index_t rot = 2 * (1 + static_cast<index_t>(g.below(static_cast<std::uint64_t>(d / 2 - 1))));
      check(lrpe::rope_gptj<T>(d, 10000.0, rot), "rope_gptj partial rotary");
      check(lrpe::rope_neox<T>(d, 500000.0, rot), "rope_neox partial rotary");
      check(lrpe::encoder(lrpe::p::householder<T>::seeded(d, 3),
                          lrpe::lambda::rotation<T>(d, lrpe::freq::theta_c(rot, 512.0), lrpe::pairing::split_half)),
            "householder x split-half theta_c");
      // Householder as a row map of the rotation: pass-through features after the pairs are
      // mapped too
      check(lrpe::encoder(lrpe::p::householder<T>::seeded(d, 4), lrpe::lambda::rotation<T>(d, lrpe::freq::theta_a(rot))),
            "householder x interleaved, partial");
      // odd-even P before interleaved rotation (Types 5/6) is folded into one pass for even d:
      // full and partial rotary (pass-through features of Px after the rotated pairs)
      check(lrpe::encoder(lrpe::p::odd_even<T>(d), lrpe::lambda::rotation<T>(d, lrpe::freq::theta_a(rot))),
            "odd-even x interleaved rotation, partial");
      check(lrpe::type6<T>(d), "type6 (odd-even x rotation, full)");
    }
    const index_t e_phase = 1 + static_cast<index_t>(g.below(static_cast<std::uint64_t>(d)));
    CHECK(check(lrpe::encoder(lrpe::p::identity<T>(d), lrpe::lambda::complex_phase<T>(d)), "LRPE cosine") ==
          lrpe::simd_path::vectorised);
    check(lrpe::encoder(lrpe::p::identity<T>(d), lrpe::lambda::complex_phase<T>(d, lrpe::freq::complex_phase(e_phase))),
          "complex phase on a prefix");
    check(lrpe::encoder(lrpe::p::householder<T>::seeded(d, 5), lrpe::lambda::complex_phase<T>(d)), "householder x phase");
    check(lrpe::type8<T>(d, lrpe::freq::complex_phase(e_phase)), "type8 with a phase prefix");
    check(lrpe::type8<T>(d, lrpe::p::dft_method::dense), "type8 dense DFT reference");
    check(lrpe::encoder(lrpe::p::dct<T>(d), lrpe::lambda::rotation<T>(d, lrpe::freq::theta_a(d - d % 2))), "dct x rotation");
    check(lrpe::encoder(lrpe::p::dct<T>(d), lrpe::lambda::permutation_power<T>::seeded(d, 9)), "dct x permutation power");
    check(lrpe::encoder(lrpe::p::permutation<T>::seeded(d, 11),
                        lrpe::lambda::rotation<T>(d, lrpe::freq::theta_a(d - d % 2), lrpe::pairing::split_half)),
          "permutation x split-half");
    check(lrpe::encoder(lrpe::p::permutation<T>::seeded(d, 12), lrpe::lambda::permutation_power<T>::seeded(d, 13)),
          "permutation x permutation power");
    check(lrpe::encoder(lrpe::p::householder<T>::seeded(d, 14), lrpe::lambda::identity<T>(d)), "householder alone");
    check(lrpe::encoder(lrpe::p::permutation<T>::seeded(d, 16), lrpe::lambda::identity<T>(d)), "permutation alone");
    check(lrpe::encoder(lrpe::p::dense<T>(lrpe::p::householder<T>::seeded(d, 15).matrix()),
                        lrpe::lambda::rotation<T>(d, lrpe::freq::theta_a(d - d % 2))),
          "dense P x rotation");
  }
  MESSAGE("worst |simd - reference| over the chains: " << static_cast<double>(worst));
}

namespace {
/// A user Λ the SIMD backend does not know: sign flips on odd positions (a unitary family only
/// for this test's purpose of exercising the fallback; Λ⁽⁰⁾ = I).
template <class T>
struct sign_lambda {
  using scalar = T;
  static constexpr bool is_complex = false;
  index_t d;
  index_t dim() const { return d; }
  template <class V>
  void apply(position_t s, const V* x, V* y) const {
    for (index_t i = 0; i < d; ++i) y[i] = (s % 2 != 0 && i % 3 == 0) ? -x[i] : x[i];
  }
  lrpe::dense_matrix<T> matrix(position_t s) const {
    lrpe::dense_matrix<T> m = lrpe::dense_matrix<T>::Identity(d, d);
    for (index_t i = 0; i < d; i += 3)
      if (s % 2 != 0) m(i, i) = -1;
    return m;
  }
};
/// A user P the SIMD backend does not know (reversal), followed by a SIMD Λ.
template <class T>
struct reverse_p {
  using scalar = T;
  using output_type = T;
  static constexpr bool is_complex = false;
  index_t d;
  index_t dim() const { return d; }
  void apply(const T* x, T* y) const {
    for (index_t i = 0; i < d; ++i) y[i] = x[d - 1 - i];
  }
  void apply_adjoint(const T* y, T* x) const { apply(y, x); }
  lrpe::dense_matrix<T> matrix() const { return lrpe::dense_matrix<T>::Identity(d, d).rowwise().reverse(); }
};
}  // namespace

TEST_CASE_TEMPLATE("simd Type 8 at d = 32, 64, 128 (the per-row FFT on AVX-512 float, d = 64, 128 on AVX2 float) == reference", T, float, double) {
  lrpe::generator g(ref::seed(20261201) + 3);
  for (index_t d : {32, 64, 128}) {
    const lrpe::type8<T> t8(d);
    for (index_t n : {1, 17, 300}) {
      const pos_case pc = random_positions(g, n);
      INFO("d = " << d << ", n = " << n);
      CHECK(simd_vs_reference(t8, n, pc, g.next()) <= tol<T>(d));
    }
  }
}

TEST_CASE_TEMPLATE("simd: encoders without a SIMD kernel fall back and stay exact", T, float, double) {
  constexpr index_t d = 21, n = 17;
  const pos_case pc{false, 3, {}};
  // User Λ: the whole encoder goes through the reference path: the same scalar code, but each
  // caller may inline its own copy (the Householder dot product, Eigen's FFT), and GCC's
  // -ffp-contract=fast may fuse different products in each: equal to a few ulp, not bit for
  // bit (a wrong path is O(1) off).
  const lrpe::encoder user_l(lrpe::p::householder<T>::seeded(d, 1), sign_lambda<T>{d});
  static_assert(lrpe::simd_encoder<decltype(user_l)>::path == lrpe::simd_path::reference);
  CHECK(!lrpe::simd_encoder<decltype(user_l)>(user_l).vectorised());
  CHECK(simd_vs_reference(user_l, n, pc, 1) <= 4 * std::numeric_limits<T>::epsilon());
  // Complex P with a real Λ: reference path.
  const lrpe::encoder dft_rot(lrpe::p::dft<T>(16), lrpe::lambda::rotation<T>(16));
  static_assert(lrpe::simd_encoder<decltype(dft_rot)>::path == lrpe::simd_path::reference);
  CHECK(simd_vs_reference(dft_rot, n, pc, 2) <= 4 * std::numeric_limits<T>::epsilon());
  // User P with a SIMD Λ: P's own apply, then the vectorised rotation in the same pass.
  const lrpe::encoder user_p(reverse_p<T>{d}, lrpe::lambda::rotation<T>(d, lrpe::freq::theta_a(20), lrpe::pairing::split_half));
  static_assert(lrpe::simd_encoder<decltype(user_p)>::path == lrpe::simd_path::lambda_vectorised);
  CHECK(simd_vs_reference(user_p, n, pc, 3) <= tol<T>(d));
  // Type 8 at widths the row FFT does not take: per-call fallback to the same scalar code. Not
  // bit for bit: the two inlined copies of the scalar FFT may differ by an ulp in GCC's default
  // -ffp-contract=fast (which products it fuses into FMAs); any real fault is O(1).
  for (index_t dd : {12, 512}) {
    const lrpe::type8<T> t8(dd);
    CHECK(!lrpe::simd_encoder<lrpe::type8<T>>(t8).vectorised());
    CHECK(simd_vs_reference(t8, n, pc, 4) <= 4 * std::numeric_limits<T>::epsilon());
  }
}

TEST_CASE_TEMPLATE("simd encode_qk: BNSH / BSNH, shared and separate Q/K positions == reference per head", T, float,
                   double) {
  lrpe::generator g(ref::seed(20261201) + 2);
  const auto run = [&](const auto& e, bool bsnh, index_t nq, index_t nk, lrpe::positions qp, lrpe::positions kp) {
    const index_t B = 2, H = 3, d = e.dim(), f = e.feature_dim();
    const auto q = ref::random_rows<T>(B * H * nq, d, g.next());
    const auto k = ref::random_rows<T>(B * H * nk, d, g.next());
    lrpe::row_matrix<T> qo(B * H * nq, f), ko(B * H * nk, f);
    const auto hv = [&](auto* data, index_t seq, index_t w) {
      return bsnh ? lrpe::bsnh(data, B, seq, H, w) : lrpe::bnsh(data, B, H, seq, w);
    };
    lrpe::encode_qk(simd{}, e, hv(q.data(), nq, d), qp, hv(k.data(), nk, d), kp, hv(qo.data(), nq, f),
                    hv(ko.data(), nk, f));
    // the simd_policy tag is the same kernel on the calling thread: bit for bit
    lrpe::row_matrix<T> qpol(B * H * nq, f), kpol(B * H * nk, f);
    lrpe::encode_qk(lrpe::backend::simd_policy<typename simd::arch_type>{}, e, hv(q.data(), nq, d), qp,
                    hv(k.data(), nk, d), kp, hv(qpol.data(), nq, f), hv(kpol.data(), nk, f));
    CHECK(qpol == qo);
    CHECK(kpol == ko);
    lrpe::row_matrix<T> qr(B * H * nq, f), kr(B * H * nk, f);
    lrpe::encode_qk(lrpe::backend::reference{}, e, hv(q.data(), nq, d), qp, hv(k.data(), nk, d), kp,
                    hv(qr.data(), nq, f), hv(kr.data(), nk, f));
    return std::max(ref::max_abs_diff(qo, qr), ref::max_abs_diff(ko, kr));
  };
  const std::vector<position_t> arr = {5, -3, 1'000'000, 7, 7, 0, 42};
  const auto arr3 = [](index_t n) {  // positions 3·i − 40 (an array: no run of consecutive rows)
    std::vector<position_t> v;
    for (index_t i = 0; i < n; ++i) v.push_back(3 * i - 40);
    return v;
  };
  for (bool bsnh : {false, true}) {
    for (index_t d : {7, 64}) {
      const lrpe::rope_neox<T> neox(d);
      const lrpe::rope_gptj<T> gptj(d);
      const lrpe::type8<T> t8(64);
      const lrpe::type4<T> t4(d);
      const lrpe::type1<T> t1(d);
      CHECK(run(neox, bsnh, 19, 19, 0, 0) <= tol<T>(d));                  // shared table
      CHECK(run(t1, bsnh, 37, 37, 3, 3) <= tol<T>(d));                    // Householder row map, strided groups
      CHECK(run(gptj, bsnh, 19, 19, 100, 0) <= tol<T>(d));                // same length, other positions
      CHECK(run(gptj, bsnh, 1, 33, 32, 0) <= tol<T>(d));                  // decode step vs cache
      CHECK(run(t4, bsnh, 7, 7, arr, arr) <= tol<T>(d));                  // shared array
      CHECK(run(t8, bsnh, 7, 40, arr, -999'990) <= tol<T>(64));           // FFT path, strided rows
    }
    // Permutation powers take the rows of one position from w matrices at a time on AVX/AVX2
    // (12 matrices here: a group and a remainder for w = 8, three groups for w = 4; separate
    // positions, 6 a side: a group and a remainder for w = 4), after P = I, a composed odd-even
    // P and a Householder P; d = 264 is past the tile permute's widest row. The explicit-arch
    // case below covers more blocks and remainders.
    for (index_t d : {8, 24, 64, 264}) {
      INFO("d = " << d << (bsnh ? ", BSNH" : ", BNSH"));
      CHECK(run(lrpe::permuteformer<T>(d), bsnh, 21, 21, -5, -5) <= tol<T>(d));
      CHECK(run(lrpe::type7<T>(d), bsnh, 21, 21, 1'000'000, 1'000'000) <= tol<T>(d));
      CHECK(run(lrpe::type4<T>(d), bsnh, 21, 21, arr3(21), arr3(21)) <= tol<T>(d));
      CHECK(run(lrpe::type4<T>(d), bsnh, 21, 9, 0, 12) <= tol<T>(d));  // separate positions: 6 matrices
    }
  }
}

namespace {
/// A (batch, head, seq, dim) layout over one buffer: element (b, h, s, j) at
/// offset + b·bs + h·hs + s·ss + j.
struct layout {
  const char* name;
  index_t offset, bs, hs, ss;
  index_t size(index_t B, index_t H, index_t n, index_t w) const {
    return offset + (B - 1) * bs + (H - 1) * hs + (n - 1) * ss + w;
  }
  template <class T>
  lrpe::heads_view<T> view(T* data, index_t B, index_t H, index_t n, index_t w) const {
    return {data + offset, B, H, n, w, bs, hs, ss};
  }
};

/// Layouts of Q (side 0) or K (side 1), n rows, width w, H heads: BNSH, BSNH,
/// a packed QKV projection ([B, n, 3, H, w]: K's heads continue Q's), and BSNH with gaps
/// between heads and positions (misaligned rows: no non-temporal stores).
std::vector<layout> qk_layouts(index_t side, index_t H, index_t n, index_t w) {
  return {{"BNSH", 0, H * n * w, n * w, w},
          {"BSNH", 0, n * H * w, w, H * w},
          {"packed QKV", side * H * w, n * 3 * H * w, w, 3 * H * w},
          {"BSNH with gaps", 1, n * (H * (w + 1) + 3), w + 1, H * (w + 1) + 3}};
}

/// Q and K of B×H heads from and into the layouts of `qk_layouts` (each into itself, and
/// mixed), cached and streamed (threshold 0), by `simd_encoder<E, Arch>`: the same bits as
/// BNSH cached, which is within the stated tolerance of the reference backend. Interleaved
/// input heads (every layout but BNSH) run a position at a time across heads; the rows' values
/// must not depend on that.
template <class Arch, class E>
void check_layouts_bits(const E& e, index_t B, index_t H, index_t nq, index_t nk, lrpe::positions qp,
                        lrpe::positions kp, std::uint64_t seed) {
  using T = typename E::scalar;
  const index_t d = e.dim(), f = e.feature_dim();
  const auto q = ref::random_rows<T>(B * H * nq, d, seed);  // logical [B, H, n, d]
  const auto k = ref::random_rows<T>(B * H * nk, d, seed + 1);
  const auto scatter = [&](const lrpe::row_matrix<T>& src, const layout& l, index_t n, std::vector<T>& buf) {
    const auto v = l.view(buf.data(), B, H, n, d);
    for (index_t b = 0; b < B; ++b)
      for (index_t h = 0; h < H; ++h)
        for (index_t s = 0; s < n; ++s)
          for (index_t j = 0; j < d; ++j) v.head(b, h)(s, j) = src((b * H + h) * n + s, j);
  };
  const auto gather = [&](const std::vector<T>& buf, const layout& l, index_t n) {
    lrpe::row_matrix<T> out(B * H * n, f);
    const auto v = l.view(const_cast<T*>(buf.data()), B, H, n, f);
    for (index_t b = 0; b < B; ++b)
      for (index_t h = 0; h < H; ++h)
        for (index_t s = 0; s < n; ++s)
          for (index_t j = 0; j < f; ++j) out((b * H + h) * n + s, j) = v.head(b, h)(s, j);
    return out;
  };
  lrpe::row_matrix<T> base_q, base_k;
  // (input layout, output layout): each layout into itself, and the mixes of a framework's
  // transposed views (BSNH memory in, BNSH out, and the other way round).
  constexpr std::pair<std::size_t, std::size_t> pairs[] = {{0, 0}, {1, 1}, {2, 2}, {3, 3}, {1, 0}, {2, 0}, {0, 1}};
  for (const auto& [li, lo] : pairs) {
    const layout lq = qk_layouts(0, H, nq, d)[li], lk = qk_layouts(1, H, nk, d)[li];
    const layout oq = qk_layouts(0, H, nq, f)[lo], ok = qk_layouts(1, H, nk, f)[lo];
    // Packed QKV: Q and K share one buffer (K's heads continue Q's when nq = nk).
    const bool packed_in = li == 2 && nq == nk, packed_out = lo == 2 && nq == nk;
    std::vector<T> in_q(static_cast<std::size_t>(lq.size(B, H, nq, d)), T(0));
    std::vector<T> in_k(static_cast<std::size_t>(lk.size(B, H, nk, d)), T(0));
    std::vector<T> out_q(static_cast<std::size_t>(oq.size(B, H, nq, f)), T(0));
    std::vector<T> out_k(static_cast<std::size_t>(ok.size(B, H, nk, f)), T(0));
    if (packed_in) in_q.resize(std::max(in_q.size(), in_k.size()));
    if (packed_out) out_q.resize(std::max(out_q.size(), out_k.size()));
    std::vector<T>& kin = packed_in ? in_q : in_k;
    std::vector<T>& kout = packed_out ? out_q : out_k;
    scatter(q, lq, nq, in_q);
    scatter(k, lk, nk, kin);
    for (std::size_t threshold : {lrpe::simd_encoder<E, Arch>::default_stream_threshold, std::size_t{0}}) {
      lrpe::simd_encoder<E, Arch> se(e);
      se.set_stream_threshold(threshold);
      se.encode_qk(lq.view(static_cast<const T*>(in_q.data()), B, H, nq, d), qp,
                   lk.view(static_cast<const T*>(kin.data()), B, H, nk, d), kp, oq.view(out_q.data(), B, H, nq, f),
                   ok.view(kout.data(), B, H, nk, f));
      const auto got_q = gather(out_q, oq, nq), got_k = gather(kout, ok, nk);
      const std::string what = std::string(lq.name) + " into " + oq.name + (threshold == 0 ? ", streamed" : ", cached");
      INFO(what);
      if (base_q.size() == 0) {
        base_q = got_q;
        base_k = got_k;
        lrpe::row_matrix<T> qr(B * H * nq, f), kr(B * H * nk, f);
        lrpe::encode_qk(lrpe::backend::reference{}, e, lrpe::bnsh(q.data(), B, H, nq, d), qp,
                        lrpe::bnsh(k.data(), B, H, nk, d), kp, lrpe::bnsh(qr.data(), B, H, nq, f),
                        lrpe::bnsh(kr.data(), B, H, nk, f));
        CHECK(ref::max_abs_diff(base_q, qr) <= tol<T>(d));
        CHECK(ref::max_abs_diff(base_k, kr) <= tol<T>(d));
      } else {
        CHECK((got_q.array() == base_q.array()).all());
        CHECK((got_k.array() == base_k.array()).all());
      }
    }
  }
}
}  // namespace

TEST_CASE_TEMPLATE("simd encode_qk: heads interleaved by rows (BSNH, packed QKV, gaps) give BNSH's bits", E,
                   LRPE_PRESETS(float), LRPE_PRESETS(double)) {
  for (index_t d : {64, 13}) {
    INFO("d = " << d);
    const E e = make<E>(d);
    // 2 × 5 heads; 261 rows: two position blocks, shared positions (Q and K heads in one run
    // for the packed layout) and separate ones.
    check_layouts_bits<xsimd::default_arch>(e, 2, 5, 261, 261, 3, 3, 21);
    check_layouts_bits<xsimd::default_arch>(e, 1, 3, 17, 40, 23, 0, 22);
    check_layouts_bits<xsimd::default_arch>(e, 1, 4, 70, 70, 5, 5, 23);  // packed: Q's and K's heads one run of 8
  }
}

TEST_CASE_TEMPLATE("simd encode_qk: P alone, complex phase and a scratch-block chain, interleaved heads", T, float,
                   double) {
  for (index_t d : {64, 13}) {
    INFO("d = " << d);
    using A = xsimd::default_arch;
    check_layouts_bits<A>(lrpe::encoder(lrpe::p::permutation<T>::seeded(d, 5), lrpe::lambda::identity<T>(d)), 2, 5,
                          261, 261, 0, 0, 31);
    check_layouts_bits<A>(lrpe::encoder(lrpe::p::householder<T>::seeded(d, 5), lrpe::lambda::identity<T>(d)), 2, 5,
                          261, 261, 0, 0, 32);
    check_layouts_bits<A>(lrpe::encoder(lrpe::p::identity<T>(d), lrpe::lambda::complex_phase<T>(d)), 2, 5, 261, 261,
                          -4, -4, 33);
    check_layouts_bits<A>(lrpe::encoder(lrpe::p::dct<T>(d), lrpe::lambda::rotation<T>(d)), 2, 5, 40, 40, 7, 7, 34);
  }
  for (index_t d : {32, 128, 256}) {  // Type 8: the FFT across rows and per row
    INFO("d = " << d);
    check_layouts_bits<xsimd::default_arch>(lrpe::type8<T>(d), 2, 5, 40, 40, 1, 1, 35);
  }
}

#if defined(__AVX2__) && defined(__FMA__)
namespace {
/// Q and K of H heads by `simd_encoder<E, Arch>` against the reference backend, BNSH or BSNH,
/// cached and streamed (threshold 0: BSNH heads are adjacent, so their tiles stream too; BNSH
/// heads are n·d apart and stream a matrix at a time). Streamed and cached must agree bit for bit.
template <class Arch, class E>
long double qk_vs_reference(const E& e, index_t H, index_t nq, index_t nk, lrpe::positions qp, lrpe::positions kp,
                            std::uint64_t seed) {
  using T = typename E::scalar;
  const index_t d = e.dim(), f = e.feature_dim();
  const auto q = ref::random_rows<T>(H * nq, d, seed);
  const auto k = ref::random_rows<T>(H * nk, d, seed + 1);
  long double worst = 0;
  for (bool bsnh : {false, true}) {
    const auto hv = [&](auto* data, index_t seq, index_t width) {
      return bsnh ? lrpe::bsnh(data, 1, seq, H, width) : lrpe::bnsh(data, 1, H, seq, width);
    };
    lrpe::row_matrix<T> qo(H * nq, f), ko(H * nk, f), qs(H * nq, f), ks(H * nk, f), qr(H * nq, f), kr(H * nk, f);
    lrpe::simd_encoder<E, Arch> se(e);
    se.encode_qk(hv(q.data(), nq, d), qp, hv(k.data(), nk, d), kp, hv(qo.data(), nq, f), hv(ko.data(), nk, f));
    se.set_stream_threshold(0);
    se.encode_qk(hv(q.data(), nq, d), qp, hv(k.data(), nk, d), kp, hv(qs.data(), nq, f), hv(ks.data(), nk, f));
    lrpe::encode_qk(lrpe::backend::reference{}, e, hv(q.data(), nq, d), qp, hv(k.data(), nk, d), kp,
                    hv(qr.data(), nq, f), hv(kr.data(), nk, f));
    INFO((bsnh ? "BSNH" : "BNSH"));
    CHECK((qs.array() == qo.array()).all());
    CHECK((ks.array() == ko.array()).all());
    worst = std::max({worst, ref::max_abs_diff(qo, qr), ref::max_abs_diff(ko, kr)});
  }
  return worst;
}

/// One matrix of n rows by `simd_encoder<E, Arch>`, cached and streamed, against the reference.
template <class Arch, class E>
long double one_vs_reference(const E& e, index_t n, position_t offset, std::uint64_t seed) {
  using T = typename E::scalar;
  const auto x = ref::random_rows<T>(n, e.dim(), seed);
  const auto want = e.encode(x, lrpe::positions(offset));
  lrpe::simd_encoder<E, Arch> se(e);
  lrpe::row_matrix<T> got(n, e.feature_dim()), streamed(n, e.feature_dim());
  se.encode(lrpe::view(x), offset, lrpe::view(got));
  se.set_stream_threshold(0);
  se.encode(lrpe::view(x), offset, lrpe::view(streamed));
  return std::max(ref::max_abs_diff(got, want), ref::max_abs_diff(streamed, want));
}

template <class Arch, class T>
void check_avx_kernels() {
  // 9 heads: shared positions give 18 matrices (two groups and 2 left for w = 8, four and 2
  // for w = 4), separate ones 9 a side (8 + 1, 4 + 4 + 1); 300 rows: two position blocks.
  const std::vector<position_t> arr = [] {
    std::vector<position_t> v;
    for (index_t i = 0; i < 300; ++i) v.push_back(7 * i - 1000);
    return v;
  }();
  for (index_t d : {24, 64}) {
    INFO("d = " << d);
    CHECK(qk_vs_reference<Arch>(lrpe::permuteformer<T>(d), 9, 300, 300, -5, -5, 11) <= tol<T>(d));
    CHECK(qk_vs_reference<Arch>(lrpe::permuteformer<T>(d), 9, 300, 40, 0, 260, 12) <= tol<T>(d));
    CHECK(qk_vs_reference<Arch>(lrpe::type7<T>(d), 9, 300, 300, 999'000, 999'000, 13) <= tol<T>(d));
    CHECK(qk_vs_reference<Arch>(lrpe::type4<T>(d), 9, 300, 300, arr, arr, 14) <= tol<T>(d));
  }
  for (index_t d : {8, 16, 32, 64, 128, 40}) {  // Type 1: the unrolled rotation at d = 8K, K ∈ {1, 2, 4, 8, 16}
    INFO("d = " << d);
    CHECK(one_vs_reference<Arch>(lrpe::type1<T>(d), 45, 3, 15) <= tol<T>(d));
  }
  for (index_t d : {64, 40}) {  // a position at a time across interleaved heads (BSNH, packed QKV)
    INFO("d = " << d);
    check_layouts_bits<Arch>(lrpe::type1<T>(d), 2, 5, 261, 261, 3, 3, 41);
    check_layouts_bits<Arch>(lrpe::rope_neox<T>(d), 2, 5, 40, 40, 0, 0, 42);
    check_layouts_bits<Arch>(lrpe::type5<T>(d), 2, 5, 40, 40, 9, 9, 43);
    check_layouts_bits<Arch>(lrpe::permuteformer<T>(d), 2, 8, 40, 40, 2, 2, 45);  // tiles across the heads
    check_layouts_bits<Arch>(lrpe::type4<T>(d), 1, 9, 40, 40, 0, 0, 46);
    check_layouts_bits<Arch>(lrpe::encoder(lrpe::p::permutation<T>::seeded(d, 17), lrpe::lambda::identity<T>(d)), 2,
                             5, 40, 40, 0, 0, 44);
  }
  for (index_t d : {64, 40, 61}) {  // P alone by tiles of consecutive rows, cached and streamed
    INFO("d = " << d);
    CHECK(one_vs_reference<Arch>(lrpe::encoder(lrpe::p::permutation<T>::seeded(d, 17), lrpe::lambda::identity<T>(d)), 301,
                                 0, 16) <= tol<T>(d));
  }
}
}  // namespace

TEST_CASE("simd lookup_bytes (the permutation powers' byte table step) == a scalar lookup, every table size") {
  // Every lut size 1 … 256 (1 … 16 shuffles, every blend level including index bit 7), rows of
  // d = 1 … 300 (tails past the 32-entry vectors), random indices below the lut size, in place too.
  using A = xsimd::fma3<xsimd::avx2>;
  std::mt19937 gen(5);
  for (index_t size = 1; size <= 256; ++size) {
    std::vector<std::uint8_t> lut(static_cast<std::size_t>((size + 15) / 16 * 16), 0);
    for (auto& v : lut) v = static_cast<std::uint8_t>(gen());
    for (index_t d : {index_t{1}, index_t{31}, index_t{32}, index_t{64}, size, index_t{300}}) {
      std::vector<std::uint8_t> in(static_cast<std::size_t>(d)), out(in.size()), want(in.size());
      for (auto& v : in) v = static_cast<std::uint8_t>(gen() % static_cast<unsigned>(size));
      for (std::size_t j = 0; j < in.size(); ++j) want[j] = lut[in[j]];
      lrpe::backend::simd_detail::lookup_bytes<A>(lut.data(), size, in.data(), out.data(), d);
      INFO("lut size " << size << ", d = " << d);
      CHECK(out == want);
      lrpe::backend::simd_detail::lookup_bytes<A>(lut.data(), size, in.data(), in.data(), d);  // in place
      CHECK(in == want);
    }
  }
}

#endif  // the permutation-power case below runs its body only there, and is a shard of its own

TEST_CASE_TEMPLATE("simd permutation powers by byte tables (AVX2, d <= 256) and by entries (d > 256) == reference", T,
                   float, double) {
#if defined(__AVX2__) && defined(__FMA__)
  // BNSH streamed: every matrix a row at a time from the byte table; cached: 2 tile groups of
  // the 18 matrices and 2 left over from it. P = I (tables by `lookup_bytes`), a permutation P
  // composed into the table in bytes, a DCT P into scratch, positions as offsets and as an array.
  using A = xsimd::fma3<xsimd::avx2>;
  const std::vector<position_t> arr = [] {
    std::vector<position_t> v;
    for (index_t i = 0; i < 270; ++i) v.push_back(13 * i - 777);
    return v;
  }();
  for (index_t d : {13, 40, 100, 128, 200, 256, 264}) {
    INFO("d = " << d);
    CHECK(qk_vs_reference<A>(lrpe::permuteformer<T>(d), 9, 270, 270, 3, 3, 51) <= tol<T>(d));
    CHECK(qk_vs_reference<A>(lrpe::permuteformer<T>(d), 9, 270, 270, arr, arr, 52) <= tol<T>(d));
    CHECK(qk_vs_reference<A>(lrpe::type7<T>(d), 9, 270, 270, -40, -40, 53) <= tol<T>(d));
    CHECK(qk_vs_reference<A>(lrpe::encoder(lrpe::p::permutation<T>::seeded(d, 3), lrpe::lambda::permutation_power<T>::seeded(d, 4)), 9,
                             270, 30, arr, 11, 54) <= tol<T>(d));
    CHECK(qk_vs_reference<A>(lrpe::encoder(lrpe::p::dct<T>(d), lrpe::lambda::permutation_power<T>::seeded(d, 5)), 9, 270,
                             270, 1, 1, 55) <= tol<T>(d));
  }
#else
  MESSAGE("no AVX2 + FMA in this build: the byte-table kernels are not compiled");
#endif
}

#if defined(__AVX2__) && defined(__FMA__)
TEST_CASE_TEMPLATE("simd encode with the AVX2 and AVX kernels named explicitly (run on AVX-512 hosts too) == reference",
                   T, float, double) {
  SUBCASE("fma3<avx2>") { check_avx_kernels<xsimd::fma3<xsimd::avx2>, T>(); }
  SUBCASE("avx") { check_avx_kernels<xsimd::avx, T>(); }
}
#endif

TEST_CASE("simd angles at position ±1e6 in float match a long-double reference (same tolerance as scalar)") {
  // As tests/test_presets.cpp for the scalar encoder: x = e_{pair} maps to (cos, sin) of s·θ_k.
  // Stated tolerance 2.5e-7; a float-only angle is off by > 1e-3, so the check can fail.
  constexpr index_t d = 64;
  for (position_t s : {position_t{1'000'000}, position_t{-1'000'000}, position_t{999'983}}) {
    for (auto mode : {lrpe::pairing::interleaved, lrpe::pairing::split_half}) {
      const lrpe::encoder e(lrpe::p::identity<float>(d), lrpe::lambda::rotation<float>(d, mode));
      lrpe::row_matrix<float> x = lrpe::row_matrix<float>::Zero(d / 2, d);
      for (index_t k = 0; k < d / 2; ++k) x(k, e.lambda().pair(k).first) = 1;
      // All rows at position s (array), so each row k reads pair k of the same table row.
      const std::vector<position_t> pos(static_cast<std::size_t>(d / 2), s);
      lrpe::row_matrix<float> y(d / 2, d);
      lrpe::encode(simd{}, e, lrpe::view(x), pos, lrpe::view(y));
      long double worst = 0, worst_naive = 0;
      for (index_t k = 0; k < d / 2; ++k) {
        const long double theta = std::pow(10000.0L, -2.0L * k / d);
        const long double c = std::cos(static_cast<long double>(s) * theta);
        const long double sn = std::sin(static_cast<long double>(s) * theta);
        const auto [i, j] = e.lambda().pair(k);
        worst = std::max({worst, std::abs(y(k, i) - c), std::abs(y(k, j) - sn)});
        worst_naive = std::max(worst_naive,
                               std::abs(std::cos(static_cast<float>(s) * static_cast<float>(theta)) - c));
      }
      MESSAGE("s = " << s << ", simd float max error " << static_cast<double>(worst));
      CHECK(worst <= 2.5e-7L);
      CHECK(worst_naive > 1e-3L);
    }
    // Complex phase (LRPE cosine and, through the FFT path, Type 8's Λ): x = 1 gives e^{i s θ_j}.
    const lrpe::encoder cosine{lrpe::p::identity<float>(d), lrpe::lambda::complex_phase<float>(d)};
    const lrpe::row_matrix<float> ones = lrpe::row_matrix<float>::Ones(1, d);
    lrpe::row_matrix<float> y(1, 2 * d);
    lrpe::encode(simd{}, cosine, lrpe::view(ones), s, lrpe::view(y));
    long double worst = 0;
    for (index_t j = 0; j < d; ++j) {
      const long double a = static_cast<long double>(s) * std::pow(10000.0L, -2.0L * j / d);
      worst = std::max({worst, std::abs(y(0, j) - std::cos(a)), std::abs(y(0, d + j) - std::sin(a))});
    }
    CHECK(worst <= 2.5e-7L);
  }
}

namespace {
/// The stream threshold only picks the store instruction, so streamed results must equal the
/// cached ones bit for bit, for aligned outputs (streamed) and outputs one element off (not
/// streamed); and the result is still the reference's.
template <class E>
void check_streamed_bits(const E& e) {
  using T = typename E::scalar;
  constexpr index_t n = 77;
  const index_t d = e.dim(), f = e.feature_dim();
  const auto x = ref::random_rows<T>(n, d, 4242);
  lrpe::simd_encoder<E> se(e);
  CHECK(se.stream_threshold() == lrpe::simd_encoder<E>::default_stream_threshold);
  lrpe::row_matrix<T> cached(n, f);
  se.encode(lrpe::view(x), 11, lrpe::view(cached));
  se.set_stream_threshold(0);
  lrpe::row_matrix<T> streamed = lrpe::row_matrix<T>::Constant(n, f, T(7));
  se.encode(lrpe::view(x), 11, lrpe::view(streamed));
  CHECK((streamed.array() == cached.array()).all());
  std::vector<T> buf(static_cast<std::size_t>(n * f + 1), T(7));
  const lrpe::matrix_view<T> shifted{buf.data() + 1, n, f, f};  // not vector-aligned
  se.encode(lrpe::view(x), 11, shifted);
  bool same = true;
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < f; ++j) same = same && buf[static_cast<std::size_t>(i * f + j + 1)] == cached(i, j);
  CHECK(same);
  CHECK(ref::max_abs_diff(cached, e.encode(x, lrpe::positions(11))) <= tol<T>(d));
}
}  // namespace

TEST_CASE_TEMPLATE("simd encode: non-temporal stores give the same bits; misaligned outputs fall back", E,
                   LRPE_PRESETS(float), LRPE_PRESETS(double)) {
  check_streamed_bits(make<E>(64));
}

TEST_CASE_TEMPLATE("simd encode: Type 8 at d = 128 (the AVX2 row FFT over eight registers) streams the same bits", T,
                   float, double) {
  check_streamed_bits(lrpe::type8<T>(128));
}

TEST_CASE_TEMPLATE("simd encode: a permutation P alone (Λ = I) streams the same bits", T, float, double) {
  // P writes the output itself here (no Λ pass), with non-temporal stores past the threshold.
  for (index_t d : {64, 61}) {
    INFO("d = " << d);
    check_streamed_bits(lrpe::encoder(lrpe::p::permutation<T>::seeded(d, 3), lrpe::lambda::identity<T>(d)));
  }
}

TEST_CASE_TEMPLATE("simd tables over runs of positions match a long-double reference at every int64 offset", T,
                   float, double) {
  // Consecutive positions take cos_sin_rows::fill_run (float: one sincos per 64 positions, the
  // rest by a complex product in double; double: every row); an array of the same positions
  // takes the direct sincos. With x = 1, LRPE cosine's features are (cos sθ_j, sin sθ_j) of the
  // library's double θ_j, against ref::cis (exact angle). Stated bound: 4·ε(T) (a few ulps of
  // 1: each feature is one cos or sin rounded to T) at every position — the angles are exact,
  // nothing grows with s. An angle formed as fl(s·θ) fails it from s ≈ 2^31 (float) or s ≈ 10
  // (double). d = 61: the angle's vector tail too.
  constexpr index_t d = 61, n = 700;
  const lrpe::encoder cosine{lrpe::p::identity<T>(d), lrpe::lambda::complex_phase<T>(d)};
  const auto theta = cosine.lambda().frequencies();
  const lrpe::row_matrix<T> ones = lrpe::row_matrix<T>::Ones(n, d);
  lrpe::row_matrix<T> y(n, 2 * d), direct(n, 2 * d);
  const long double bound = 4.0L * std::numeric_limits<T>::epsilon();
  for (position_t s0 : {position_t{0}, position_t{-350}, position_t{999'700}, position_t{-1'000'000},
                        position_t{2'147'483'600}, position_t{1'000'000'000}, (position_t{1} << 53) - 300,
                        -(position_t{1} << 53) - 5, (position_t{1} << 62) + 12'345,
                        std::numeric_limits<position_t>::max() - (n - 1), std::numeric_limits<position_t>::min()}) {
    lrpe::encode(simd{}, cosine, lrpe::view(ones), s0, lrpe::view(y));
    std::vector<position_t> arr(static_cast<std::size_t>(n));
    for (index_t i = 0; i < n; ++i) arr[static_cast<std::size_t>(i)] = s0 + i;
    lrpe::encode(simd{}, cosine, lrpe::view(ones), arr, lrpe::view(direct));  // array: direct sincos
    long double worst = 0, worst_direct = 0;
    for (index_t i = 0; i < n; ++i) {
      for (index_t j = 0; j < d; ++j) {
        const ref::cld z = ref::cis(s0 + i, theta[static_cast<std::size_t>(j)]);
        worst = std::max({worst, std::abs(y(i, j) - z.real()), std::abs(y(i, d + j) - z.imag())});
        worst_direct = std::max({worst_direct, std::abs(direct(i, j) - z.real()), std::abs(direct(i, d + j) - z.imag())});
      }
    }
    MESSAGE("s0 = " << s0 << ": max error run " << static_cast<double>(worst) << ", direct "
                    << static_cast<double>(worst_direct) << " (bound " << static_cast<double>(bound) << ")");
    CHECK(worst <= bound);
    CHECK(worst_direct <= bound);
  }
}

TEST_CASE_TEMPLATE("simd encoder with direct position tables == stepped == reference; nothing built for P = I", T,
                   float, double) {
  // position_tables::direct evaluates every row's angles by the vectorised sincos (the path of
  // a decode step's few rows); the default tables take the run path for consecutive positions
  // in float. Both are the reference within the stated tolerance, at n = 1 (a decode step), a
  // few rows, and runs across a 64-position step and a 256-position block, near 0 and 10⁶.
  lrpe::generator g(ref::seed(20261123));
  const auto check = [&](const auto& e, const char* what) {
    const index_t d = e.dim();
    for (index_t n : {index_t{1}, index_t{5}, index_t{300}}) {
      for (position_t s0 : {position_t{0}, position_t{-40}, position_t{999'937}}) {
        const auto x = ref::random_rows<T>(n, d, g.next());
        const auto want = e.encode(x, lrpe::positions(s0));
        lrpe::row_matrix<T> stepped(n, e.feature_dim()), direct(n, e.feature_dim());
        using E = std::remove_cvref_t<decltype(e)>;
        lrpe::simd_encoder<E>(e).encode(lrpe::view(x), s0, lrpe::view(stepped));
        lrpe::simd_encoder<E>(e, lrpe::position_tables::direct).encode(lrpe::view(x), s0, lrpe::view(direct));
        INFO(what << ": n = " << n << ", s0 = " << s0);
        CHECK(ref::max_abs_diff(direct, want) <= tol<T>(d));
        CHECK(ref::max_abs_diff(stepped, want) <= tol<T>(d));
      }
    }
    // Constructing with direct tables allocates nothing when P = I (the stepped float tables
    // are 64·(d/2) cos/sin pairs in double).
    using E = std::remove_cvref_t<decltype(e)>;
    if constexpr (std::is_same_v<typename E::p_type, lrpe::p::identity<T>>) {
      g_allocs = 0;
      const lrpe::simd_encoder<E> se(e, lrpe::position_tables::direct);
      CHECK(g_allocs.load() == 0);
      g_allocs = 0;
      const lrpe::simd_encoder<E> se_stepped(e);
      if constexpr (std::is_same_v<T, float>) CHECK(g_allocs.load() > 0);  // the step tables (float only)
    }
  };
  check(lrpe::rope_gptj<T>(64), "rope_gptj");
  check(lrpe::rope_neox<T>(33), "rope_neox, odd d");
  check(lrpe::encoder{lrpe::p::identity<T>(20), lrpe::lambda::complex_phase<T>(20)}, "LRPE cosine");
  // A P with a kernel to build still works with direct tables.
  check(lrpe::type4<T>(16), "type4");
}

TEST_CASE_TEMPLATE("simd encoder, direct tables: the remembered last row never crosses encoders or positions", T,
                   float, double) {
  // Direct tables remember the last row of angles per thread (a decode step's q and k of every
  // head share one). Interleaved one-row calls at one position with different θ (bases 10⁴ and
  // 5·10⁵; a rotary width of 32 of 64: fewer angles; a prefix of a's θ), equal θ in another
  // object, and the next positions: each must be its own reference.
  const lrpe::rope_neox<T> a(64), b(64, 500000.0), c(64, 10000.0, 32), a2(64);
  // θ of a's first 16 angles only: a call of it after a leaves a's other 16 θ in the memory, so
  // a key without the count would take a's next call at that position as a hit.
  const std::vector<double> head16(a.lambda().frequencies().begin(), a.lambda().frequencies().begin() + 16);
  const lrpe::encoder prefix{lrpe::p::identity<T>(64),
                             lrpe::lambda::rotation<T>(64, head16, lrpe::pairing::split_half)};
  lrpe::generator g(ref::seed(20261124));
  const auto x = ref::random_rows<T>(1, 64, g.next());
  const auto one = [&](const auto& e, position_t s) {
    lrpe::row_matrix<T> got(1, 64);
    using E = std::remove_cvref_t<decltype(e)>;
    lrpe::simd_encoder<E>(e, lrpe::position_tables::direct).encode(lrpe::view(x), s, lrpe::view(got));
    return ref::max_abs_diff(got, e.encode(x, lrpe::positions(s)));
  };
  for (position_t s : {position_t{7}, position_t{7}, position_t{8}, position_t{-3}, position_t{1'000'001}}) {
    INFO("s = " << s);
    CHECK(one(a, s) <= tol<T>(64));
    CHECK(one(b, s) <= tol<T>(64));
    CHECK(one(a2, s) <= tol<T>(64));
    CHECK(one(c, s) <= tol<T>(64));
    CHECK(one(a, s + 1) <= tol<T>(64));
    CHECK(one(prefix, s + 2) <= tol<T>(64));
    CHECK(one(a, s + 2) <= tol<T>(64));
  }
}

TEST_CASE_TEMPLATE("simd encode: no heap allocation per call with a held simd_encoder", T, float, double) {
  constexpr index_t n = 300, d = 64;
  const auto x = ref::random_rows<T>(n, d, 77);
  const auto measure = [&](const auto& e) {
    lrpe::row_matrix<T> out(n, e.feature_dim());
    const lrpe::simd_encoder<std::remove_cvref_t<decltype(e)>> se(e);
    se.encode(lrpe::view(x), 5, lrpe::view(out));  // warm-up
    g_allocs = 0;
    g_max_alloc = 0;
    se.encode(lrpe::view(x), 5, lrpe::view(out));
    const long held = g_allocs.load();
    // The one-shot free function builds its kernels per call: small allocations only.
    lrpe::encode(simd{}, e, lrpe::view(x), 5, lrpe::view(out));
    return std::pair{held, g_max_alloc.load()};
  };
  const auto check = [&](const auto& e, const char* what) {
    const auto [held, biggest] = measure(e);
    INFO(what);
    CHECK(held == 0);
    CHECK(biggest <= 64 * 1024);
  };
  check(lrpe::rope_gptj<T>(d), "rope_gptj");
  check(lrpe::rope_neox<T>(d), "rope_neox");
  check(lrpe::type1<T>(d), "type1");
  check(lrpe::type4<T>(d), "type4");
  check(lrpe::type7<T>(d), "type7");
  check(lrpe::type8<T>(d), "type8");
  check(lrpe::permuteformer<T>(d), "permuteformer");
}

TEST_CASE("simd encode: shape errors like the reference") {
  const lrpe::rope_gptj<float> e(8);
  lrpe::row_matrix<float> x(4, 8), bad_out(4, 7), out(3, 8);
  CHECK_THROWS_AS(lrpe::encode(simd{}, e, lrpe::view(x), 0, lrpe::view(bad_out)), lrpe::shape_error);
  CHECK_THROWS_AS(lrpe::encode(simd{}, e, lrpe::view(x), 0, lrpe::view(out)), lrpe::shape_error);
  const std::vector<position_t> short_pos = {1, 2};
  lrpe::row_matrix<float> ok(4, 8);
  CHECK_THROWS_AS(lrpe::encode(simd{}, e, lrpe::view(x), short_pos, lrpe::view(ok)), lrpe::shape_error);
}

TEST_CASE("simd encode: an offset whose last row's position overflows int64 is an error, as in the reference") {
  const lrpe::rope_neox<float> e(64);
  const auto x = ref::random_rows<float>(8, 64, 5);
  lrpe::row_matrix<float> out(8, 64);
  constexpr position_t max = std::numeric_limits<position_t>::max();
  // 8 rows from max − 2: rows 3 … 7 would be past 2^63 − 1 (the reference throws; so must SIMD)
  CHECK_THROWS_WITH_AS(e.encode(lrpe::view(x), max - 2, lrpe::view(out)), doctest::Contains("'positions'"),
                       lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(lrpe::encode(simd{}, e, lrpe::view(x), max - 2, lrpe::view(out)),
                       doctest::Contains("'positions'"), lrpe::parameter_error);
  const lrpe::simd_encoder<lrpe::rope_neox<float>> held(e);
  CHECK_THROWS_AS(held.encode(lrpe::view(x), max - 2, lrpe::view(out)), lrpe::parameter_error);
  const auto xv = lrpe::bnsh<const float>(x.data(), 1, 1, 8, 64);
  const auto ov = lrpe::bnsh(out.data(), 1, 1, 8, 64);
  lrpe::row_matrix<float> out2(8, 64);
  const auto ov2 = lrpe::bnsh(out2.data(), 1, 1, 8, 64);
  CHECK_THROWS_WITH_AS(lrpe::encode_qk(simd{}, e, xv, max - 2, xv, 0, ov, ov2), doctest::Contains("'q_pos'"),
                       lrpe::parameter_error);
  CHECK_THROWS_WITH_AS(lrpe::encode_qk(simd{}, e, xv, 0, xv, max - 2, ov, ov2), doctest::Contains("'k_pos'"),
                       lrpe::parameter_error);
  // The last representable run is fine, and equal to the reference.
  lrpe::row_matrix<float> want(8, 64);
  e.encode(lrpe::view(x), max - 7, lrpe::view(want));
  lrpe::encode(simd{}, e, lrpe::view(x), max - 7, lrpe::view(out));
  CHECK(ref::max_abs_diff(out, want) <= tol<float>(64));
}

TEST_CASE_TEMPLATE("encode_qk: an empty Q or K side still has its positions checked (no read past them), both backends",
                   B, simd, lrpe::backend::reference) {
  const lrpe::rope_neox<float> e(64);
  const auto x = ref::random_rows<float>(8, 64, 6);
  lrpe::row_matrix<float> out(8, 64), want(8, 64);
  const std::vector<position_t> one = {0}, eight = {0, 1, 2, 3, 4, 5, 6, 7}, none;
  const auto full = lrpe::bnsh<const float>(x.data(), 1, 1, 8, 64);
  const auto full_out = lrpe::bnsh(out.data(), 1, 1, 8, 64);
  // q with batch 0 and a 1-entry array for 8 rows; k with 0 heads and an empty array.
  const auto q0 = lrpe::bnsh<const float>(x.data(), 0, 1, 8, 64);
  const auto q0_out = lrpe::bnsh(out.data(), 0, 1, 8, 64);
  const auto k0 = lrpe::bnsh<const float>(nullptr, 1, 0, 8, 64);
  const auto k0_out = lrpe::bnsh<float>(nullptr, 1, 0, 8, 64);
  CHECK_THROWS_WITH_AS(lrpe::encode_qk(B{}, e, q0, one, full, eight, q0_out, full_out), doctest::Contains("'q_pos'"),
                       lrpe::shape_error);
  CHECK_THROWS_WITH_AS(lrpe::encode_qk(B{}, e, full, eight, k0, none, full_out, k0_out), doctest::Contains("'k_pos'"),
                       lrpe::shape_error);
  // With consistent positions an empty side is no work, and the other side is encoded as alone.
  lrpe::encode_qk(B{}, e, q0, eight, full, eight, q0_out, full_out);
  e.encode(lrpe::view(x), eight, lrpe::view(want));
  CHECK(ref::max_abs_diff(out, want) <= tol<float>(64));
  out.setZero();
  lrpe::encode_qk(B{}, e, full, 3, k0, 3, full_out, k0_out);
  e.encode(lrpe::view(x), 3, lrpe::view(want));
  CHECK(ref::max_abs_diff(out, want) <= tol<float>(64));
}
