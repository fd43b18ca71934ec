// SPDX-License-Identifier: MIT
/**
 * @file attention_common.hpp
 * Shared pieces of the attention fuzz targets (fuzz_attention_shapes: one head's matrix_views;
 * fuzz_attention_heads: heads_views, grouped K/V, states).
 *
 * Memory: every tensor lives in its own heap buffer of exactly the elements its view claims
 * (the span from its first to its last element), so that a shape the library should have
 * rejected, but reads or writes past, is an AddressSanitizer report. A view whose claim cannot
 * be honoured (null data, a stride below the width, an extent past int64) gets a token buffer:
 * the library must reject it before touching memory.
 *
 * Backends: every call runs on backend::reference, and (with xsimd) on backend::simd<> and on a
 * two-thread simd_threads pool. They must agree on the outcome (all throw an lrpe::error, or
 * none does); results are then checked where the contract speaks (finite outputs for moderate
 * inputs, a softmax row within the range of its values, the SIMD backend close to the
 * reference, the pool equal to one thread bit for bit).
 */
#pragma once

#include "fuzz_common.hpp"

#if defined(LRPE_HAS_SIMD)
#include <lrpe/simd.hpp>
#endif

#include <algorithm>
#include <bit>
#include <chrono>
#include <new>
#include <numbers>
#include <optional>
#include <span>
#include <vector>

namespace lrpe_fuzz {

/// 64-byte aligned storage: the SIMD kernels take their aligned fast paths on views that start
/// at a multiple of the vector size, as most callers' buffers do.
template <class T>
struct aligned_allocator {
  using value_type = T;
  aligned_allocator() = default;
  template <class U>
  aligned_allocator(const aligned_allocator<U>&) noexcept {}  // NOLINT implicit
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{64}); }
  friend bool operator==(const aligned_allocator&, const aligned_allocator&) noexcept { return true; }
};

/// A tensor's buffer: exactly the elements its view spans, 64-byte aligned.
template <class T>
using buffer = std::vector<T, aligned_allocator<T>>;

/// True when the SIMD linear kernels read V's rows as whole vectors in place (row stride equal to
/// d_v rounded up to the vector width, d_v not a multiple of it): open at the time of writing,
/// the last row's vector then reads past the view (regressions/fuzz_attention_heads).
template <class T>
bool simd_v_overread_risk(index_t stride, index_t cols) {
#if defined(LRPE_HAS_SIMD)
  constexpr auto w = static_cast<index_t>(xsimd::batch<T>::size);
  const index_t padded = (std::clamp<index_t>(cols, 1, lrpe::max_dim) + w - 1) / w * w;  // (cols may be any int64)
  return stride == padded && cols % w != 0;
#else
  (void)stride;
  (void)cols;
  return false;
#endif
}

/// x is finite in T (so that the conversion is defined).
template <class T>
bool finite_in_t(double x) {
  return std::isfinite(x) && std::abs(x) <= static_cast<double>(std::numeric_limits<T>::max());
}

/// The extent a (rows × cols, row_stride) view claims, in elements: 0 when empty; nullopt when
/// it overflows int64 (a view no memory can back).
inline std::optional<index_t> claimed_extent(index_t rows, index_t cols, index_t stride) {
  if (rows <= 0 || cols <= 0) return index_t{0};
  index_t last = 0;
  if (__builtin_mul_overflow(rows - 1, stride, &last) || __builtin_add_overflow(last, cols, &last)) return std::nullopt;
  return last;
}

/// Deterministic moderate values k/32 (|x| ≤ 4) from a seed: long tensors without long inputs.
struct value_stream {
  std::uint64_t x;
  template <class T>
  T next() {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return static_cast<T>(static_cast<std::int8_t>(x >> 24) / 32.0);
  }
};

/// Positions of a call: an offset or an array (sorted, raw extremes, unsorted), of the view's
/// length or a wrong one.
struct position_spec {
  bool array = false;
  position_t offset = 0;
  std::vector<position_t> values;

  [[nodiscard]] lrpe::positions get() const {
    return array ? lrpe::positions(std::span<const position_t>(values)) : lrpe::positions(offset);
  }
};

inline position_spec read_positions(input& in, index_t rows) {
  position_spec p;
  const std::uint8_t m = in.u8();
  // (a view of more rows than any buffer here is one the call must reject: no long array for it)
  const index_t n = std::clamp<index_t>(m >= 232 ? sat_add(rows, in.small(-2, 2)) : rows, 0, 130);
  switch (m % 8) {
    case 0: p.offset = 0; break;
    case 1: p.offset = in.edgy_i64(); break;
    case 2: p.offset = in.small(-8, 64); break;
    case 3:
    case 4:
    case 5: {  // non-decreasing from a start
      p.array = true;
      position_t at = (m % 8) == 5 ? in.edgy_i64() : in.small(-4, 16);
      for (index_t i = 0; i < n; ++i) {
        if (i > 0 && __builtin_add_overflow(at, in.small(0, 3), &at)) at = std::numeric_limits<position_t>::max();
        p.values.push_back(at);
      }
      break;
    }
    case 6:  // raw extremes, any order
      p.array = true;
      for (index_t i = 0; i < n; ++i) p.values.push_back(in.edgy_i64());
      break;
    default:  // small, unsorted
      p.array = true;
      for (index_t i = 0; i < n; ++i) p.values.push_back(in.small(-8, 70));
      break;
  }
  return p;
}

/// Max |x| of a buffer (NaN: +∞).
template <class C>
double max_abs(const C& b) {
  double m = 0;
  for (auto x : b) m = std::isnan(static_cast<double>(x)) ? std::numeric_limits<double>::infinity()
                                                       : std::max(m, std::abs(static_cast<double>(x)));
  return m;
}

/// Equal element by element, NaN equal to NaN (the pool against one thread).
template <class C>
bool same_bits(const C& a, const C& b) {
  using T = typename C::value_type;
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(static_cast<double>(a[i])) && std::isnan(static_cast<double>(b[i]))) continue;
    if (std::bit_cast<std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>>(a[i]) !=
        std::bit_cast<std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>>(b[i]))
      return false;
  }
  return true;
}

/// One backend's outcome: threw an lrpe::error, or the output buffer it left.
template <class T>
struct outcome {
  bool threw = false;
  buffer<T> out;
};

/// Runs `call(backend)` on a fresh copy of `out0` for each backend; `call` returns nothing and
/// writes through the pointer it is given. Returns {reference, simd, pool} (simd and pool empty
/// without xsimd).
template <class T, class Call>
std::vector<outcome<T>> on_backends(const buffer<T>& out0, T*& out_ptr, bool null_out, Call&& call) {
  std::vector<outcome<T>> r;
  auto one = [&](auto backend) {
    outcome<T> o;
    o.out = out0;
    out_ptr = null_out ? nullptr : o.out.data();
    try {
      call(backend);
    } catch (const lrpe::error& e) {
      o.threw = true;
      static const bool verbose = std::getenv("LRPE_FUZZ_VERBOSE") != nullptr;
      if (verbose) std::fprintf(stderr, "backend %zu: lrpe::error: %s\n", r.size(), e.what());
    }
    r.push_back(std::move(o));
  };
  one(lrpe::backend::reference{});
#if defined(LRPE_HAS_SIMD)
  one(lrpe::backend::simd<>{});
  // a pool of two threads that never spin (the machines running fuzzers are shared)
  static lrpe::backend::simd_threads pool(2, std::chrono::microseconds(0));
  one(lrpe::backend::simd_policy<>{&pool});
#endif
  return r;
}

/// Every backend reached the same verdict (the validation is shared; a kernel that throws on
/// its own, or a pool that loses an error, would break this). `simd_may_throw`: a case where
/// only the SIMD kernels throw, as documented (a softmax scale within a factor log2(e) of T's
/// largest value).
template <class T>
void require_same_outcome(const std::vector<outcome<T>>& r, bool simd_may_throw = false) {
  for (std::size_t i = 1; i < r.size(); ++i) {
    if (simd_may_throw && r[i].threw && !r[0].threw) continue;
    LRPE_FUZZ_CHECK(r[i].threw == r[0].threw, "backends disagree on whether the call is valid");
  }
  if (r.size() == 3) LRPE_FUZZ_CHECK(r[1].threw == r[2].threw, "the pool and one thread disagree on the verdict");
}

/// Open at the time of writing (found here): a NaN logit (documented to make its row NaN: a NaN
/// input, or a finite scale whose logits overflow, ∞ − ∞) reaches xsimd::to_int in the double
/// SIMD softmax's exp2 (a scalar NaN → int64 conversion in xsimd 8, UB). True when the call may
/// form one: double, and a non-finite input or a scale or bias past 1e280.
template <class T>
bool simd_exp2_nan_risk(bool poked, const std::optional<double>& scale, double bias = 0) {
  if (!std::is_same_v<T, double>) return false;
  return poked || (scale && !(std::abs(*scale) < 1e280)) || !(std::abs(bias) < 1e280);
}

/// The documented SIMD-only rejection: a finite scale whose product with log2(e) is not finite in T.
template <class T>
bool simd_scale_overflows(const std::optional<double>& scale) {
  if (!scale || !finite_in_t<T>(*scale)) return false;
  return !finite(static_cast<T>(*scale) * std::numbers::log2e_v<T>);
}

/// Floating-point details of the comparisons.
template <class T>
inline constexpr double unit = std::numeric_limits<T>::epsilon();

/// The SIMD results close to the reference (|a − b| ≤ tol elementwise), and the pool's equal to
/// one thread's bit for bit (docs: results do not depend on the number of threads).
template <class T>
void compare_backends(const std::vector<outcome<T>>& r, bool comparable, double tol, const char* what) {
  if (r.size() < 3 || r[0].threw) return;
  LRPE_FUZZ_CHECK(same_bits(r[1].out, r[2].out), what);
  if (!comparable || r[1].threw) return;  // (require_same_outcome allowed it: a SIMD-only limit)
  for (std::size_t i = 0; i < r[0].out.size(); ++i) {
    const double a = static_cast<double>(r[0].out[i]), b = static_cast<double>(r[1].out[i]);
    LRPE_FUZZ_CHECK(std::abs(a - b) <= tol, "the SIMD backend differs from the reference beyond rounding");
  }
}

/// Feature maps of linear attention, picked by a byte (relu_eps with a raw ε).
struct phi_choice {
  int kind = 0;
  double eps = 1e-3;
};

inline phi_choice read_phi(input& in) {
  phi_choice p;
  p.kind = in.u8() % 4;
  if (p.kind == 3) p.eps = in.flag() ? 1e-3 : in.edgy_f64();
  return p;
}

/// Calls f(phi) with the chosen feature map.
template <class F>
void with_phi(const phi_choice& p, F&& f) {
  switch (p.kind) {
    case 0: f(lrpe::feature_maps::elu_plus_one{}); break;
    case 1: f(lrpe::feature_maps::relu{}); break;
    case 2: f(lrpe::feature_maps::identity{}); break;
    default: f(lrpe::feature_maps::relu_eps{p.eps}); break;
  }
}

/// Max |φ(x)| for |x| ≤ m.
inline double phi_bound(const phi_choice& p, double m) {
  switch (p.kind) {
    case 0: return std::max(1.0, m + 1);
    case 1:
    case 2: return m;
    default: return m + std::abs(p.eps);
  }
}

/// Linear options from the input: norm, eps, chunk, decay (mostly sensible, sometimes raw).
inline lrpe::linear_options read_linear_options(input& in, bool causal) {
  lrpe::linear_options o;
  o.causal = causal;
  const std::uint8_t m = in.u8();
  o.norm = (m & 1) ? lrpe::normalisation::denominator : lrpe::normalisation::none;
  o.eps = (m & 2) ? in.edgy_f64() : 1e-6;
  o.chunk = (m & 4) ? in.small(-1, 70) : 64;
  switch ((m >> 3) % 4) {
    case 0: o.decay = 1.0; break;
    case 1: o.decay = 0.9; break;
    case 2: o.decay = in.edgy_f64(); break;
    default: o.decay = 1.0 - in.u8() / 1024.0; break;
  }
  return o;
}

/// Softmax scale: the default (nothing) or a raw value; tile: 64 or a small raw one.
template <class R = lrpe::no_reweighting>
lrpe::softmax_options<R> read_softmax_options(input& in, bool causal) {
  lrpe::softmax_options<R> o;
  o.causal = causal;
  const std::uint8_t m = in.u8();
  if (m & 1) o.scale = (m & 2) ? in.edgy_f64() : in.value<double>();
  o.tile = (m & 4) ? in.small(-1, 70) : 64;
  return o;
}

}  // namespace lrpe_fuzz
