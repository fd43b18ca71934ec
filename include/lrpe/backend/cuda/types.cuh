// SPDX-License-Identifier: MIT
/**
 * @file types.cuh
 * Storage types, device views, device positions and an owning device buffer of the CUDA
 * backend.
 *
 * - Storage: `float`, `__half` (cuda_fp16.h) or `__nv_bfloat16` (cuda_bf16.h). Every kernel
 *   loads to fp32, computes and accumulates in fp32 (angles in double, see encode_row.cuh) and
 *   rounds once when it stores (round to nearest even).
 * - `device_view<T>`: batch × heads × seq × dim in device memory, dim contiguous, the three
 *   other strides free (BNSH, BSNH, a fused QKV projection, a plain n×d block).
 * - `device_positions`: row s is at `offset + s`, or at `array[s]` with `array` in device
 *   memory; shared by every (batch, head), as in the CPU multi-head entry points.
 */
#pragma once

#include <lrpe/backend/cuda/error.cuh>
#include <lrpe/core/config.hpp>
#include <lrpe/detail/validate.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <concepts>
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace cuda {

/// The element types the CUDA kernels store: fp32, fp16 and bf16 (fp32 arithmetic inside).
template <class T>
concept storage_type = std::same_as<T, float> || std::same_as<T, __half> || std::same_as<T, __nv_bfloat16>;

/// A short name of the storage type, for messages and test names.
template <storage_type T>
constexpr const char* storage_name() noexcept {
  if constexpr (std::same_as<T, float>) return "fp32";
  else if constexpr (std::same_as<T, __half>) return "fp16";
  else return "bf16";
}

namespace detail {
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
}  // namespace detail

/// Where the rows are: `offset + s`, or `array[s]` (device memory, one entry per sequence row).
struct device_positions {
  const position_t* array = nullptr;
  position_t offset = 0;

  LRPE_HOST_DEVICE position_t operator[](index_t s) const noexcept { return array != nullptr ? array[s] : offset + s; }
  [[nodiscard]] LRPE_HOST_DEVICE bool is_array() const noexcept { return array != nullptr; }
};

/// Row s at position `offset + s`.
inline device_positions offset_positions(position_t offset) noexcept { return {nullptr, offset}; }
/// Row s at position `device_array[s]` (the array must stay alive until the work on the stream ends).
inline device_positions array_positions(const position_t* device_array) noexcept { return {device_array, 0}; }

/**
 * A batch × heads × seq × dim view of device memory with contiguous dim.
 * Row (b, h, s) starts at `data + b·batch_stride + h·head_stride + s·seq_stride`.
 */
template <class T>
struct device_view {
  T* data = nullptr;
  index_t batch = 1;
  index_t heads = 1;
  index_t seq = 0;
  index_t dim = 0;
  index_t batch_stride = 0;
  index_t head_stride = 0;
  index_t seq_stride = 0;

  /// A mutable view converts to a const one.
  template <class U>
    requires(std::is_const_v<T> && std::same_as<std::remove_const_t<T>, U>)
  LRPE_HOST_DEVICE device_view(const device_view<U>& o) noexcept  // NOLINT implicit
      : data(o.data), batch(o.batch), heads(o.heads), seq(o.seq), dim(o.dim), batch_stride(o.batch_stride),
        head_stride(o.head_stride), seq_stride(o.seq_stride) {}
  device_view() = default;
  LRPE_HOST_DEVICE device_view(T* data_, index_t batch_, index_t heads_, index_t seq_, index_t dim_,
                               index_t batch_stride_, index_t head_stride_, index_t seq_stride_) noexcept
      : data(data_), batch(batch_), heads(heads_), seq(seq_), dim(dim_), batch_stride(batch_stride_),
        head_stride(head_stride_), seq_stride(seq_stride_) {}

  [[nodiscard]] LRPE_HOST_DEVICE T* row(index_t b, index_t h, index_t s) const noexcept {
    return data + b * batch_stride + h * head_stride + s * seq_stride;
  }
  /// Number of rows, batch·heads·seq.
  [[nodiscard]] LRPE_HOST_DEVICE index_t rows() const noexcept { return batch * heads * seq; }
};

/// One head: n rows of d elements, `row_stride` apart (default d).
template <class T>
device_view<T> rows(T* data, index_t n, index_t d, index_t row_stride = -1) noexcept {
  if (row_stride < 0) row_stride = d;
  return device_view<T>(data, 1, 1, n, d, 0, 0, row_stride);
}
/// [batch, heads, seq, dim] contiguous memory.
/// @throws shape_error if batch·heads·seq·dim (of the nonzero extents) is not an index_t.
template <class T>
device_view<T> bnsh(T* data, index_t batch, index_t heads, index_t seq, index_t dim) {
  lrpe::detail::require_layout_extents("lrpe::cuda::bnsh", batch, heads, seq, dim);
  const index_t head = lrpe::detail::wrapping_product(seq, dim);
  return device_view<T>(data, batch, heads, seq, dim, lrpe::detail::wrapping_product(heads, head), head, dim);
}
/// [batch, seq, heads, dim] contiguous memory.
/// @throws shape_error if batch·seq·heads·dim (of the nonzero extents) is not an index_t.
template <class T>
device_view<T> bsnh(T* data, index_t batch, index_t seq, index_t heads, index_t dim) {
  lrpe::detail::require_layout_extents("lrpe::cuda::bsnh", batch, heads, seq, dim);
  const index_t row = lrpe::detail::wrapping_product(heads, dim);
  return device_view<T>(data, batch, heads, seq, dim, lrpe::detail::wrapping_product(seq, row), dim, row);
}

/**
 * An owning, move-only buffer of `n` elements of device memory (cudaMalloc / cudaFree).
 * Copies to and from the host are synchronous (tests, parameter tables); kernels take `data()`.
 */
template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  explicit device_buffer(std::size_t n) : n_(n) {
    if (n_ > 0) LRPE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), n_ * sizeof(T)));
  }
  /// A device copy of `host`.
  explicit device_buffer(const std::vector<T>& host) : device_buffer(host.size()) { upload(host); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  ~device_buffer() { release(); }

  [[nodiscard]] T* data() const noexcept { return p_; }
  [[nodiscard]] std::size_t size() const noexcept { return n_; }

  /// Copies `host` (exactly size() elements) to the device.
  void upload(const std::vector<T>& host) {
    ::lrpe::detail::require_shape(host.size() == n_, "lrpe::cuda::device_buffer::upload", "host.size()",
                                  ::lrpe::detail::lazy_concat("must equal size() = ", n_), host.size());
    if (n_ > 0) LRPE_CUDA_CHECK(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  /// The device contents, copied to the host (synchronous).
  [[nodiscard]] std::vector<T> download() const {
    std::vector<T> host(n_);
    if (n_ > 0) LRPE_CUDA_CHECK(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  void release() noexcept {
    if (p_ != nullptr) cudaFree(p_);  // errors here cannot be thrown from a destructor
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

namespace detail {

/// Checks a device view's invariants and that it has `dim` columns.
template <class T>
void validate_view(const device_view<T>& v, const char* where, const char* arg) {
  using ::lrpe::detail::concat;
  using ::lrpe::detail::lazy_concat;
  using ::lrpe::detail::require_shape;
  require_shape(v.batch >= 0 && v.heads >= 0 && v.seq >= 0 && v.dim >= 0, where, arg,
                "must have non-negative sizes", lazy_concat(v.batch, "x", v.heads, "x", v.seq, "x", v.dim));
  require_shape(v.batch_stride >= 0 && v.head_stride >= 0 && v.seq_stride >= 0, where, arg,
                "must have non-negative strides", lazy_concat(v.batch_stride, ",", v.head_stride, ",", v.seq_stride));
  require_shape(v.seq <= 1 || v.seq_stride >= v.dim, where, arg,
                lazy_concat("must have seq_stride >= dim (", v.dim, ")"), v.seq_stride);
  require_shape(v.rows() == 0 || v.dim == 0 || v.data != nullptr, where, arg,
                "must have non-null data when non-empty", "nullptr");
}

/// Requires b×h×s of `v` to equal those of `ref`.
template <class T, class U>
void require_same_rows(const device_view<T>& v, const device_view<U>& ref, const char* where, const char* arg,
                       const char* ref_name) {
  ::lrpe::detail::require_shape(
      v.batch == ref.batch && v.heads == ref.heads && v.seq == ref.seq, where, arg,
      ::lrpe::detail::lazy_concat("must have the batch x heads x seq of ", ref_name, " (", ref.batch, "x", ref.heads, "x",
                             ref.seq, ")"),
      ::lrpe::detail::lazy_concat(v.batch, "x", v.heads, "x", v.seq));
}

/// The largest dynamic shared memory a block of the current device may opt in to.
inline std::size_t max_dynamic_shared_bytes() {
  int dev = 0, bytes = 0;
  LRPE_CUDA_CHECK(cudaGetDevice(&dev));
  LRPE_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return static_cast<std::size_t>(bytes);
}

/// Raises `kernel`'s dynamic shared-memory limit to `bytes` (needed above 48 KiB), or throws
/// shape_error naming `where` when the device cannot give that much.
template <class Kernel>
void reserve_shared(Kernel kernel, std::size_t bytes, const char* where, const char* what) {
  const std::size_t limit = max_dynamic_shared_bytes();
  ::lrpe::detail::require_shape(bytes <= limit, where, what,
                                ::lrpe::detail::lazy_concat("needs at most ", limit,
                                                       " bytes of shared memory per block on this device"),
                                ::lrpe::detail::lazy_concat(bytes, " bytes"));
  if (bytes > 48 * 1024) {
    LRPE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  }
}

}  // namespace detail
}  // namespace cuda
}  // namespace v0
}  // namespace lrpe
