// SPDX-License-Identifier: MIT
/**
 * @file dft.hpp
 * The unitary DFT as a complex P (LRPE Type 8): F[k][n] = e^{−2πi kn/d} / √d.
 *
 * A real row of width d maps to d complex bins (the full spectrum, not rfft's d/2+1 bins:
 * the rfft variant of the reference code is not unitary, see docs/math.md). Two methods:
 * a dense d×d product (precomputed, exactly reduced angles) and Eigen's FFT module
 * (unsupported/Eigen/FFT, kissfft backend). `dft_method::automatic` picks the dense product
 * up to `dense_limit` (d ≤ 8, from measurements) and the FFT above it.
 */
#pragma once

#include <lrpe/detail/validate.hpp>

#include <unsupported/Eigen/FFT>

#include <cmath>
#include <complex>
#include <numbers>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace p {

/// How `p::dft` applies itself.
enum class dft_method {
  automatic,  ///< dense for d <= dft<T>::dense_limit, FFT above
  dense,      ///< precomputed d×d product
  fft         ///< Eigen's FFT module
};

/**
 * The unitary discrete Fourier transform.
 * @tparam T float or double (the bins are `std::complex<T>`).
 */
template <real_scalar T>
class dft {
 public:
  using scalar = T;
  using output_type = std::complex<T>;
  static constexpr bool is_complex = true;
  static constexpr bool is_real_orthogonal = false;
  /// Largest d for which `automatic` uses the dense product: past it Eigen's FFT is faster
  /// (bench/results/tuning.md#dft-dense-limit), so only tiny widths stay dense.
  static constexpr index_t dense_limit = 8;

  /// @throws shape_error if d < 1.
  explicit dft(index_t d, dft_method method = dft_method::automatic)
      : d_(d), use_fft_(d > 1 && (method == dft_method::fft ||
                                  (method == dft_method::automatic && d > dense_limit))) {
    // d = 1 always takes the dense path: Eigen 3.4's kissfft factorises 1 as a radix-1 stage
    // and crashes in its generic butterfly.
    detail::require_dim(d, "lrpe::p::dft");
    if (!use_fft_) {
      f_.resize(static_cast<std::size_t>(d * d));
      const double scale = 1.0 / std::sqrt(static_cast<double>(d));
      for (index_t k = 0; k < d; ++k) {
        for (index_t n = 0; n < d; ++n) {
          const auto m = static_cast<double>((k * n) % d);  // exact reduction of kn mod d
          const double a = -2.0 * std::numbers::pi * m / static_cast<double>(d);
          f_[static_cast<std::size_t>(k * d + n)] =
              std::complex<T>(static_cast<T>(scale * std::cos(a)), static_cast<T>(scale * std::sin(a)));
        }
      }
    }
  }

  [[nodiscard]] index_t dim() const noexcept { return d_; }
  [[nodiscard]] bool uses_fft() const noexcept { return use_fft_; }

  /// y = F x for a real row x.
  void apply(const T* x, std::complex<T>* y) const {
    if (use_fft_) {
      auto& fft = fft_engine();
      fft.ClearFlag(Eigen::FFT<T>::HalfSpectrum);
      fft.fwd(y, x, d_);
      const T scale = T(1) / std::sqrt(static_cast<T>(d_));
      for (index_t k = 0; k < d_; ++k) y[k] *= scale;
      return;
    }
    for (index_t k = 0; k < d_; ++k) {
      const std::complex<T>* row = f_.data() + k * d_;
      T re{}, im{};
      for (index_t n = 0; n < d_; ++n) {
        re += row[n].real() * x[n];
        im += row[n].imag() * x[n];
      }
      y[k] = {re, im};
    }
  }

  /// x = Fᴴ y.
  void apply_adjoint(const std::complex<T>* y, std::complex<T>* x) const {
    if (use_fft_) {
      auto& fft = fft_engine();
      fft.SetFlag(Eigen::FFT<T>::Unscaled);
      fft.inv(x, y, d_);
      fft.ClearFlag(Eigen::FFT<T>::Unscaled);
      const T scale = T(1) / std::sqrt(static_cast<T>(d_));
      for (index_t n = 0; n < d_; ++n) x[n] *= scale;
      return;
    }
    for (index_t n = 0; n < d_; ++n) x[n] = {};
    for (index_t k = 0; k < d_; ++k) {
      const std::complex<T>* row = f_.data() + k * d_;
      for (index_t n = 0; n < d_; ++n) x[n] += std::conj(row[n]) * y[k];
    }
  }

  [[nodiscard]] dense_matrix<std::complex<T>> matrix() const {
    dense_matrix<std::complex<T>> m(d_, d_);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d_));
    for (index_t k = 0; k < d_; ++k) {
      for (index_t n = 0; n < d_; ++n) {
        const double a = -2.0 * std::numbers::pi * static_cast<double>((k * n) % d_) /
                         static_cast<double>(d_);
        m(k, n) = {static_cast<T>(scale * std::cos(a)), static_cast<T>(scale * std::sin(a))};
      }
    }
    return m;
  }

 private:
  // One engine per thread: kissfft caches its plans, so a shared one would race.
  static Eigen::FFT<T>& fft_engine() {
    thread_local Eigen::FFT<T> engine;
    return engine;
  }

  index_t d_;
  bool use_fft_;
  std::vector<std::complex<T>> f_;  // row-major d×d, empty when the FFT is used
};

}  // namespace p
}  // namespace v0
}  // namespace lrpe
