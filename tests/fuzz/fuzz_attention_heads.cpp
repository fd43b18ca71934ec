// SPDX-License-Identifier: MIT
// libFuzzer target: multi-head attention calls from fuzzed heads_views, positions, options and
// linear-attention states.
//
// From the input: Q, K, V and out as heads_views (batch ≤ 3, heads ≤ 4, seq ≤ 16, dim ≤ 16)
// built by `bnsh`, `bsnh`, padded or raw strides, with null data, extents that disagree (out's
// seq or dim, K/V heads that do or do not divide Q's: grouped-query attention, a one-token
// decode), or extents whose product or last offset overflows int64; shared positions; softmax
// with one encoding for every head, a per-head table (ALiBi, T5) or a range of encodings;
// linear attention with per-head decays and, optionally, one state per (batch, head) (wrong
// count, widths, decays, last positions). Each call runs on every backend, the pool included
// (attention_common.hpp): an lrpe::error or a result; never a memory error, UB or disagreement.
//
// Input: shape bytes, four view layouts, positions, options, encodings, states, a data seed.
#include "attention_common.hpp"

namespace {

using namespace lrpe_fuzz;
namespace c = lrpe::canonical;

/// A 4-D tensor: the view's fields (without data) and the buffer behind it.
template <class T>
struct tensor4 {
  lrpe::heads_view<T> shape{};  // data filled per call
  bool null = false;
  buffer<T> buf;
  std::vector<bool> in_view;

  [[nodiscard]] lrpe::heads_view<T> view(T* data) const {
    lrpe::heads_view<T> x = shape;
    x.data = null ? nullptr : data;
    return x;
  }
  [[nodiscard]] lrpe::heads_view<const T> cview() const {
    const lrpe::heads_view<T> x = view(const_cast<T*>(buf.data()));
    return x;
  }
};

/// The offset of the last element, when every extent is positive and the strides ≥ 0; 0 for
/// an empty view; nullopt when batch·heads or the offset overflows int64 (no memory backs it).
template <class T>
std::optional<index_t> last_offset(const lrpe::heads_view<T>& x) {
  if (x.batch <= 0 || x.heads <= 0 || x.seq <= 0 || x.dim <= 0) {
    index_t bh;
    if (__builtin_mul_overflow(x.batch, x.heads, &bh)) return std::nullopt;
    return index_t{0};
  }
  index_t bh, off = x.dim - 1, term;
  if (__builtin_mul_overflow(x.batch, x.heads, &bh)) return std::nullopt;
  for (const auto& [n, s] : {std::pair{x.batch, x.batch_stride}, std::pair{x.heads, x.head_stride},
                             std::pair{x.seq, x.seq_stride}}) {
    if (s < 0) return index_t{-1};
    if (__builtin_mul_overflow(n - 1, s, &term) || __builtin_add_overflow(off, term, &off)) return std::nullopt;
  }
  return off;
}

template <class T>
tensor4<T> read_tensor(input& in, index_t b, index_t h, index_t n, index_t d, bool is_out) {
  tensor4<T> t;
  const std::uint8_t m = in.u8();
  // extents, sometimes one of them off by a little
  if (m >= 200 && m < 230) {
    switch (in.u8() % 4) {
      case 0: b += in.small(-1, 1); break;
      case 1: h += in.small(-1, 1); break;
      case 2: n += in.small(-2, 2); break;
      default: d += in.small(-2, 2); break;
    }
  }
  T* none = nullptr;
  switch (m % 6) {
    case 0: t.shape = lrpe::bnsh(none, b, h, n, d); break;
    case 1: t.shape = lrpe::bsnh(none, b, n, h, d); break;
    case 2: {  // padded: every stride a little larger than it needs
      const index_t ss = std::max<index_t>(d, 0) + in.small(0, 3);
      const index_t hs = std::max<index_t>(n, 0) * ss + in.small(0, 3);
      t.shape = {nullptr, b, h, n, d, std::max<index_t>(h, 0) * hs + in.small(0, 3), hs, ss};
      break;
    }
    case 3:
      if (!is_out) {  // raw small strides (heads and rows may overlap: inputs are only read)
        t.shape = {nullptr, b, h, n, d, in.small(0, 40), in.small(0, 40), in.small(0, 20)};
        break;
      }
      [[fallthrough]];
    case 4:
      t.shape = lrpe::bnsh(none, b, h, n, d);
      if (m >= 230 && m < 245) t.null = true;
      if (m >= 245) t.shape.seq_stride = std::max<index_t>(d - in.small(1, 3), 0);  // below the width
      break;
    default: {
      // extents past int64 (kept only when batch·heads or the last offset overflows), through
      // bnsh/bsnh (their checks) or raw
      const index_t eb = in.edgy_i64(), eh = in.edgy_i64(), en = in.edgy_i64(), ed = in.edgy_i64();
      lrpe::heads_view<T> x{nullptr, eb, eh, en, ed, in.edgy_i64(), in.edgy_i64(), in.edgy_i64()};
      if (in.flag()) {
        t.shape = in.flag() ? lrpe::bnsh(none, eb, eh, en, ed) : lrpe::bsnh(none, eb, en, eh, ed);
      } else if (!last_offset(x) && x.batch >= 0 && x.heads >= 0 && x.seq >= 0 && x.dim >= 0) {
        t.shape = x;
      } else {
        t.shape = lrpe::bnsh(none, b, h, n, d);
      }
      break;
    }
  }
  if (const auto last = last_offset(t.shape); last && *last > (index_t{1} << 20)) {
    // a valid claim of more memory than an execution should take (bnsh/bsnh of huge extents
    // whose product fits): not a case the library can check; the plain layout instead
    t.shape = lrpe::bnsh(none, b, h, n, d);
  }
  const auto last = last_offset(t.shape);
  const index_t extent = (!last || *last < 0 || t.null) ? 0 : (t.shape.batch > 0 && t.shape.heads > 0 &&
                                                                t.shape.seq > 0 && t.shape.dim > 0)
                                                                   ? *last + 1
                                                                   : 0;
  t.buf.assign(static_cast<std::size_t>(std::max<index_t>(extent, 1)), T(0));
  t.in_view.assign(t.buf.size(), false);
  if (extent > 0) {
    const auto& x = t.shape;
    for (index_t bi = 0; bi < x.batch; ++bi)
      for (index_t hi = 0; hi < x.heads; ++hi)
        for (index_t si = 0; si < x.seq; ++si)
          for (index_t di = 0; di < x.dim; ++di)
            t.in_view[static_cast<std::size_t>(bi * x.batch_stride + hi * x.head_stride + si * x.seq_stride + di)] = true;
  }
  return t;
}

template <class T>
void require_padding_kept(const tensor4<T>& out, const std::vector<outcome<T>>& r, T sentinel) {
  for (const auto& o : r)
    for (std::size_t i = 0; i < o.out.size(); ++i)
      if (!out.in_view[i]) LRPE_FUZZ_CHECK(o.out[i] == sentinel, "a backend wrote outside out's view");
}

/// Per-head decays: one per head, the wrong count, or raw values.
std::vector<double> read_decays(input& in, index_t heads) {
  std::vector<double> r;
  const std::uint8_t m = in.u8();
  if (m < 128) return r;  // options.decay for every head
  // (a view of more heads than any buffer here is one the call must reject: no long list for it)
  const index_t n = std::clamp<index_t>(m >= 240 ? sat_add(heads, in.small(-1, 1)) : heads, 0, 64);
  for (index_t h = 0; h < n; ++h) r.push_back(m >= 224 ? in.edgy_f64() : (h % 2 ? 0.9 : 1.0 - 0.01 * h));
  return r;
}

enum class softmax_encoding { none, rope, alibi, t5, rope_per_head };
enum class linear_encoding { none, rope, rope_per_head };

template <class T>
void fuzz(input& in) {
  const index_t batch = in.small(0, 3), heads = in.small(0, 4), nq = in.small(0, 16), nk = in.small(0, 16);
  const index_t d = in.small(0, 16), dv = in.small(0, 16);
  index_t kv_heads = heads;
  switch (in.u8() % 4) {
    case 0: break;
    case 1: kv_heads = heads > 0 && heads % 2 == 0 ? heads / 2 : heads; break;  // grouped
    case 2: kv_heads = std::min<index_t>(heads, 1); break;                        // multi-query
    default: kv_heads = in.small(0, 5); break;                                    // anything
  }
  tensor4<T> q = read_tensor<T>(in, batch, heads, nq, d, false), k = read_tensor<T>(in, batch, kv_heads, nk, d, false),
             v = read_tensor<T>(in, batch, kv_heads, nk, dv, false), out = read_tensor<T>(in, batch, heads, nq, dv, true);
  // Open at the time of writing (fuzz_attention_shapes found it): heads of width 0 over no
  // memory (null data) reach a kernel's nullptr + i·stride or memcpy(dst, nullptr, 0)
  for (const tensor4<T>* t : {&q, &k, &v, &out})
    if (t->shape.dim == 0 && t->shape.seq > 0 && known_open("empty-width-null")) return;
  // issue 36 §2 (open at the time of writing, fixed since in the working tree): item 2, null
  // data in a view with elements; item 5, extents whose product or last offset overflows int64;
  // item 1, out's seq (or the other per-head lengths) unchecked on the grouped decode path
  for (const tensor4<T>* t : {&q, &k, &v, &out}) {
    const auto& x = t->shape;
    const bool elements = x.batch > 0 && x.heads > 0 && x.seq > 0 && x.dim > 0;
    if (t->null && elements && known_open("heads-null-data")) return;
    if (!last_offset(x) && known_open("heads-extent-overflow")) return;
  }
  if ((out.shape.seq != q.shape.seq || out.shape.dim != v.shape.dim || v.shape.seq != k.shape.seq ||
       k.shape.dim != q.shape.dim) &&
      known_open("heads-unchecked-lengths"))
    return;
  const position_spec qp = read_positions(in, q.shape.seq), kp = read_positions(in, k.shape.seq);
  const bool causal = in.flag();
  value_stream vs{in.u64() | 1};
  for (auto* t : {&q, &k, &v})
    for (auto& x : t->buf) x = vs.next<T>();
  const T sentinel = T(-321.5);
  const buffer<T> out0(out.buf.size(), sentinel);
  T* out_ptr = nullptr;
  const index_t hd = q.shape.dim;
  // the width encodings are built for: hd or off by one, at most 4097, which stands for every
  // width past the buffers here (64 per-head encoders 2^24 wide would pass the memory limit)
  const index_t d_enc = std::min<index_t>(in.u8() >= 240 ? sat_add(hd, in.small(-1, 1)) : hd, 4097);
  const double qm = max_abs(q.buf), km = max_abs(k.buf), vm = max_abs(v.buf);

  // ------------------------------------------------------------------------ softmax
  {
    auto sopt = read_softmax_options(in, causal);
    sopt.q_positions = qp.get();
    sopt.k_positions = kp.get();
    std::vector<outcome<T>> sr;
    double bias_bound = 0, default_scale = hd > 0 ? 1.0 / std::sqrt(static_cast<double>(hd)) : 1.0;
    auto run = [&](const auto& encodings) {
      if (simd_exp2_nan_risk<T>(false, sopt.scale) && known_open("simd-exp2-nan")) return;
      sr = on_backends<T>(out0, out_ptr, out.null, [&](auto backend) {
        lrpe::softmax_attention(q.cview(), k.cview(), v.cview(), out.view(out_ptr), encodings, sopt, backend);
      });
    };
    // (at most 64: more heads than that come only from a view the call must reject)
    const index_t table_heads = in.u8() >= 200 ? in.small(0, 5) : std::clamp<index_t>(q.shape.heads, 1, 64);
    switch (static_cast<softmax_encoding>(in.u8() % 5)) {
      case softmax_encoding::none: run(lrpe::no_encoding{}); break;
      case softmax_encoding::rope: run(lrpe::rope_neox<T>(d_enc)); break;
      case softmax_encoding::alibi: {
        const auto e = c::alibi<T>::for_heads(d_enc, table_heads);
        run(e);
        // (positions are checked by the heads' calls: only when some head ran)
        if (!sr.empty() && !sr[0].threw && q.shape.batch > 0 && q.shape.heads > 0 && q.shape.seq > 0 && k.shape.seq > 0) {
          const auto qpos = qp.get(), kpos = kp.get();
          for (index_t h = 0; h < e.heads(); ++h)
            for (index_t i = 0; i < q.shape.seq; ++i)
              for (index_t j = 0; j < k.shape.seq; ++j)
                bias_bound = std::max(bias_bound, std::abs(e.head(h).bias(qpos[i], kpos[j])));
        }
        break;
      }
      case softmax_encoding::t5: {
        lrpe::row_matrix<T> table(std::max<index_t>(table_heads, 0), 32);
        for (index_t i = 0; i < table.size(); ++i) table.data()[i] = vs.next<T>();
        run(c::t5_bias<T>(d_enc, c::t5_buckets{}, table));
        bias_bound = table.size() ? static_cast<double>(table.cwiseAbs().maxCoeff()) : 0.0;
        default_scale = 1.0;
        break;
      }
      case softmax_encoding::rope_per_head: {
        std::vector<lrpe::rope_neox<T>> per_head;
        for (index_t h = 0; h < table_heads; ++h) per_head.emplace_back(d_enc, 100.0 * (h + 1));
        run(per_head);
        break;
      }
    }
    if (!sr.empty()) require_same_outcome(sr, simd_scale_overflows<T>(sopt.scale));
    if (!sr.empty() && !sr[0].threw) {
      require_padding_kept(out, sr, sentinel);
      const double scale = sopt.scale ? std::abs(*sopt.scale) : default_scale;
      const double logit_bound = scale * static_cast<double>(hd) * qm * km + bias_bound;
      if (logit_bound <= 1e4) {
        for (const auto& o : sr)  // (the SIMD backend may reject a scale the reference takes)
          for (std::size_t i = 0; i < o.out.size() && !o.threw; ++i)
            if (out.in_view[i])
              LRPE_FUZZ_CHECK(std::abs(static_cast<double>(o.out[i])) <= vm * (1 + 1e-3) + 1e-6,
                              "a softmax output is outside the range of the values (or not finite)");
      }
      compare_backends(sr, logit_bound <= 60, 64 * unit<T> * (logit_bound + 1) * (vm + 1),
                       "multi-head softmax: the pool's result differs from one thread's");
    }
  }

  // ------------------------------------------------------------------------ linear
  if (simd_v_overread_risk<T>(v.shape.seq_stride, v.shape.dim) && known_open("simd-linear-v-overread")) return;
  auto lopt = read_linear_options(in, causal);
  lopt.q_positions = qp.get();
  lopt.k_positions = kp.get();
  const std::vector<double> decays = read_decays(in, q.shape.heads);
  lopt.head_decays = decays;
  const auto lkind = static_cast<linear_encoding>(in.u8() % 3);
  const phi_choice phi = read_phi(in);
  // (states of more than 2^16 entries come only from views the call must reject; 64 of them,
  // copied once per backend, would pass libFuzzer's memory limit)
  const bool with_states = in.flag() && (static_cast<double>(std::max<index_t>(hd, 0)) + 1) *
                                                static_cast<double>(std::max<index_t>(v.shape.dim, 0)) <= 0x1p16;
  const index_t per_head_count = in.u8() >= 230 ? in.small(0, 5) : std::clamp<index_t>(q.shape.heads, 0, 64);

  // states: batch × heads (or a wrong count), each with its head's widths and decay (or not),
  // some holding keys already (a last position the segment must not precede)
  std::vector<lrpe::linear_attention_state<T>> states;
  if (with_states) {
    index_t bh = 0;  // batch × heads, or more than the 64 states built when it overflows
    if (__builtin_mul_overflow(std::max<index_t>(q.shape.batch, 0), std::max<index_t>(q.shape.heads, 0), &bh)) bh = 65;
    bh = std::min<index_t>(bh, 65);
    const index_t count = in.u8() >= 240 ? bh + in.small(-1, 1) : bh;
    for (index_t i = 0; i < std::min<index_t>(count, 64); ++i) {
      const index_t h = q.shape.heads > 0 ? i % q.shape.heads : 0;
      const std::uint8_t m = in.u8();
      const double lambda = m >= 250 ? 0.5 : (decays.size() > static_cast<std::size_t>(h) ? decays[static_cast<std::size_t>(h)] : lopt.decay);
      const index_t f = m >= 240 && m < 250 ? sat_add(hd, 1) : hd;
      states.emplace_back(f, v.shape.dim, lambda);  // may throw: a width < 1, λ ∉ (0, 1]
      if (m % 3 == 0) {  // one key folded in already, at a position from the input
        std::vector<T> kf(static_cast<std::size_t>(std::max<index_t>(f, 0)), T(0.5)), vv(static_cast<std::size_t>(std::max<index_t>(v.shape.dim, 0)), T(-0.25));
        states.back().append_features(kf.data(), vv.data(), m % 2 ? in.small(-4, 20) : in.edgy_i64());
      }
    }
  }

  std::vector<outcome<T>> lr;
  std::vector<std::vector<lrpe::linear_attention_state<T>>> after;
  with_phi(phi, [&](const auto& f) {
    auto run = [&](const auto& encodings) {
      lr = on_backends<T>(out0, out_ptr, out.null, [&](auto backend) {
        if (with_states) {
          after.push_back(states);
          lrpe::linear_attention(q.cview(), k.cview(), v.cview(), out.view(out_ptr), encodings, f,
                                 std::span<lrpe::linear_attention_state<T>>(after.back()), lopt, backend);
        } else {
          lrpe::linear_attention(q.cview(), k.cview(), v.cview(), out.view(out_ptr), encodings, f, lopt, backend);
        }
      });
    };
    switch (lkind) {
      case linear_encoding::none: run(lrpe::no_encoding{}); break;
      case linear_encoding::rope: run(lrpe::rope_neox<T>(d_enc)); break;
      case linear_encoding::rope_per_head: {
        std::vector<lrpe::rope_neox<T>> per_head;
        for (index_t h = 0; h < per_head_count; ++h) per_head.emplace_back(d_enc, 100.0 * (h + 1));
        run(per_head);
        break;
      }
    }
  });
  require_same_outcome(lr);
  if (lr[0].threw) return;
  require_padding_kept(out, lr, sentinel);
  const double pq = phi_bound(phi, qm), pk = phi_bound(phi, km);
  double held = 0;  // what the states held before the call
  for (const auto& s : states)
    held = std::max({held, static_cast<double>(s.kv().cwiseAbs().maxCoeff()), static_cast<double>(s.k_sum().cwiseAbs().maxCoeff())});
  const double bound = (static_cast<double>(std::max<index_t>(k.shape.seq, 1)) * static_cast<double>(std::max<index_t>(hd, 1)) *
                            pk * (vm + 1) + held) * pq * static_cast<double>(std::max<index_t>(hd, 1));
  const bool moderate = bound < 1e30 && (lopt.norm == lrpe::normalisation::none || lopt.eps >= 1e-3);
  if (moderate) {
    for (const auto& o : lr)
      for (std::size_t i = 0; i < o.out.size(); ++i)
        if (out.in_view[i]) LRPE_FUZZ_CHECK(finite(o.out[i]), "a multi-head linear attention output is not finite");
  }
  const double tol = 16 * unit<T> * static_cast<double>(std::max<index_t>(hd, 1) + std::max<index_t>(k.shape.seq, 1)) * bound;
  compare_backends(lr, moderate && lopt.norm == lrpe::normalisation::none, tol,
                   "multi-head linear: the pool's result differs from one thread's");
  if (with_states && after.size() >= 3) {
    for (std::size_t i = 0; i < after[0].size(); ++i) {
      LRPE_FUZZ_CHECK(after[1][i].count() == after[0][i].count() && after[2][i].count() == after[0][i].count() &&
                          after[1][i].last_position() == after[0][i].last_position(),
                      "backends leave states with other counts or positions");
      const auto a = after[1][i].export_state().to_flat(), b = after[2][i].export_state().to_flat();
      LRPE_FUZZ_CHECK(same_bits(a, b), "the pool leaves another state than one thread");
    }
  }
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
