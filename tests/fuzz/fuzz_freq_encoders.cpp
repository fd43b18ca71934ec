// SPDX-License-Identifier: MIT
// libFuzzer target: frequency schedules and scalings from raw doubles (the numbers of a
// Hugging Face rope config), and the encoders built from them.
//
// Every schedule and scaling (freq::rope, theta_a/b/c, complex_phase, user, linear,
// dynamic_ntk_base, yarn, yarn_correction_dim, yarn_attention_factor, llama3, longrope,
// longrope_attention_factor) either throws an lrpe::error or returns what it documents: one
// finite θ per pair with |θ| < 2^960 (so that s·θ is finite at every int64 position), finite
// scalars. The θ then build a rotation or complex-phase Λ, a Householder P from raw doubles,
// and a cos/sin cache; an encoder applies M_s at a raw int64 position s:
//   - M_s is unitary: ‖M_s x‖ = ‖x‖ to rounding, finite;
//   - angles are exact (docs/math.md §Angles): exact_cos_sin(s + t) = rotate(s, t) to a few ulps,
//     and cos² + sin² = 1.
//
// Input: a selector byte, then the raw values that case reads.
#include "fuzz_common.hpp"

#include <complex>
#include <vector>

namespace {

using namespace lrpe_fuzz;

void require_frequencies(const std::vector<double>& theta, std::size_t count) {
  LRPE_FUZZ_CHECK(theta.size() == count, "a schedule returned another number of frequencies");
  for (double x : theta) LRPE_FUZZ_CHECK(finite(x) && std::abs(x) < 0x1p960, "a frequency is not finite or >= 2^960");
}

std::vector<double> raw_list(input& in, std::size_t n) {
  std::vector<double> v(n);
  for (auto& x : v) x = in.edgy_f64();
  return v;
}

/// One schedule or scaling, chosen and fed by the input.
std::vector<double> schedule(input& in) {
  switch (in.u8() % 10) {
    case 0: {
      index_t pairs = in.edgy_i64();
      // valid counts past 256 only cost time and memory (a size-p DFT of a prime p is O(p²))
      if (pairs > 256 && pairs <= std::numeric_limits<index_t>::max() / 2) pairs = 1 + pairs % 256;
      const double base = in.edgy_f64();
      const index_t width = in.flag() ? 0 : in.edgy_i64();
      auto t = lrpe::freq::rope(pairs, base, width);
      require_frequencies(t, static_cast<std::size_t>(pairs));
      return t;
    }
    case 1: {
      const index_t e = in.small(-2, 130);
      auto t = lrpe::freq::theta_a(e);
      require_frequencies(t, static_cast<std::size_t>(e / 2));
      return t;
    }
    case 2:
    case 3: {
      const index_t e = in.small(-2, 130);
      const double length = in.edgy_f64();
      auto t = in.flag() ? lrpe::freq::theta_b(e, length) : lrpe::freq::theta_c(e, length);
      require_frequencies(t, static_cast<std::size_t>(e / 2));
      return t;
    }
    case 4: {
      const index_t f = in.small(-1, 64);
      auto t = lrpe::freq::complex_phase(f, in.edgy_f64());
      require_frequencies(t, static_cast<std::size_t>(f));
      return t;
    }
    case 5: {
      const auto raw = raw_list(in, static_cast<std::size_t>(in.small(0, 16)));
      auto t = lrpe::freq::user(raw);
      require_frequencies(t, raw.size());
      LRPE_FUZZ_CHECK(t == raw, "freq::user changed its input");
      auto l = lrpe::freq::linear(t, in.edgy_f64());
      require_frequencies(l, raw.size());
      return l;
    }
    case 6: {
      const auto theta = lrpe::freq::user(raw_list(in, static_cast<std::size_t>(in.small(0, 16))));
      const double factor = in.edgy_f64(), original = in.edgy_f64(), base = in.edgy_f64();
      const double fast = in.edgy_f64(), slow = in.edgy_f64();
      auto t = lrpe::freq::yarn(theta, factor, original, base, fast, slow, in.flag());
      require_frequencies(t, theta.size());
      return t;
    }
    case 7: {
      const auto theta = lrpe::freq::user(raw_list(in, static_cast<std::size_t>(in.small(0, 16))));
      const double factor = in.edgy_f64(), low = in.edgy_f64(), high = in.edgy_f64(), original = in.edgy_f64();
      auto t = lrpe::freq::llama3(theta, factor, low, high, original);
      require_frequencies(t, theta.size());
      return t;
    }
    case 8: {
      const auto theta = lrpe::freq::user(raw_list(in, static_cast<std::size_t>(in.small(0, 16))));
      const std::size_t n = in.flag() ? theta.size() : static_cast<std::size_t>(in.small(0, 16));
      const auto shorts = raw_list(in, n), longs = raw_list(in, n);
      const double length = in.edgy_f64(), original = in.edgy_f64();
      auto t = lrpe::freq::longrope(theta, shorts, longs, length, original);
      require_frequencies(t, theta.size());
      return t;
    }
    default: {
      // the scalar helpers of the scalings
      const double a = in.edgy_f64(), b = in.edgy_f64(), c = in.edgy_f64(), d = in.edgy_f64();
      const index_t dim = in.edgy_i64();
      switch (in.u8() % 5) {
        case 0: LRPE_FUZZ_CHECK(finite(lrpe::freq::dynamic_ntk_base(a, b, c, d, dim)), "dynamic_ntk_base"); break;
        case 1: LRPE_FUZZ_CHECK(finite(lrpe::freq::yarn_correction_dim(a, dim, b, c)), "yarn_correction_dim"); break;
        case 2: LRPE_FUZZ_CHECK(finite(lrpe::freq::yarn_attention_factor(a)), "yarn_attention_factor"); break;
        case 3: LRPE_FUZZ_CHECK(finite(lrpe::freq::yarn_attention_factor(a, b, c)), "yarn_attention_factor(3)"); break;
        default: LRPE_FUZZ_CHECK(finite(lrpe::freq::longrope_attention_factor(a, b)), "longrope_attention_factor"); break;
      }
      return {};
    }
  }
}

template <class T>
double norm(const std::vector<T>& x) {
  double s = 0;
  for (const auto& v : x) s += std::norm(std::complex<double>(v));
  return std::sqrt(s);
}

/// ‖M_s x‖ = ‖x‖ (unitary) and finite, for an encoder at a raw position.
template <class E>
void check_unitary(input& in, const E& e) {
  using T = typename E::scalar;
  using V = typename E::value_type;
  std::vector<T> x(static_cast<std::size_t>(e.dim()));
  for (auto& v : x) v = in.value<T>();
  std::vector<V> y(x.size());
  const position_t s = in.edgy_i64();
  e.encode_row(s, x.data(), y.data());
  const double nx = norm(x), ny = norm(y);
  for (const auto& v : y) LRPE_FUZZ_CHECK(finite(std::abs(std::complex<double>(v))), "encode_row not finite");
  const double tol = 64 * static_cast<double>(e.dim()) * std::numeric_limits<T>::epsilon() * (nx + 1);
  LRPE_FUZZ_CHECK(std::abs(nx - ny) <= tol, "encode_row does not keep the norm (M_s not unitary)");
}

void encoders(input& in) {
  const bool as_float = in.flag();
  const std::vector<double> theta = schedule(in);
  if (theta.empty()) return;
  const auto e2 = static_cast<index_t>(2 * theta.size());
  const index_t d = e2 + in.small(0, 3);
  const auto pair_mode = in.flag() ? lrpe::pairing::split_half : lrpe::pairing::interleaved;
  switch (in.u8() % 3) {
    case 0:
      if (as_float) check_unitary(in, lrpe::encoder(lrpe::p::identity<float>(d), lrpe::lambda::rotation<float>(d, theta, pair_mode)));
      else check_unitary(in, lrpe::encoder(lrpe::p::identity<double>(d), lrpe::lambda::rotation<double>(d, theta, pair_mode)));
      break;
    case 1: {
      const index_t cd = static_cast<index_t>(theta.size()) + in.small(0, 2);
      if (as_float) check_unitary(in, lrpe::encoder(lrpe::p::dft<float>(cd), lrpe::lambda::complex_phase<float>(cd, theta)));
      else check_unitary(in, lrpe::encoder(lrpe::p::dft<double>(cd), lrpe::lambda::complex_phase<double>(cd, theta)));
      break;
    }
    default: {
      // a Householder P from raw doubles (huge, tiny, zero, NaN entries) before the rotation
      std::vector<double> v = raw_list(in, static_cast<std::size_t>(d));
      check_unitary(in, lrpe::encoder(lrpe::p::householder<double>(v), lrpe::lambda::rotation<double>(d, theta, pair_mode)));
      break;
    }
  }
  // a cos/sin cache of a few positions: every entry in [-1, 1]
  const index_t positions = in.small(-1, 8);
  const auto cache = lrpe::interop::make_cos_sin_cache<float>(positions, theta);
  LRPE_FUZZ_CHECK(cache.cos.rows() == positions && cache.cos.cols() == static_cast<index_t>(theta.size()), "cache shape");
  LRPE_FUZZ_CHECK((cache.cos.array().abs() <= 1.0f).all() && (cache.sin.array().abs() <= 1.0f).all(), "cache entry");
}

/// Exact angles at raw positions and frequencies: cos² + sin² = 1, and angles add.
void angles(input& in) {
  const double theta = in.edgy_f64();
  if (!(finite(theta) && std::abs(theta) < 0x1p960)) return;  // the documented domain
  const position_t s = in.edgy_i64(), t = in.edgy_i64();
  const auto a = lrpe::exact_cos_sin(s, theta);
  LRPE_FUZZ_CHECK(finite(a.cos) && finite(a.sin), "exact_cos_sin not finite");
  LRPE_FUZZ_CHECK(std::abs(a.cos * a.cos + a.sin * a.sin - 1.0) <= 1e-13, "cos^2 + sin^2 != 1");
  position_t sum;
  if (__builtin_add_overflow(s, t, &sum)) return;
  const auto b = lrpe::exact_cos_sin(t, theta), c = lrpe::exact_cos_sin(sum, theta);
  const double rc = a.cos * b.cos - a.sin * b.sin, rs = a.sin * b.cos + a.cos * b.sin;
  LRPE_FUZZ_CHECK(std::abs(rc - c.cos) <= 1e-12 && std::abs(rs - c.sin) <= 1e-12,
                  "exact_cos_sin(s + t) != rotation by s then t (angles are not exact)");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return lrpe_fuzz::run_one(
      [](lrpe_fuzz::input& in) {
        if (in.u8() % 4 == 0) angles(in);
        else encoders(in);
      },
      data, size);
}
