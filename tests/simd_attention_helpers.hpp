// SPDX-License-Identifier: MIT
// Shared by the SIMD attention tests (test_simd_softmax.cpp, test_simd_linear.cpp,
// test_simd_threads.cpp): random problem shapes and one softmax case run on the SIMD backend and
// on the reference backend.
//
// Tolerance: max |simd − reference| / (1 + max |reference|) ≤ 2e-5 (float) / 1e-12 (double).
// The two kernels sum in different orders (tiles of 4W keys vs `tile` keys, FMA vs separate
// products) and the SIMD exp2 is a polynomial (relative error < 2e-7 in float, < 1e-14 in
// double): on the unit-variance data below the observed errors are ~1e-6 (float) and ~1e-15
// (double); the bounds leave an order of magnitude, and every check is able to fail (a wrong
// mask, a missing bias, a wrong scale or a lost tile gives errors ≥ 1e-2).
#pragma once

#include "attention_helpers.hpp"

#include <doctest/doctest.h>

#include <lrpe/simd.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace simd_attention_test {

using attention_test::kernel_vs_kernel;
using lrpe::index_t;
using lrpe::position_t;
using attention_test::for_each_preset;
using attention_test::random_matrix;
using attention_test::rm;

/// max |a − b| / (1 + max |b|); ∞ if a has a non-finite entry.
template <class T>
double diff(const rm<T>& a, const rm<T>& b) {
  REQUIRE(a.rows() == b.rows());
  REQUIRE(a.cols() == b.cols());
  double err = 0, mag = 0;
  for (index_t i = 0; i < a.rows(); ++i)
    for (index_t j = 0; j < a.cols(); ++j) {
      if (!std::isfinite(static_cast<double>(a(i, j)))) return INFINITY;
      err = std::max(err, std::abs(static_cast<double>(a(i, j)) - static_cast<double>(b(i, j))));
      mag = std::max(mag, std::abs(static_cast<double>(b(i, j))));
    }
  return err / (1 + mag);
}

/// One random problem shape: sizes (including 1, non-multiples of the vector width and of the
/// tile), causal or not, positions as offsets or arrays.
struct shape {
  index_t nq, nk, d, dv;
  bool causal;
  position_t q_offset, k_offset;
  bool arrays;  ///< sorted random positions with repeats instead of offsets
};

inline std::vector<shape> shapes(std::uint64_t seed, int count) {
  lrpe::generator g(seed);
  const index_t sizes[] = {1, 2, 7, 16, 33, 63, 64, 65, 100, 129, 200};
  const index_t dims[] = {1, 3, 8, 16, 17, 32, 64};
  auto pick = [&](const auto& a) { return a[g.below(std::size(a))]; };
  std::vector<shape> out;
  // fixed corner cases first
  out.push_back({1, 1, 1, 1, false, 0, 0, false});
  out.push_back({1, 1, 64, 64, true, 0, 0, false});
  out.push_back({64, 64, 64, 64, true, 0, 0, false});
  out.push_back({65, 130, 16, 20, true, 65, 0, false});   // KV cache: queries after the keys
  out.push_back({70, 70, 8, 8, true, 0, 30, false});      // first 30 queries see nothing
  out.push_back({200, 150, 64, 64, false, 0, 0, false});
  for (int i = 0; i < count; ++i) {
    shape s{pick(sizes), pick(sizes), pick(dims), pick(dims), g.below(2) == 1, 0, 0, g.below(3) == 0};
    s.q_offset = static_cast<position_t>(g.below(50));
    s.k_offset = static_cast<position_t>(g.below(50));
    out.push_back(s);
  }
  return out;
}

inline std::vector<position_t> sorted_positions(lrpe::generator& g, index_t n, position_t start) {
  std::vector<position_t> p(static_cast<std::size_t>(n));
  position_t x = start;
  for (auto& e : p) {
    e = x;
    x += static_cast<position_t>(g.below(3));  // steps 0, 1, 2: repeats included
  }
  return p;
}

/// The shape's positions in `opt` (softmax or linear options): the arrays qp and kp (which must
/// outlive opt), or the shape's offsets.
template <class Options>
void set_positions(Options& opt, const shape& s, const std::vector<position_t>& qp, const std::vector<position_t>& kp) {
  if (s.arrays) {
    opt.q_positions = lrpe::positions(std::span<const position_t>(qp));
    opt.k_positions = lrpe::positions(std::span<const position_t>(kp));
  } else {
    opt.q_positions = s.q_offset;
    opt.k_positions = s.k_offset;
  }
}

/// Runs reference and SIMD softmax on one shape with encoding `enc`; returns the difference.
template <class T, class Enc, class Backend = lrpe::backend::simd<>>
double softmax_case(const shape& s, const Enc& enc, std::uint64_t seed, Backend backend = {}) {
  lrpe::generator g(seed);
  const rm<T> q = random_matrix<T>(g, s.nq, s.d), k = random_matrix<T>(g, s.nk, s.d), v = random_matrix<T>(g, s.nk, s.dv);
  const auto qp = sorted_positions(g, s.nq, s.q_offset), kp = sorted_positions(g, s.nk, s.k_offset);
  lrpe::softmax_options<> opt;
  opt.causal = s.causal;
  opt.tile = 16;
  set_positions(opt, s, qp, kp);
  rm<T> ref(s.nq, s.dv), out(s.nq, s.dv);
  out.setConstant(T(123));
  lrpe::softmax_attention(q, k, v, ref, enc, opt);
  lrpe::softmax_attention(q, k, v, out, enc, opt, backend);
  return diff(out, ref);
}

/// A pair-keyed bias over positions [0, 512) (every shape's, offsets and arrays): random
/// buckets of a random table, so that no diagonal is constant (a kernel that evaluated it once
/// per diagonal t − s would differ from the reference by O(1)).
template <class T>
lrpe::canonical::pair_bias<T> random_pair_bias(index_t d, std::uint64_t seed) {
  lrpe::generator g(seed);
  constexpr index_t n = 512, buckets = 11;
  lrpe::canonical::index_matrix index(n, n);
  for (index_t i = 0; i < index.size(); ++i) index.data()[i] = static_cast<std::int32_t>(g.below(buckets));
  return lrpe::canonical::pair_bias<T>(d, std::move(index), random_matrix<T>(g, 1, buckets));
}

#define SHAPE_INFO(s)                                                                                      \
  INFO("nq=" << s.nq << " nk=" << s.nk << " d=" << s.d << " dv=" << s.dv << " causal=" << s.causal        \
             << " offsets=" << s.q_offset << "," << s.k_offset << " arrays=" << s.arrays)

}  // namespace simd_attention_test

// (a using-directive in the unnamed namespace: the tests name the helpers unqualified)
namespace {
using namespace simd_attention_test;  // NOLINT(google-build-using-namespace)
}  // namespace
