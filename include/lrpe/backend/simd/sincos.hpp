// SPDX-License-Identifier: MIT
/**
 * @file sincos.hpp
 * cos and sin of s·θ_k for many frequencies at once, vectorised over k in double.
 *
 * The numerical contract is the scalar one (`detail::angle_cos_sin`, docs/math.md §Angles):
 * cos and sin of the exact angle s·θ_k at every int64 position. s·θ_k is split into doubles
 * that sum to it exactly (an FMA two-product; for |s| > 2^53 first s = s_hi + s_lo), each
 * part is reduced and evaluated by xsimd's double `sincos` — whose argument reduction is
 * exact at every magnitude: Cody–Waite with a three-part π/2 up to 2^18·π, fdlibm's
 * `__ieee754_rem_pio2` beyond — and the rotations by the parts are multiplied. The rounding
 * error of a part under 2^32 is below 2⁻²⁰ and rotates by its Taylor terms, so the common
 * case costs one sincos, an FMA and a complex product per angle. The result is within a few
 * double ulps of the libm path's, so a float result rounds to the same float or a neighbour,
 * and a double result differs from the scalar path by ~1e-16 — far below the tolerance the
 * tests state for either (docs/backends.md).
 *
 * `cos_sin_rows` builds the per-position tables of the rotation and complex-phase kernels from
 * it (and, for float, from one complex product per extra position of a run; see there).
 */
#pragma once

#include <lrpe/backend/simd/tag.hpp>
#include <lrpe/core/config.hpp>
#include <lrpe/detail/angle.hpp>
#include <lrpe/detail/mul_add.hpp>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

namespace lrpe {
inline namespace v0 {
namespace backend {
namespace simd_detail {

/// (c, s) ← the rotation (c, s) followed by the rotation by e (lane-wise): e's cos and sin by
/// their Taylor terms when every lane is below `detail::small_angle` (the common case: the
/// rounding error of an angle under 2^32), else by a vectorised sincos.
template <class B>
inline void rotate_by(B& c, B& s, const B& e) noexcept {
  B ce, se;
  if (xsimd::all(xsimd::abs(e) < B(lrpe::detail::small_angle))) {
    const B e2 = e * e;
    ce = B(1.0) - B(0.5) * e2;
    se = e - e * e2 * B(1.0 / 6.0);
  } else {
    const auto [sv, cv] = xsimd::sincos(e);
    ce = cv;
    se = sv;
  }
  const B c2 = c * ce - s * se;
  s = s * ce + c * se;
  c = c2;
}

/// (c, s) of the exact angles m·θ_k, k < w, for one double integer m (`detail::two_product`
/// per lane, in scalar: exact on every arch — one fma, or Dekker's without FMA hardware —
/// where xsimd's fma is two roundings without it).
template <class B>
inline void exact_product_cos_sin(double m, const double* theta, B& c, B& s) noexcept {
  constexpr std::size_t w = B::size;
  alignas(64) double a[w], e[w];
  for (std::size_t i = 0; i < w; ++i) {
    const auto p = lrpe::detail::two_product(m, theta[i]);
    a[i] = p.a;
    e[i] = p.e;
  }
  const auto [sv, cv] = xsimd::sincos(B::load_aligned(a));
  c = cv;
  s = sv;
  rotate_by(c, s, B::load_aligned(e));
}

/**
 * c[k] = cos(s·θ[k]), sn[k] = sin(s·θ[k]) for k < count, in double: the exact angle of the
 * scalar contract (`detail::angle_cos_sin`), vectorised over k.
 * @tparam Arch the xsimd arch (double lanes of this arch are used).
 */
template <class Arch>
inline void angle_cos_sin(position_t s, const double* theta, index_t count, double* c, double* sn) noexcept {
  using bd = xsimd::batch<double, Arch>;
  constexpr index_t w = static_cast<index_t>(bd::size);
  // (not a structured binding: clang before 16 cannot capture one in a lambda)
  const lrpe::detail::split_position m = lrpe::detail::split(s);
  const double m_hi = m.hi, m_lo = m.lo;
  const auto block = [&](const double* th, double* co, double* si) {
    bd cv, sv;
    exact_product_cos_sin(m_hi, th, cv, sv);
    if (m_lo != 0.0) {  // |s| > 2^53: then the rotation by m_lo·θ (m_lo < 2^11)
      bd c2, s2;
      exact_product_cos_sin(m_lo, th, c2, s2);
      const bd cc = cv * c2 - sv * s2;
      sv = sv * c2 + cv * s2;
      cv = cc;
    }
    cv.store_unaligned(co);
    sv.store_unaligned(si);
  };
  index_t k = 0;
  for (; k + w <= count; k += w) block(theta + k, c + k, sn + k);
  if (k < count) {  // tail: the same vector code on a zero-padded copy
    double t[w] = {}, tc[w], ts[w];
    for (index_t i = k; i < count; ++i) t[i - k] = theta[i];
    block(t, tc, ts);
    for (index_t i = k; i < count; ++i) {
      c[i] = tc[i - k];
      sn[i] = ts[i - k];
    }
  }
}

/// The last angles `angle_cos_sin_memo` evaluated on this thread: position, θ and the results.
struct last_cos_sin {
  static constexpr index_t max_count = 256;
  position_t s = 0;
  index_t count = -1;
  double theta[max_count], c[max_count], sn[max_count];
};

/// One per thread and per arch: a program with runtime dispatch runs several archs, whose
/// sincos (with FMA or without) may round differently.
template <class Arch>
inline last_cos_sin& thread_last_cos_sin() noexcept {
  thread_local last_cos_sin last;
  return last;
}

/**
 * `angle_cos_sin` remembering the last row per thread. A decode step encodes q and k of every
 * head at one position with the same θ: 2·heads rows, one evaluation, the others copies (on
 * one thread; a pool's workers each keep their own). The key is (s, count, the bits of every
 * θ_k) — the arguments of a pure function, never an address — so a hit returns exactly what
 * this arch's evaluation would. A hit costs the compare and two copies of `count` doubles, a
 * miss the evaluation and three. Counts above `last_cos_sin::max_count` are not remembered.
 */
template <class Arch>
inline void angle_cos_sin_memo(position_t s, const double* theta, index_t count, double* c, double* sn) noexcept {
  last_cos_sin& m = thread_last_cos_sin<Arch>();
  if (count > last_cos_sin::max_count) return angle_cos_sin<Arch>(s, theta, count, c, sn);
  const auto bytes = static_cast<std::size_t>(count) * sizeof(double);
  if (m.count != count || m.s != s || std::memcmp(m.theta, theta, bytes) != 0) {
    angle_cos_sin<Arch>(s, theta, count, m.c, m.sn);
    std::memcpy(m.theta, theta, bytes);
    m.s = s;
    m.count = count;
  }
  std::memcpy(c, m.c, bytes);
  std::memcpy(sn, m.sn, bytes);
}

/**
 * Table rows `[cos(s·θ_k), k < count | sin(s·θ_k), k < count]` in T, one per position s: the
 * per-position table of the rotation and complex-phase kernels.
 *
 * `fill(s, row)` evaluates every angle by `angle_cos_sin` (the scalar contract). `fill_run(s0,
 * m, …)` fills the rows of the m ≤ `run` consecutive positions s0, s0+1, …: for double exactly
 * like `fill`; for float it evaluates s0 by `angle_cos_sin` and every other row by one complex
 * product in double, e^{i s0 θ_k}·e^{i j θ_k}, with e^{i j θ_k} (j < run, by `angle_cos_sin`)
 * tabulated at construction — 6 flops per angle instead of a sincos. Both factors
 * are rotations by exact angles, so the product is the rotation by s0·θ_k + j·θ_k = (s0+j)·θ_k
 * within a few double ulps, at any position: the float rows agree with `fill`'s to the float
 * rounding (≤ 1 float ulp) (docs/backends.md).
 * Not a recurrence: no error accumulates along the run.
 */
template <class Arch, class T>
class cos_sin_rows {
 public:
  /// Positions per `fill_run` (and per table block of the encoder).
  static constexpr index_t run = 64;

  /// `stepped` = false skips the step table (`fill_run` then evaluates every row like `fill`)
  /// and remembers the last row per thread (`angle_cos_sin_memo`): for encoders that see a few
  /// rows per call, where building it costs more than the sincos it saves
  /// (bench/results/tuning.md#stepped-tables).
  cos_sin_rows(const double* theta, index_t count, bool stepped = true)
      : theta_(theta), count_(count), memo_(!stepped) {
    if constexpr (std::is_same_v<T, float>) {
      if (stepped && count_ > 0 && count_ <= max_stepped) {
        const auto n = static_cast<std::size_t>(run * count_);
        step_c_.resize(n);
        step_s_.resize(n);
        for (index_t j = 0; j < run; ++j)
          angle_cos_sin<Arch>(j, theta_, count_, step_c_.data() + j * count_, step_s_.data() + j * count_);
      }
    }
  }

  [[nodiscard]] index_t count() const noexcept { return count_; }

  /// Row of position s (scratch c, sn: count() doubles each).
  void fill(position_t s, T* row, double* c, double* sn) const noexcept {
    if (memo_) angle_cos_sin_memo<Arch>(s, theta_, count_, c, sn);
    else angle_cos_sin<Arch>(s, theta_, count_, c, sn);
    for (index_t k = 0; k < count_; ++k) {
      row[k] = static_cast<T>(c[k]);
      row[count_ + k] = static_cast<T>(sn[k]);
    }
  }

  /// Rows of positions s0 … s0 + m − 1 (m ≤ run), row j at rows + j·stride.
  void fill_run(position_t s0, index_t m, T* rows, index_t stride, double* c, double* sn) const noexcept {
    if (step_c_.empty()) {
      for (index_t j = 0; j < m; ++j) fill(s0 + j, rows + j * stride, c, sn);
      return;
    }
    fill(s0, rows, c, sn);
    for (index_t j = 1; j < m; ++j) {
      const double* sc = step_c_.data() + j * count_;
      const double* ss = step_s_.data() + j * count_;
      T* row = rows + j * stride;
      for (index_t k = 0; k < count_; ++k) {  // e^{i s0 θ}·e^{i j θ}, auto-vectorised
        row[k] = static_cast<T>(lrpe::detail::mul_add(c[k], sc[k], -(sn[k] * ss[k])));
        row[count_ + k] = static_cast<T>(lrpe::detail::mul_add(sn[k], sc[k], c[k] * ss[k]));
      }
    }
  }

 private:
  /// Largest count with a step table (run·count·16 bytes: 512 KiB at 512).
  static constexpr index_t max_stepped = 512;
  const double* theta_;
  index_t count_;
  bool memo_;
  std::vector<double> step_c_, step_s_;  // cos/sin(j·θ_k) at [j·count + k]; float only
};

}  // namespace simd_detail

/// SIMD `cos_sin_kernel` (attention/backend_interface.hpp): the angles vectorised over k.
template <simd_backend B>
void cos_sin_kernel(const B&, position_t s, const double* theta, index_t count, double* c, double* sn) noexcept {
  simd_detail::angle_cos_sin<typename B::arch_type>(s, theta, count, c, sn);
}

}  // namespace backend
}  // namespace v0
}  // namespace lrpe
