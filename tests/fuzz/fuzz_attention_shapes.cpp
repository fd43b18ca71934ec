// SPDX-License-Identifier: MIT
// libFuzzer target: one head's attention calls from fuzzed views, positions and options.
//
// From the input: Q, K, V and out as matrix_views (sizes ≤ 64 rows × 32 columns; row strides
// with padding, below the width, raw; null data; rows, columns or extents that disagree with
// each other or overflow int64), positions (offsets, sorted and unsorted arrays, int64
// extremes, arrays of the wrong length), softmax options (causal, scale, tile) with an encoding
// (none, RoPE, ALiBi, T5 buckets, Shaw; widths that may not match), and linear options
// (normalisation, eps, chunk, decay) with a linearizable encoding (none, RoPE, cosFormer) and a
// feature map. Then one softmax_attention and one linear_attention call on every backend
// (attention_common.hpp): an lrpe::error or a result; never a memory error, UB or disagreement.
//
// Input: a flags byte, the four views, positions, options and encodings (fuzz_common.hpp reads
// zeros past the end), a seed for the data values.
#include "attention_common.hpp"

namespace {

using namespace lrpe_fuzz;
namespace c = lrpe::canonical;

/// A 2-D tensor: what its view claims, and the buffer behind it.
template <class T>
struct tensor {
  index_t rows = 0, cols = 0, stride = 0;
  bool null = false;
  buffer<T> buf;
  std::vector<bool> in_view;  ///< which buffer elements the view covers (for out's padding)

  [[nodiscard]] lrpe::matrix_view<T> view(T* data) const { return {null ? nullptr : data, rows, cols, stride}; }
  [[nodiscard]] lrpe::matrix_view<const T> cview() const { return {null ? nullptr : buf.data(), rows, cols, stride}; }
};

template <class T>
tensor<T> read_tensor(input& in, index_t rows, index_t cols) {
  tensor<T> t;
  t.rows = rows;
  t.cols = cols;
  t.stride = cols;
  const std::uint8_t m = in.u8();
  if (m < 150) {
    if (m % 4 == 0) t.stride = cols + in.small(1, 3);  // padded rows
  } else if (m < 175) {
    t.rows = rows + in.small(-2, 2);  // may be negative
  } else if (m < 200) {
    t.cols = cols + in.small(-2, 2);
    t.stride = std::max<index_t>(t.cols, 0);
  } else if (m < 220) {
    t.stride = cols + in.small(-3, -1);  // below the width
  } else if (m < 235) {
    t.null = true;
  } else if (m < 248) {
    t.rows = in.small(-1, 64);
    t.cols = in.small(-1, 32);
    t.stride = in.small(-1, 40);
  } else {
    // a claim past int64, which no memory backs: huge rows and stride (kept only if it overflows)
    const index_t r = in.edgy_i64(), s = in.edgy_i64();
    if (!claimed_extent(r, t.cols, s)) {
      t.rows = r;
      t.stride = s;
    }
  }
  const auto extent = claimed_extent(t.rows, t.cols, t.stride);
  // a claim that overflows, or a negative one (a negative stride over several rows): a token
  // buffer, the call must be rejected before memory is touched
  const index_t n = (!extent || *extent < 0 || t.null) ? 1 : *extent;
  t.buf.assign(static_cast<std::size_t>(n), T(0));
  t.in_view.assign(t.buf.size(), false);
  if (extent && *extent > 0 && !t.null) {  // (any stride: a one-row view ignores it)
    for (index_t i = 0; i < t.rows; ++i)
      for (index_t j = 0; j < t.cols; ++j) {
        const index_t at = i * t.stride + j;
        if (at >= 0 && at < n) t.in_view[static_cast<std::size_t>(at)] = true;
      }
  }
  return t;
}

template <class T>
void fill(tensor<T>& t, value_stream& vs) {
  for (auto& x : t.buf) x = vs.next<T>();
}

/// Out's elements outside its view (padding, a token buffer) are as they were: no backend
/// writes beyond the rows and columns it was given.
template <class T>
void require_padding_kept(const tensor<T>& out, const std::vector<outcome<T>>& r, T sentinel) {
  for (const auto& o : r)
    for (std::size_t i = 0; i < o.out.size(); ++i)
      if (!out.in_view[i]) LRPE_FUZZ_CHECK(o.out[i] == sentinel, "a backend wrote outside out's view");
}

enum class softmax_encoding { none, rope, alibi, t5, shaw };
enum class linear_encoding { none, rope, cosformer };

template <class T>
void fuzz(input& in) {
  // shapes the views are built around
  const index_t nq = in.small(0, 64), nk = in.small(0, 64), d = in.small(0, 32), dv = in.small(0, 32);
  tensor<T> q = read_tensor<T>(in, nq, d), k = read_tensor<T>(in, nk, d), v = read_tensor<T>(in, nk, dv),
            out = read_tensor<T>(in, nq, dv);
  // Open at the time of writing (found here): an n×0 view with null data (an empty buffer's
  // data(), as an Eigen n×0 matrix has) is accepted, then a kernel forms row(i) = nullptr +
  // i·stride (reference) or copies from it with memcpy(dst, nullptr, 0) (SIMD softmax)
  for (const tensor<T>* t : {&q, &k, &v, &out})
    if (t->rows > 0 && t->cols == 0 && known_open("empty-width-null")) return;
  // Open at the time of writing (found here): a view whose last row's offset (rows − 1)·stride +
  // cols overflows int64 is accepted (the 2-D twin of issue 36 §2 item 5, fixed for heads_view)
  for (const tensor<T>* t : {&q, &k, &v, &out})
    if (!claimed_extent(t->rows, t->cols, t->stride) && known_open("view-extent-overflow")) return;
  const position_spec qp = read_positions(in, q.rows), kp = read_positions(in, k.rows);
  const bool causal = in.flag();

  // softmax: options and encoding
  auto sopt = read_softmax_options(in, causal);
  sopt.q_positions = qp.get();
  sopt.k_positions = kp.get();
  const auto skind = static_cast<softmax_encoding>(in.u8() % 5);
  const index_t d_enc = in.u8() >= 240 ? d + in.small(-1, 1) : d;  // sometimes not q's width
  const std::uint64_t seed = in.u64() | 1;
  value_stream vs{seed};
  fill(q, vs);
  fill(k, vs);
  fill(v, vs);
  bool poked = false;
  if (in.u8() == 0xEE) {  // one non-finite input (where the tensor has any)
    tensor<T>& t = in.flag() ? q : v;
    const std::uint16_t at = in.u16();
    const T bad = in.flag() ? std::numeric_limits<T>::quiet_NaN() : std::numeric_limits<T>::infinity();
    if (!t.buf.empty()) {
      poked = true;
      t.buf[at % t.buf.size()] = bad;
    }
  }
  const T sentinel = T(123.25);
  buffer<T> out0(out.buf.size(), sentinel);
  T* out_ptr = nullptr;

  // ------------------------------------------------------------------------ softmax
  double logit_bound = 0;   // |logit| ≤ this for every pair (an upper bound)
  double value_bound = 0;   // |out| ≤ this for every row (a convex combination)
  std::vector<outcome<T>> sr;
  {
    const double qm = max_abs(q.buf), km = max_abs(k.buf), vm = max_abs(v.buf);
    auto run = [&](const auto& encoding, double default_scale, double bias_bound, double extra_content,
                   double extra_value) {
      if (simd_exp2_nan_risk<T>(poked, sopt.scale, bias_bound) && known_open("simd-exp2-nan")) return;
      sr = on_backends<T>(out0, out_ptr, out.null, [&](auto backend) {
        lrpe::softmax_attention(q.cview(), k.cview(), v.cview(), out.view(out_ptr), encoding, sopt, backend);
      });
      const double scale = sopt.scale ? std::abs(*sopt.scale) : default_scale;
      logit_bound = scale * (static_cast<double>(d) * qm * km + extra_content) + bias_bound;
      value_bound = vm + extra_value;
    };
    const double inv_sqrt_d = d > 0 ? 1.0 / std::sqrt(static_cast<double>(d)) : 1.0;
    switch (skind) {
      case softmax_encoding::none: run(lrpe::no_encoding{}, inv_sqrt_d, 0, 0, 0); break;
      case softmax_encoding::rope: run(lrpe::rope_neox<T>(d_enc), inv_sqrt_d, 0, 0, 0); break;
      case softmax_encoding::alibi: {
        const double slope = in.flag() ? in.edgy_f64() : 0.0625 * in.small(0, 16);
        if (simd_exp2_nan_risk<T>(false, std::nullopt, slope) && known_open("simd-exp2-nan")) break;
        const c::alibi<T> e(d_enc, {slope}, in.flag() ? c::alibi_form::causal : c::alibi_form::symmetric);
        run(e, inv_sqrt_d, 0, 0, 0);
        if (!sr.empty() && !sr[0].threw) {  // the call accepted the positions: add the largest |bias| of its pairs
          const auto qpos = qp.get(), kpos = kp.get();
          double bias = 0;
          for (index_t i = 0; i < q.rows; ++i)
            for (index_t j = 0; j < k.rows; ++j) bias = std::max(bias, std::abs(e.bias(qpos[i], kpos[j])));
          logit_bound += bias;
        }
        break;
      }
      case softmax_encoding::t5: {
        c::t5_buckets cfg;
        cfg.num_buckets = in.small(-1, 40);
        cfg.max_distance = in.flag() ? in.edgy_i64() : in.small(0, 200);
        cfg.bidirectional = in.flag();
        lrpe::row_matrix<T> table(1, std::max<index_t>(cfg.num_buckets, 0));
        for (index_t j = 0; j < table.cols(); ++j) table(0, j) = vs.next<T>();
        const c::t5_bias<T> e(d_enc, cfg, table);
        run(e, 1.0, table.size() ? static_cast<double>(table.cwiseAbs().maxCoeff()) : 0.0, 0, 0);
        break;
      }
      case softmax_encoding::shaw: {
        const position_t r = in.flag() ? in.edgy_i64() : in.small(0, 8);
        const index_t rows = in.flag() ? 2 * std::clamp<position_t>(r, 0, 8) + 1 : in.small(0, 20);
        const index_t w = std::max<index_t>(d_enc, 0);
        lrpe::row_matrix<T> key(rows, w), value;
        for (index_t i = 0; i < key.size(); ++i) key.data()[i] = vs.next<T>();
        if (in.flag()) value = key;
        const c::shaw<T> e(d_enc, r, key, value);
        const double am = key.size() ? static_cast<double>(key.cwiseAbs().maxCoeff()) : 0.0;
        run(e, inv_sqrt_d, 0, static_cast<double>(d) * qm * am, value.size() ? am : 0.0);
        break;
      }
    }
  }
  if (!sr.empty()) require_same_outcome(sr, simd_scale_overflows<T>(sopt.scale));
  if (!sr.empty() && !sr[0].threw) {
    require_padding_kept(out, sr, sentinel);
    // moderate logits: every row a convex combination of value rows (or zero), finite
    if (!poked && logit_bound <= 1e4) {
      for (const auto& o : sr)  // (the SIMD backend may reject a scale the reference takes)
        for (std::size_t i = 0; i < o.out.size() && !o.threw; ++i)
          if (out.in_view[i])
            LRPE_FUZZ_CHECK(std::abs(static_cast<double>(o.out[i])) <= value_bound * (1 + 1e-3) + 1e-6,
                            "a softmax output is outside the range of the values (or not finite)");
    }
    compare_backends(sr, !poked && logit_bound <= 60, 64 * unit<T> * (logit_bound + 1) * (value_bound + 1),
                     "softmax: the pool's result differs from one thread's");
  }

  // ------------------------------------------------------------------------ linear
  if (simd_v_overread_risk<T>(v.stride, v.cols) && known_open("simd-linear-v-overread")) return;
  auto lopt = read_linear_options(in, causal);
  lopt.q_positions = qp.get();
  lopt.k_positions = kp.get();
  const auto lkind = static_cast<linear_encoding>(in.u8() % 3);
  const phi_choice phi = read_phi(in);
  const double cos_m = in.flag() ? in.edgy_f64() : 64.0;
  std::vector<outcome<T>> lr;
  with_phi(phi, [&](const auto& f) {
    auto run = [&](const auto& encoding) {
      lr = on_backends<T>(out0, out_ptr, out.null, [&](auto backend) {
        lrpe::linear_attention(q.cview(), k.cview(), v.cview(), out.view(out_ptr), encoding, f, lopt, backend);
      });
    };
    switch (lkind) {
      case linear_encoding::none: run(lrpe::no_encoding{}); break;
      case linear_encoding::rope: run(lrpe::rope_neox<T>(d_enc)); break;
      case linear_encoding::cosformer: run(c::cosformer<T>(d_enc, cos_m)); break;
    }
  });
  require_same_outcome(lr);
  if (lr[0].threw) return;
  require_padding_kept(out, lr, sentinel);
  // |out| ≤ n_k · |φ(q)|·|φ(k)| · max|v| (features of unitary encoders keep the norm); with a
  // denominator, eps ≥ 1e-3 bounds the quotient
  const double pq = phi_bound(phi, max_abs(q.buf)), pk = phi_bound(phi, max_abs(k.buf));
  const double bound = static_cast<double>(std::max<index_t>(k.rows, 1)) * static_cast<double>(std::max<index_t>(d, 1)) *
                       pq * pk * (max_abs(v.buf) + 1);
  const bool moderate = !poked && bound < 1e30 && (lopt.norm == lrpe::normalisation::none || lopt.eps >= 1e-3);
  if (moderate) {
    for (const auto& o : lr)
      for (std::size_t i = 0; i < o.out.size(); ++i)
        if (out.in_view[i]) LRPE_FUZZ_CHECK(finite(o.out[i]), "a linear attention output is not finite");
  }
  const double tol = 16 * unit<T> * static_cast<double>(std::max<index_t>(d, 1) + std::max<index_t>(k.rows, 1)) * bound;
  compare_backends(lr, moderate && lopt.norm == lrpe::normalisation::none, tol,
                   "linear: the pool's result differs from one thread's");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return lrpe_fuzz::run_one(
      [](lrpe_fuzz::input& in) {
        if (in.flag()) fuzz<float>(in);
        else fuzz<double>(in);
      },
      data, size);
}
