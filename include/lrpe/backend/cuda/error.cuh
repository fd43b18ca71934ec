// SPDX-License-Identifier: MIT
/**
 * @file error.cuh
 * `lrpe::cuda_error` and the checks every host wrapper of the CUDA backend runs.
 *
 * Every CUDA runtime call made by lrpe goes through `LRPE_CUDA_CHECK(call)`; every kernel
 * launch is preceded by `LRPE_CUDA_CHECK_PENDING("kernel name")` and followed by
 * `LRPE_CUDA_CHECK_LAUNCH("kernel name")` (both cudaGetLastError): an error left pending by an
 * earlier call of the caller's is reported as such, not as the failure of lrpe's launch. A failure
 * throws `lrpe::cuda_error` whose message names the call, the file and line, and the CUDA
 * error name and string, e.g.
 * `lrpe/backend/cuda/types.cuh:71: cudaMalloc(&p, bytes) failed: cudaErrorMemoryAllocation (out of memory)`.
 * Bad arguments (shapes, parameters) are reported, before any launch, with the CPU library's
 * `shape_error` / `parameter_error` / `domain_error`.
 */
#pragma once

#include <lrpe/core/error.hpp>

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace lrpe {
inline namespace v0 {

/// A failed CUDA runtime call or kernel launch (no device, out of memory, launch failure...).
class cuda_error : public std::runtime_error, public error {
 public:
  cuda_error(cudaError_t code, const std::string& message) : std::runtime_error(message), code_(code) {}
  [[nodiscard]] const char* what() const noexcept override { return std::runtime_error::what(); }
  /// The CUDA error code.
  [[nodiscard]] cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

namespace cuda {
namespace detail {

/// Throws `cuda_error` unless `status == cudaSuccess`.
inline void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) {
    throw cuda_error(status, ::lrpe::detail::concat(file, ":", line, ": ", call, " failed: ",
                                                    cudaGetErrorName(status), " (",
                                                    cudaGetErrorString(status), ")"));
  }
}

/// Throws `cuda_error` unless `status == cudaSuccess`, naming `status` as an error left pending
/// by an earlier CUDA call (not lrpe's) and found before the launch of `kernel`.
inline void check_pending(cudaError_t status, const char* kernel, const char* file, int line) {
  if (status != cudaSuccess) {
    throw cuda_error(status, ::lrpe::detail::concat(file, ":", line, ": an error of an earlier CUDA call, not lrpe's, ",
                                                    "was pending before the launch of ", kernel, ": ",
                                                    cudaGetErrorName(status), " (", cudaGetErrorString(status),
                                                    ")"));
  }
}

}  // namespace detail
}  // namespace cuda
}  // namespace v0
}  // namespace lrpe

/// Runs a CUDA runtime call and throws `lrpe::cuda_error` (call, file:line, error string) on failure.
#define LRPE_CUDA_CHECK(call) ::lrpe::cuda::detail::check((call), #call, __FILE__, __LINE__)
/// Reports (and clears) an error left pending by an earlier CUDA call before a launch, so that
/// `LRPE_CUDA_CHECK_LAUNCH` blames the launch only for its own failure.
#define LRPE_CUDA_CHECK_PENDING(kernel_name) \
  ::lrpe::cuda::detail::check_pending(cudaGetLastError(), kernel_name, __FILE__, __LINE__)
/// Checks the launch just made (cudaGetLastError) and names it in the error.
#define LRPE_CUDA_CHECK_LAUNCH(kernel_name) \
  ::lrpe::cuda::detail::check(cudaGetLastError(), "launch of " kernel_name, __FILE__, __LINE__)
