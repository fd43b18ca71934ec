// SPDX-License-Identifier: MIT
/**
 * @file device_encoder.cuh
 * `lrpe::cuda::device_encoder`: a device copy of an `lrpe::encoder<P, L>`'s parameters.
 *
 * The CPU policies stay host-only (they hold std::vectors and Eigen matrices); this class
 * mirrors them as flat device arrays (θ in double, v / P / DFT twiddles in float, π and the
 * cycle tables of π as int) and exposes the `encoder_desc` kernels take.
 *
 * | CPU policy | device form |
 * |---|---|
 * | `p::identity` | identity |
 * | `p::householder` | householder (unit v) |
 * | `p::permutation`, `p::odd_even` | gather (π) |
 * | `p::dft` | d = 2^k ≥ 2: fft (d/2 twiddles e^{−2πi m/d}, radix 2, then 1/√d); else dft |
 * |           | (d twiddles e^{−2πi m/d}/√d, exact index (k·n) mod d) |
 * | `p::dct`, `p::dense`, any other P | dense d×d from `p.matrix()` (real or complex) |
 * | `lambda::identity` | identity |
 * | `lambda::rotation` | rotation (θ, pairing) |
 * | `lambda::permutation_power` | cycle tables of π (any s, negative included) |
 * | `lambda::complex_phase` | complex phase (θ) |
 * | any other Λ | compile error (a Λ has no generic device form) |
 */
#pragma once

#include <lrpe/backend/cuda/encode_row.cuh>
#include <lrpe/encoder.hpp>
#include <lrpe/lambda/complex_phase.hpp>
#include <lrpe/lambda/identity.hpp>
#include <lrpe/lambda/permutation_power.hpp>
#include <lrpe/lambda/rotation.hpp>
#include <lrpe/p/dft.hpp>
#include <lrpe/p/householder.hpp>
#include <lrpe/p/identity.hpp>
#include <lrpe/p/permutation.hpp>

#include <cmath>
#include <numbers>
#include <type_traits>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace cuda {

namespace detail {
template <class>
inline constexpr bool always_false_v = false;

/// Widest d the device encoder accepts: int indices, and 3·d floats of scratch per warp
/// within 48 KiB for at least one warp.
inline constexpr index_t max_encoder_dim = 4096;
}  // namespace detail

/**
 * Device parameters of one encoder. Move-only; the `desc()` pointers stay valid as long as
 * this object lives (and across moves).
 */
class device_encoder {
 public:
  /**
   * Copies the parameters of `e` to the current device (synchronous cudaMemcpy).
   * @param e      any `lrpe::encoder<P, L>` whose Λ is one of lrpe's Λ policies.
   * @param angles the device trigonometry (encode_row.cuh).
   * @throws shape_error if d > 4096; cuda_error if an allocation or copy fails (no device).
   */
  template <p_policy P, lambda_policy L>
  explicit device_encoder(const encoder<P, L>& e, angle_mode angles = angle_mode::reduced_float) {
    using T = typename P::scalar;
    const index_t d = e.dim();
    ::lrpe::detail::require_shape(d >= 1 && d <= detail::max_encoder_dim, "lrpe::cuda::device_encoder", "e.dim()",
                                  ::lrpe::detail::lazy_concat("must be in [1, ", detail::max_encoder_dim, "]"), d);
    desc_.d = static_cast<int>(d);
    desc_.feature_dim = static_cast<int>(e.feature_dim());
    desc_.is_complex = encoder<P, L>::is_complex;
    desc_.angles = angles;
    set_p<T>(e.p(), d);
    set_lambda<T>(e.lambda(), d);
  }

  /// The flat description kernels take (device pointers owned by this object).
  [[nodiscard]] const encoder_desc& desc() const noexcept { return desc_; }
  [[nodiscard]] index_t dim() const noexcept { return desc_.d; }
  [[nodiscard]] index_t feature_dim() const noexcept { return desc_.feature_dim; }
  [[nodiscard]] bool is_complex() const noexcept { return desc_.is_complex; }

 private:
  template <class T, class P>
  void set_p(const P& p, index_t d) {
    if constexpr (std::is_same_v<P, p::identity<T>>) {
      desc_.p = p_kind::identity;
    } else if constexpr (std::is_same_v<P, p::householder<T>>) {
      desc_.p = p_kind::householder;
      const auto v = p.vector();
      p_real_ = device_buffer<float>(to_float(v.begin(), v.end()));
      desc_.p_real = p_real_.data();
    } else if constexpr (std::is_base_of_v<p::permutation<T>, P>) {
      desc_.p = p_kind::gather;
      const auto pi = p.indices();
      p_index_ = device_buffer<int>(std::vector<int>(pi.begin(), pi.end()));
      desc_.p_index = p_index_.data();
    } else if constexpr (std::is_same_v<P, p::dft<T>>) {
      // d a power of two ≥ 2: an FFT with w_m = e^{−2πi m/d}, m < d/2, and the scale 1/√d applied
      // once; else the direct sum over w_m = e^{−2πi m/d}/√d, m < d (as p::dft's dense table);
      // both in double, then rounded
      const bool fft = d >= 2 && (d & (d - 1)) == 0;
      desc_.p = fft ? p_kind::fft : p_kind::dft;
      const double scale = 1.0 / std::sqrt(static_cast<double>(d));
      if (fft) desc_.p_scale = static_cast<float>(scale);
      const index_t count = fft ? d / 2 : d;
      std::vector<float> re(static_cast<std::size_t>(count)), im(static_cast<std::size_t>(count));
      for (index_t m = 0; m < count; ++m) {
        const double a = -2.0 * std::numbers::pi * static_cast<double>(m) / static_cast<double>(d);
        re[static_cast<std::size_t>(m)] = static_cast<float>((fft ? 1.0 : scale) * std::cos(a));
        im[static_cast<std::size_t>(m)] = static_cast<float>((fft ? 1.0 : scale) * std::sin(a));
      }
      p_real_ = device_buffer<float>(re);
      p_imag_ = device_buffer<float>(im);
      desc_.p_real = p_real_.data();
      desc_.p_imag = p_imag_.data();
    } else {
      // any other P (DCT, dense, user policies): its dense matrix, row-major
      const auto m = p.matrix();
      std::vector<float> re(static_cast<std::size_t>(d * d)), im;
      if constexpr (P::is_complex) im.resize(re.size());
      for (index_t r = 0; r < d; ++r) {
        for (index_t c = 0; c < d; ++c) {
          const auto x = m(r, c);
          if constexpr (P::is_complex) {
            re[static_cast<std::size_t>(r * d + c)] = static_cast<float>(x.real());
            im[static_cast<std::size_t>(r * d + c)] = static_cast<float>(x.imag());
          } else {
            re[static_cast<std::size_t>(r * d + c)] = static_cast<float>(x);
          }
        }
      }
      p_real_ = device_buffer<float>(re);
      desc_.p_real = p_real_.data();
      if constexpr (P::is_complex) {
        desc_.p = p_kind::dense_complex;
        p_imag_ = device_buffer<float>(im);
        desc_.p_imag = p_imag_.data();
      } else {
        desc_.p = p_kind::dense_real;
      }
    }
  }

  template <class T, class L>
  void set_lambda(const L& l, index_t d) {
    if constexpr (std::is_same_v<L, lambda::identity<T>>) {
      desc_.lambda = lambda_kind::identity;
    } else if constexpr (std::is_same_v<L, lambda::rotation<T>>) {
      desc_.lambda = lambda_kind::rotation;
      const auto th = l.frequencies();
      desc_.half = static_cast<int>(th.size());
      desc_.split_half = l.pair_mode() == pairing::split_half;
      theta_ = device_buffer<double>(std::vector<double>(th.begin(), th.end()));
      desc_.theta = theta_.data();
    } else if constexpr (std::is_same_v<L, lambda::complex_phase<T>>) {
      desc_.lambda = lambda_kind::complex_phase;
      const auto th = l.frequencies();
      desc_.half = static_cast<int>(th.size());
      theta_ = device_buffer<double>(std::vector<double>(th.begin(), th.end()));
      desc_.theta = theta_.data();
    } else if constexpr (std::is_same_v<L, lambda::permutation_power<T>>) {
      // cycles of π listed j0, π(j0), π²(j0), ... so that π^s(elem[p]) = elem[(p + s) mod len]
      desc_.lambda = lambda_kind::permutation_power;
      const auto pi = l.indices();
      const auto n = static_cast<std::size_t>(d);
      std::vector<int> start(n, -1), len(n, 0), place(n, 0), elems;
      elems.reserve(n);
      for (std::size_t j0 = 0; j0 < n; ++j0) {
        if (start[j0] >= 0) continue;
        const int c0 = static_cast<int>(elems.size());
        std::size_t j = j0;
        int p = 0;
        do {
          start[j] = c0;
          place[j] = p++;
          elems.push_back(static_cast<int>(j));
          j = static_cast<std::size_t>(pi[j]);
        } while (j != j0);
        for (int q = c0; q < static_cast<int>(elems.size()); ++q) len[static_cast<std::size_t>(elems[static_cast<std::size_t>(q)])] = p;
      }
      cycle_start_ = device_buffer<int>(start);
      cycle_len_ = device_buffer<int>(len);
      cycle_place_ = device_buffer<int>(place);
      cycle_elems_ = device_buffer<int>(elems);
      desc_.cycle_start = cycle_start_.data();
      desc_.cycle_len = cycle_len_.data();
      desc_.cycle_place = cycle_place_.data();
      desc_.cycle_elems = cycle_elems_.data();
    } else {
      static_assert(detail::always_false_v<L>,
                    "lrpe::cuda::device_encoder: this Λ policy has no device implementation; the CUDA "
                    "backend supports lambda::identity, rotation, permutation_power and complex_phase "
                    "(docs/cuda.md)");
    }
  }

  template <class It>
  static std::vector<float> to_float(It first, It last) {
    std::vector<float> out;
    for (; first != last; ++first) out.push_back(static_cast<float>(*first));
    return out;
  }

  encoder_desc desc_{};
  device_buffer<float> p_real_, p_imag_;
  device_buffer<int> p_index_;
  device_buffer<double> theta_;
  device_buffer<int> cycle_start_, cycle_len_, cycle_place_, cycle_elems_;
};

}  // namespace cuda
}  // namespace v0
}  // namespace lrpe
