// SPDX-License-Identifier: MIT
/**
 * @file fuzz_common.hpp
 * Shared pieces of lrpe's libFuzzer targets (tests/fuzz/README.md).
 *
 * - `lrpe_fuzz::input` reads the fuzzer's bytes front to back (little-endian; zeros once they
 *   run out), so that a seed is easy to write by hand (tests/fuzz/make_corpus.py) and a crash
 *   input reads as the values it fed.
 * - `LRPE_FUZZ_CHECK(cond, ...)`: a broken postcondition prints its message and aborts, which
 *   libFuzzer reports as a crash with the input saved.
 * - `run_one(f, data, size)`: calls `f(input&)`; an `lrpe::error` is an expected outcome (its
 *   message printed when LRPE_FUZZ_VERBOSE is set: which check an input stops at), any other
 *   exception escapes and terminates (a crash).
 * - `known_open(id)`: true when the environment variable LRPE_FUZZ_SKIP lists `id` (or is
 *   `all`), so that a local run can step over an input class whose bug is known and still
 *   open and explore further. CI never sets it: the targets exercise every class.
 */
#pragma once

#include <lrpe/lrpe.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>

namespace lrpe_fuzz {

using lrpe::index_t;
using lrpe::position_t;

/// The fuzzer's bytes as a stream of values; reads past the end give zeros.
class input {
 public:
  input(const std::uint8_t* data, std::size_t size) noexcept : p_(data), n_(size) {}

  [[nodiscard]] std::size_t remaining() const noexcept { return n_; }

  std::uint8_t u8() noexcept {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  std::uint16_t u16() noexcept { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }
  std::uint32_t u32() noexcept { return u16() | (static_cast<std::uint32_t>(u16()) << 16); }
  std::uint64_t u64() noexcept { return u32() | (static_cast<std::uint64_t>(u32()) << 32); }
  std::int64_t i64() noexcept { return static_cast<std::int64_t>(u64()); }
  bool flag() noexcept { return (u8() & 1) != 0; }

  /// Raw bits: every double, NaNs and infinities included.
  double f64() noexcept {
    const std::uint64_t u = u64();
    double x;
    std::memcpy(&x, &u, sizeof x);
    return x;
  }

  /// An integer in [lo, hi] from one byte (lo ≤ hi, hi − lo < 2^8 gives every value).
  index_t small(index_t lo, index_t hi) noexcept {
    const auto span = static_cast<std::uint64_t>(hi - lo) + 1;
    return lo + static_cast<index_t>(u8() % span);
  }

  /// An int64 that is often an edge: a mode byte picks raw bits, a table of extremes, a small
  /// value, or an extreme plus a small step.
  std::int64_t edgy_i64() noexcept {
    static constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
    static constexpr std::int64_t min = std::numeric_limits<std::int64_t>::min();
    static constexpr std::int64_t table[] = {0,          1,           -1,          2,          -2,
                                             3,          4,           8,           16,         31,
                                             32,         64,          127,         128,        255,
                                             256,        512,         1024,        4096,       65536,
                                             max,        min,         max - 1,     min + 1,    max / 2,
                                             min / 2,    max / 4,     INT64_C(1) << 53,        -(INT64_C(1) << 53),
                                             INT64_C(1) << 32,        INT32_MAX,   INT32_MIN,  max / 16,
                                             max / 3,    -max / 3};
    constexpr auto entries = sizeof table / sizeof table[0];
    switch (u8() & 3) {
      case 0: return i64();
      case 1: return table[u8() % entries];
      case 2: return static_cast<std::int8_t>(u8());
      default: {
        const std::int64_t base = table[u8() % entries];
        const std::int64_t step = static_cast<std::int8_t>(u8());
        std::int64_t r;
        return __builtin_add_overflow(base, step, &r) ? base : r;
      }
    }
  }

  /// A double that is often an edge: raw bits, a table (0, ±1, NaN, ±∞, ±max, denormals, ...),
  /// or a small value k/16 for a signed byte k.
  double edgy_f64() noexcept {
    static constexpr double inf = std::numeric_limits<double>::infinity();
    static constexpr double table[] = {0.0,     -0.0,    1.0,     -1.0,   0.5,    2.0,     1e-6,    1e-300,
                                       1e300,   -1e300,  4.9e-324, 2.2250738585072014e-308,
                                       1.7976931348623157e308, -1.7976931348623157e308,
                                       inf,     -inf,    std::numeric_limits<double>::quiet_NaN(),
                                       0x1p960, 0x1p959, 0x1p-960, 10000.0, 500000.0, 8192.0, 32.0,
                                       3.4028234663852886e38, 3.4028235677973366e38, 1.0 - 0x1p-53,
                                       1.0 + 0x1p-52, 0.9, 0.99, 1.5e-289, 1.6e-289};
    constexpr auto entries = sizeof table / sizeof table[0];
    switch (u8() & 3) {
      case 0: return f64();
      case 1: return table[u8() % entries];
      case 2: return static_cast<std::int8_t>(u8()) / 16.0;
      default: return table[u8() % entries] * (1.0 + static_cast<std::int8_t>(u8()) * 0x1p-20);
    }
  }

  /// A bounded data value in [-4, 4] (k/32 for a signed byte k): finite inputs whose
  /// products stay far from overflow, so results can be required finite.
  template <class T>
  T value() noexcept {
    return static_cast<T>(static_cast<std::int8_t>(u8()) / 32.0);
  }

 private:
  const std::uint8_t* p_;
  std::size_t n_;
};

/// a + b, saturated at int64's ends: the harness nudges sizes and positions that may be extremes.
inline std::int64_t sat_add(std::int64_t a, std::int64_t b) noexcept {
  std::int64_t r = 0;
  if (!__builtin_add_overflow(a, b, &r)) return r;
  return b > 0 ? std::numeric_limits<std::int64_t>::max() : std::numeric_limits<std::int64_t>::min();
}

/// True when LRPE_FUZZ_SKIP (a comma-separated list of ids, or "all") names `id`.
inline bool known_open(std::string_view id) {
  static const char* env = std::getenv("LRPE_FUZZ_SKIP");
  if (env == nullptr) return false;
  const std::string_view list(env);
  if (list == "all") return true;
  for (std::size_t start = 0; start <= list.size();) {
    const std::size_t end = std::min(list.find(',', start), list.size());
    if (list.substr(start, end - start) == id) return true;
    start = end + 1;
  }
  return false;
}

[[noreturn]] inline void fail(const char* file, int line, const char* cond, const char* msg) {
  std::fprintf(stderr, "\n%s:%d: postcondition failed: %s\n  %s\n", file, line, cond, msg);
  std::fflush(stderr);
  std::abort();
}

}  // namespace lrpe_fuzz

/// A broken postcondition: message, then abort (libFuzzer saves the input as a crash).
#define LRPE_FUZZ_CHECK(cond, msg)                                          \
  do {                                                                      \
    if (!(cond)) ::lrpe_fuzz::fail(__FILE__, __LINE__, #cond, (msg));       \
  } while (0)

namespace lrpe_fuzz {

/// Runs one input; `lrpe::error` (and only it) is an expected outcome.
template <class F>
int run_one(F&& f, const std::uint8_t* data, std::size_t size) {
  input in(data, size);
  try {
    f(in);
  } catch (const lrpe::error& e) {
    // the library rejected the input with its documented exception: fine
    static const bool verbose = std::getenv("LRPE_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "lrpe::error: %s\n", e.what());
  }
  return 0;
}

/// `x` is finite (for float and double).
template <class T>
bool finite(T x) noexcept {
  return std::isfinite(static_cast<double>(x));
}

}  // namespace lrpe_fuzz
