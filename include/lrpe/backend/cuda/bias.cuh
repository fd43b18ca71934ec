// SPDX-License-Identifier: MIT
/**
 * @file bias.cuh
 * Additive logit biases of the flash-style softmax kernel: ALiBi and clipped Toeplitz tables
 * (T5 buckets and `canonical::toeplitz_bias`), as device copies of the CPU variants.
 *
 * - ALiBi: bias(s, t) = m_h·(t − s) (causal form) or −m_h·|t − s| (symmetric), the product in
 *   double then rounded to float, as `canonical::alibi::bias` followed by the CPU's
 *   `detail::held_logit<float>` (a product past float's range is held at ±FLT_MAX).
 * - Table: bias(s, t) = w_h[clip(t − s, R) + R]. A T5 table is expanded on the host, with
 *   lrpe's own `t5_bucket`, to R = max_distance: every |t − s| ≥ max_distance falls in the last
 *   bucket of its direction, so clipping at R is exact and the device never takes a log.
 */
#pragma once

#include <lrpe/backend/cuda/types.cuh>
#include <lrpe/canonical/alibi.hpp>
#include <lrpe/canonical/t5_bias.hpp>
#include <lrpe/canonical/toeplitz_bias.hpp>

#include <cfloat>
#include <cmath>
#include <vector>

namespace lrpe {
inline namespace v0 {
namespace cuda {

/// Which bias the softmax kernel adds.
enum class bias_kind : int { none, alibi, table };

/// Flat description of a bias (device pointers owned by a `device_bias`).
struct bias_desc {
  bias_kind kind = bias_kind::none;
  int heads = 0;             ///< heads in the table / slopes
  int fixed_head = -1;       ///< ≥ 0: every head of the launch uses this one; −1: head h uses h
  const double* slopes = nullptr;
  bool alibi_symmetric = false;
  const float* table = nullptr;  ///< heads × (2R+1), row-major
  position_t radius = 0;         ///< R
  bool unit_default_scale = false;  ///< T5: the default scale is 1, not 1/√d
};

namespace detail {
/// The bias of query position s and key position t for head `head`.
/// t − s is formed without overflow for any positions (device position arrays are not checked
/// on the host): in two's complement, then `wrapped` when the true difference is not an int64,
/// as the CPU's `offset_value` (ALiBi: in double) and `saturating_offset` (tables: clipped).
LRPE_HOST_DEVICE inline float bias_value(const bias_desc& b, int head, position_t s, position_t t) {
  const auto delta = static_cast<position_t>(static_cast<unsigned long long>(t) - static_cast<unsigned long long>(s));
  const bool wrapped = ((t ^ s) & (t ^ delta)) < 0;  // t and s of opposite signs, and delta has s's sign
  if (b.kind == bias_kind::alibi) {
    const double m = b.slopes[head];
    const double x = wrapped ? static_cast<double>(t) - static_cast<double>(s) : static_cast<double>(delta);
    const double y = b.alibi_symmetric ? -m * fabs(x) : m * x;
    // held within ±FLT_MAX as the CPU's `alibi::bias` (±DBL_MAX) then `held_logit<float>`: the
    // slope and offset are finite, so an infinite product is an overflow, held too
    if (y > FLT_MAX) return FLT_MAX;
    if (y < -FLT_MAX) return -FLT_MAX;
    return static_cast<float>(y);
  }
  if (b.kind == bias_kind::table) {
    const position_t r = b.radius;
    const position_t c = wrapped ? (t > s ? r : -r) : (delta < -r ? -r : (delta > r ? r : delta));
    return b.table[static_cast<index_t>(head) * (2 * r + 1) + (c + r)];
  }
  return 0.0f;
}
}  // namespace detail

/**
 * Device copy of an additive bias (every head of its table). A launch over H heads uses head
 * h's row when the table has H rows, the only row when it has one, and the object's own
 * `head_index()` when the launch has one head.
 */
class device_bias {
 public:
  /// ALiBi, every slope.
  template <real_scalar T>
  explicit device_bias(const canonical::alibi<T>& a) : head_index_(a.head_index()) {
    desc_.kind = bias_kind::alibi;
    desc_.heads = static_cast<int>(a.heads());
    desc_.alibi_symmetric = a.form() == canonical::alibi_form::symmetric;
    slopes_ = device_buffer<double>(a.slopes());
    desc_.slopes = slopes_.data();
  }
  /// T5 buckets, expanded to a clipped table of radius max_distance (heads × (2·max_distance + 1)
  /// floats, at most `max_t5_table_entries`).
  /// @throws parameter_error (a larger table), domain_error (a table value past float's range).
  template <real_scalar T>
  explicit device_bias(const canonical::t5_bias<T>& t5) : head_index_(t5.head_index()) {
    constexpr const char* where = "lrpe::cuda::device_bias";
    const position_t r = t5.buckets().max_distance;
    const index_t heads = t5.heads();
    ::lrpe::detail::require_parameter(r <= (max_t5_table_entries / heads - 1) / 2, where,
                                      "t5.buckets().max_distance",
                                      ::lrpe::detail::lazy_concat("must keep the expanded table, heads x (2 max_distance "
                                                                  "+ 1) = ", heads, " x (2 max_distance + 1), within ",
                                                                  max_t5_table_entries, " entries"),
                                      r);
    std::vector<float> w(static_cast<std::size_t>(heads * (2 * r + 1)));
    for (index_t h = 0; h < heads; ++h) {
      for (position_t delta = -r; delta <= r; ++delta)
        w[static_cast<std::size_t>(h * (2 * r + 1) + delta + r)] =
            to_float_entry(t5.table()(h, t5.bucket(delta)), where, "t5.table()");
    }
    set_table(w, heads, r);
    desc_.unit_default_scale = true;
  }
  /// A clipped Toeplitz table.
  /// @throws domain_error (a table value past float's range).
  template <real_scalar T>
  explicit device_bias(const canonical::toeplitz_bias<T>& tb) : head_index_(tb.head_index()) {
    constexpr const char* where = "lrpe::cuda::device_bias";
    const position_t r = tb.max_distance();
    std::vector<float> w(static_cast<std::size_t>(tb.heads() * (2 * r + 1)));
    for (index_t h = 0; h < tb.heads(); ++h) {
      for (index_t c = 0; c < 2 * r + 1; ++c)
        w[static_cast<std::size_t>(h * (2 * r + 1) + c)] = to_float_entry(tb.table()(h, c), where, "tb.table()");
    }
    set_table(w, tb.heads(), r);
  }

  /// The largest T5 table a `device_bias` expands (2^26 floats, 256 MiB): T5's own
  /// max_distance = 128 needs 257 entries a head.
  static constexpr index_t max_t5_table_entries = index_t{1} << 26;

  [[nodiscard]] const bias_desc& desc() const noexcept { return desc_; }
  [[nodiscard]] index_t heads() const noexcept { return desc_.heads; }
  [[nodiscard]] index_t head_index() const noexcept { return head_index_; }

  /// The description for a launch over `launch_heads` heads (see the class comment).
  [[nodiscard]] bias_desc for_launch(index_t launch_heads, const char* where) const {
    bias_desc b = desc_;
    if (desc_.heads == 1) {
      b.fixed_head = 0;
    } else if (launch_heads == 1) {
      b.fixed_head = static_cast<int>(head_index_);
    } else {
      ::lrpe::detail::require_shape(launch_heads == desc_.heads, where, "bias.heads()",
                                    ::lrpe::detail::lazy_concat("must be 1 or the number of heads of q (", launch_heads, ")"),
                                    desc_.heads);
      b.fixed_head = -1;
    }
    return b;
  }

 private:
  /// A table value as the kernels' float: finite there too (a finite double past 3.4e38 would
  /// be an infinite logit, and NaN rows).
  template <class V>
  static float to_float_entry(V x, const char* where, const char* arg) {
    if (!::lrpe::detail::finite_in<float>(static_cast<double>(x)))
      ::lrpe::detail::fail<domain_error>(where, arg, "must hold values finite in float", x);
    return static_cast<float>(x);
  }

  void set_table(const std::vector<float>& w, index_t heads, position_t r) {
    desc_.kind = bias_kind::table;
    desc_.heads = static_cast<int>(heads);
    desc_.radius = r;
    table_ = device_buffer<float>(w);
    desc_.table = table_.data();
  }

  bias_desc desc_{};
  index_t head_index_ = 0;
  device_buffer<double> slopes_;
  device_buffer<float> table_;
};

}  // namespace cuda
}  // namespace v0
}  // namespace lrpe
