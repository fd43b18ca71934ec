// SPDX-License-Identifier: MIT
/**
 * @file backend_interface.hpp
 * The contract between the attention front ends and the backends, in one place: the problem
 * structs a front end fills, and every hook a backend may provide, each with its default or
 * with a primary template whose `static_assert` names the missing (operation, backend) pair.
 *
 * A backend is a tag type (an empty struct, or a small value such as `simd_policy` holding a
 * pool). Front ends call the hooks unqualified with the tag first, so they are found by ADL on
 * the tag's namespace: a backend declared after this header, in any namespace, overloads them.
 *
 * | hook | called by | default |
 * |---|---|---|
 * | `call_guard(b)` | every attention entry point, held for the call | holds nothing |
 * | `softmax_kernel(b, problem, logits, value_term, reweight)` | `softmax_attention` | none: compile error |
 * | the same on `softmax_problem<float, S>` (`softmax_storage_kernel`) | `softmax_attention` with 16-bit K or V | K and V widened to float |
 * | `paged_decode_kernel(b, q, k, v, tables, out, encodings, options)` (attention/paged_kv.hpp) | `softmax_attention_paged` | each sequence's rows copied out, then `softmax_attention` |
 * | `softmax_backward_kernel(b, problem, content, logits, reweight)` | `softmax_attention_backward` | none: compile error |
 * | `acquire_feature_scratch(b, scratch, nq, nk, f)` | softmax and linear, linearizable encodings | two matrices per call |
 * | `encode_features_kernel(b, enc, side, x, pos, out)` | softmax, linearizable encodings | row by row |
 * | `linear_kernel(b, problem, state)` | `linear_attention` | none: compile error |
 * | `linear_backward_kernel(b, problem)` | `linear_attention_backward` | none: compile error |
 * | `linear_features_kernel(b, enc, phi, x, pos, side, out)` | `linear_attention` | row by row |
 * | `linear_fused_kernel(b, enc, phi, problem, state)` | `linear_attention`, tried first | declines (returns false) |
 * | `for_each_head(b, count, f)` | multi-head entry points | in order, calling thread |
 * | `cos_sin_kernel(b, s, theta, count, c, sn)` | `append_kv`, `append_kv_paged` (RoPE's per-token table) | one angle at a time |
 * | `lrpe::encode(b, enc, x, pos, out)`, `lrpe::encode_qk(b, ...)` | users | none: compile error |
 * | `lrpe::encode_backward(b, enc, x, pos, d_out, dx, grad)`, `lrpe::encode_qk_backward(b, ...)` | users (training) | none: compile error |
 *
 * The in-library backends: `backend::reference` (backend/reference/, the oracle, declared here
 * because it is every entry point's default), `backend::simd<Arch>` and `simd_policy<Arch>`
 * (backend/simd/). Adding one: docs/howto-add-backend.md.
 */
#pragma once

#include <lrpe/attention/feature_map.hpp>
#include <lrpe/attention/mask.hpp>
#include <lrpe/attention/options.hpp>
#include <lrpe/attention/state.hpp>
#include <lrpe/core/heads.hpp>
#include <lrpe/core/relative.hpp>
#include <lrpe/core/storage.hpp>
#include <lrpe/core/view.hpp>
#include <lrpe/detail/angle.hpp>
#include <lrpe/detail/small_buffer.hpp>
#include <lrpe/encoder.hpp>

#include <cmath>
#include <limits>
#include <type_traits>

namespace lrpe {
inline namespace v0 {

namespace detail {

template <class T>
auto const_tile_map(const matrix_view<const T>& x, index_t r0, index_t r1) {
  using M = Eigen::Map<const row_matrix<T>, 0, Eigen::OuterStride<>>;
  return M(x.row(r0), r1 - r0, x.cols, Eigen::OuterStride<>(x.row_stride));
}

/// φ then the encoding's features on one side, for every row, into `out` (n×d_f).
template <class T, class Encoding, class Phi>
void linear_features_into(const Encoding& encoding, const Phi& phi, const matrix_view<const T>& x,
                          const positions& pos, canonical::side which, const matrix_view<T>& out) {
  const index_t d = x.cols;
  if constexpr (std::is_same_v<Encoding, no_encoding>) {
    for (index_t i = 0; i < x.rows; ++i) apply_feature_map(phi, x.row(i), out.row(i), d);
  } else {
    small_buffer<T> tmp(d);
    for (index_t i = 0; i < x.rows; ++i) {
      apply_feature_map(phi, x.row(i), tmp.data(), d);
      encoding_features(encoding, which, tmp.data(), pos[i], out.row(i));
    }
  }
}

}  // namespace detail

namespace backend {

/// Plain loops and Eigen products, written for clarity: the oracle of every other backend
/// (its kernels: backend/reference/, included by <lrpe/lrpe.hpp>).
struct reference {
  static constexpr const char* name = "reference";
};

namespace detail {
template <class>
inline constexpr bool always_false = false;
}  // namespace detail

// ------------------------------------------------------------------------------------ calls

/// What `call_guard` returns for backends that share nothing between calls.
struct no_call_guard {};

/**
 * Held by every attention entry point for the length of one call (after validation): a backend
 * whose scratch may be shared by calls from several threads (a `simd_policy` on a pool's
 * workspace) returns a lock. The default holds nothing.
 */
template <class Backend>
no_call_guard call_guard(const Backend&) noexcept {
  return {};
}

/**
 * Runs `f(item, backend)` for item = 0 … count−1, the (batch, head) pairs of a multi-head call.
 * The default runs them in order on the calling thread; a backend with a thread pool overloads
 * it and hands each item a single-threaded backend of its own.
 */
template <class Backend, class F>
void for_each_head(const Backend& b, index_t count, F&& f) {
  for (index_t i = 0; i < count; ++i) f(i, b);
}

// ---------------------------------------------------------------------------------- softmax

/// Everything the softmax kernel needs besides the encoding-specific callbacks; the values are
/// stored as SV (T, or a 16-bit type with T = float: `softmax_storage_kernel`).
template <class T, class SV = T>
struct softmax_problem {
  index_t nq = 0;                 ///< query rows
  index_t nk = 0;                 ///< key rows
  matrix_view<const SV> v;        ///< nk × dv values
  matrix_view<T> out;             ///< nq × dv output
  positions q_positions{};
  positions k_positions{};
  key_mask mask{};                ///< which keys each query sees (causal, window, chunk)
  index_t tile = 64;
  T* lse = nullptr;               ///< when not null, n_q outputs: each row's log(e^sink + Σ_t e^{logit}) (−∞: no visible key, no sink)
  double sink = -std::numeric_limits<double>::infinity();  ///< a sink logit in every row's denominator (−∞: none)
};

/// Values held in the kernel's scalar type (not 16-bit storage): what a backend's kernel takes
/// unless it overloads it for `softmax_storage_kernel`. A concept, so that an overload that also
/// requires it is more constrained than the primary template.
template <class SV, class T>
concept values_in_scalar = std::is_same_v<SV, T>;

/// No value term (everything but Shaw's a^V).
struct no_value_term {};


/// x ↦ c·tanh(x/c), logit soft-capping; c = 0 leaves x as it is.
template <class T>
T soft_cap(T x, T c) noexcept {
  return c == T(0) ? x : c * std::tanh(x / c);
}

/**
 * The content logits of a tile, scale·A[i0:i1]·B[j0:j1]ᵀ (A, B: Q and K, or their encoded
 * features), soft-capped when `softcap` > 0. A named type rather than a lambda so that a backend
 * can recognise it and run its own tile GEMM on `a`, `b`, `scale` (backend/simd/softmax.hpp);
 * called, it fills the tile S.
 */
template <class T, class SK = T>
struct dot_logits {
  matrix_view<const T> a;
  matrix_view<const SK> b;  ///< stored as SK: T, or a 16-bit type (widened here)
  T scale;
  T softcap = 0;  ///< c > 0: each logit x becomes c·tanh(x/c)
  template <class S>
  void operator()(index_t i0, index_t i1, index_t j0, index_t j1, S& s) const {
    s.noalias() =
        lrpe::detail::const_tile_map(a, i0, i1) * lrpe::detail::const_tile_map(b, j0, j1).template cast<T>().transpose();
    s *= scale;
    if (softcap != T(0)) s = s.unaryExpr([c = softcap](T x) { return soft_cap(x, c); });
  }
};

/// `dot_logits` (soft-capped, if so) plus an additive encoding's bias(q_positions[i], k_positions[j]) per entry.
template <class T, class E, class SK = T>
struct biased_logits {
  dot_logits<T, SK> content;
  const E* encoding;
  positions q_positions;
  positions k_positions;
  template <class S>
  void operator()(index_t i0, index_t i1, index_t j0, index_t j1, S& s) const {
    content(i0, i1, j0, j1, s);
    for (index_t i = i0; i < i1; ++i) {
      for (index_t j = j0; j < j1; ++j)
        s(i - i0, j - j0) += lrpe::detail::held_logit<T>(encoding->bias(q_positions[i], k_positions[j]));
    }
  }
};

/**
 * The logits of an encoding with a direct score (Shaw, DeBERTa, a canonical form):
 * scale·score(q_s, s, k_t, t) per entry, plus bias(s, t) for a `score_bias_encoding` (while
 * `with_bias`), in double and rounded once (a score past T's range whose scaled logit is not
 * stays finite). Named so that a backend's backward recognises it (the reference's
 * differentiates `score` through the encoding's `score_backward`).
 */
template <class T, class E>
struct score_logits {
  const E* encoding;
  matrix_view<const T> q;
  matrix_view<const T> k;
  positions q_positions;
  positions k_positions;
  double scale;
  double softcap = 0;  ///< c > 0: each logit x becomes c·tanh(x/c) (in double, then rounded)
  bool with_bias = true;  ///< false: the content alone (the backward's soft-cap derivative)
  template <class S>
  void operator()(index_t i0, index_t i1, index_t j0, index_t j1, S& s) const {
    for (index_t i = i0; i < i1; ++i) {
      for (index_t j = j0; j < j1; ++j) {
        double x = soft_cap(scale * encoding->score(q.row(i), q_positions[i], k.row(j), k_positions[j]), softcap);
        if constexpr (score_bias_encoding<E>) {
          if (with_bias) x += encoding->bias(q_positions[i], k_positions[j]);
        }
        s(i - i0, j - j0) = lrpe::detail::held_logit<T>(x);
      }
    }
  }
};

/**
 * Scratch for the encoded Q and K (n×d_f each) of a linearizable encoding. The default owns two
 * matrices per call; a backend may overload `acquire_feature_scratch` (found by ADL on its tag)
 * to point `q` and `k` at memory it reuses across calls.
 */
template <class T>
struct feature_scratch {
  row_matrix<T> q_store, k_store;
  matrix_view<T> q, k;
};

template <class Backend, class T>
void acquire_feature_scratch(const Backend&, feature_scratch<T>& s, index_t nq, index_t nk, index_t f) {
  s.q_store.resize(nq, f);
  s.k_store.resize(nk, f);
  s.q = view(s.q_store);
  s.k = view(s.k_store);
}

/**
 * The features of a block of rows of a linearizable encoding (Q or K), row i at `pos[i]`. The
 * default encodes row by row; a backend may overload it (found by ADL on its tag) with a
 * vectorised encoder (backend/simd does, for every `lrpe::encoder`).
 */
template <class Backend, class T, class Encoding>
void encode_features_kernel(const Backend&, const Encoding& encoding, canonical::side which,
                            const matrix_view<const T>& x, const positions& pos, const matrix_view<T>& out) {
  for (index_t i = 0; i < x.rows; ++i) lrpe::detail::encoding_features(encoding, which, x.row(i), pos[i], out.row(i));
}

/**
 * Softmax attention of one head: out_s = Σ_t c_st e^{l_st − m_s} (v_t + a^V) / Σ_t e^{l_st − m_s}
 * over the visible keys t (the reference kernel documents the exact contract: NaN, masked and
 * empty rows). `logits(i0, i1, j0, j1, S)` fills a tile of scale·content + bias; `dot_logits`
 * and `biased_logits` are named so that a backend can run its own tile GEMM on them.
 */
template <class Backend, class T, class SV, class Logits, class ValueTerm, class Reweight>
  requires values_in_scalar<SV, T>
void softmax_kernel(const Backend&, const softmax_problem<T, SV>&, const Logits&, const ValueTerm&, const Reweight&) {
  static_assert(detail::always_false<Backend>,
                "lrpe::softmax_attention: no softmax_kernel for this backend (the Backend of this "
                "instantiation). The reference kernels are in <lrpe/backend/reference.hpp>, which "
                "<lrpe/lrpe.hpp> includes; a new backend overloads softmax_kernel "
                "(docs/howto-add-backend.md)");
}

/**
 * A backend that reads 16-bit K or V (`lrpe::half`, `lrpe::bfloat16`) itself: it overloads
 * `softmax_kernel` for `softmax_problem<T, SV>` (values stored as SV) with `Logits` of keys
 * stored as SK (`dot_logits<T, SK>`, `biased_logits<T, E, SK>`). Without such an overload the
 * front end widens K and V to T and calls the backend's T kernel (the reference does this).
 */
template <class Backend, class T, class SV, class Logits, class Reweight>
concept softmax_storage_kernel =
    requires(const Backend& b, const softmax_problem<T, SV>& p, const Logits& l, const Reweight& r) {
      softmax_kernel(b, p, l, no_value_term{}, r);
    };

/**
 * The backward of softmax attention of one head whose logits are scale·A·Bᵀ (+ a bias without
 * parameters here): A and B are Q and K, or their encoded features.
 */
template <class T>
struct softmax_backward_problem {
  softmax_problem<T> forward;     ///< the forward's problem; `forward.out` is the forward's output O (read)
  matrix_view<const T> d_out;     ///< n_q × d_v, dL/dO
  const T* lse = nullptr;         ///< n_q log-sum-exps from the forward, or null: recomputed
  matrix_view<T> da;              ///< n_q × f, dL/dA (written)
  matrix_view<T> db;              ///< n_k × f, dL/dB (written)
  matrix_view<T> dv;              ///< n_k × d_v, dL/dV (written)
  double* bias_grad = nullptr;    ///< a learnable additive encoding's parameter gradient (added to), or null
  double* reweight_grad = nullptr;  ///< a post-softmax reweighting's parameter gradient (added to), or null
};

/// True for a post-softmax reweighting whose weights have a gradient (`accumulate_weight_gradient`).
template <class R>
inline constexpr bool learnable_reweight_v =
    requires(const R& r, position_t s, double* g) { r.accumulate_weight_gradient(s, s, 0.0, g); };

/// True for the logits of an additive encoding whose bias has a gradient (`accumulate_bias_gradient`).
template <class L>
inline constexpr bool learnable_bias_v = false;
template <class T, class E>
inline constexpr bool learnable_bias_v<biased_logits<T, E>> =
    requires(const E& e, position_t s, double* g) { e.accumulate_bias_gradient(s, s, 0.0, g); };

/**
 * Softmax attention backward of one head (FlashAttention-2's: D_s = dO_s·O_s, the probabilities
 * recomputed tile by tile from the log-sum-exps, dS = P ∘ (dP − D)): `content` is the logits'
 * scale·A·Bᵀ, `logits` fills a tile of the whole logits (content + bias) as in the forward.
 */
template <class Backend, class T, class Logits, class Reweight>
void softmax_backward_kernel(const Backend&, const softmax_backward_problem<T>&, const dot_logits<T>&, const Logits&,
                             const Reweight&) {
  static_assert(detail::always_false<Backend>,
                "lrpe::softmax_attention_backward: no softmax_backward_kernel for this backend (the Backend "
                "of this instantiation). The reference kernels are in <lrpe/backend/reference.hpp>, which "
                "<lrpe/lrpe.hpp> includes; a new backend overloads softmax_backward_kernel "
                "(docs/training.md, docs/howto-add-backend.md)");
}

// ----------------------------------------------------------------------------------- linear

/// Linear attention on encoded features (or on raw q, k for `linear_fused_kernel`).
template <class T>
struct linear_problem {
  matrix_view<const T> qf;  ///< n_q × d_f query features
  matrix_view<const T> kf;  ///< n_k × d_f key features
  matrix_view<const T> v;   ///< n_k × d_v
  matrix_view<T> out;       ///< n_q × d_v
  positions q_positions{};
  positions k_positions{};
  bool causal = false;
  normalisation norm = normalisation::none;
  double eps = 1e-6;
  index_t chunk = 64;
};

/// Linear attention on encoded features; `state` is never null when `p.causal`.
template <class Backend, class T>
void linear_kernel(const Backend&, const linear_problem<T>&, linear_attention_state<T>*) {
  static_assert(detail::always_false<Backend>,
                "lrpe::linear_attention: no linear_kernel for this backend (the Backend of this "
                "instantiation). The reference kernels are in <lrpe/backend/reference.hpp>, which "
                "<lrpe/lrpe.hpp> includes; a new backend overloads linear_kernel "
                "(docs/howto-add-backend.md)");
}

/**
 * The backward of linear attention on encoded features. `forward.out` is unused (the outputs
 * are recomputed); for a causal call, `initial` is the state as it was before the call (null or
 * empty: none), `d_final` the gradient of the state the call left (null: none), and `d_initial`
 * receives the gradient of `initial` (null: not wanted).
 */
template <class T>
struct linear_backward_problem {
  linear_problem<T> forward;
  matrix_view<const T> d_out;                       ///< n_q × d_v, dL/dO
  double decay = 1.0;                               ///< λ
  const linear_attention_state<T>* initial = nullptr;
  const linear_state_gradient<T>* d_final = nullptr;
  linear_state_gradient<T>* d_initial = nullptr;
  matrix_view<T> dqf;                               ///< n_q × d_f (written)
  matrix_view<T> dkf;                               ///< n_k × d_f (written)
  matrix_view<T> dv;                                ///< n_k × d_v (written)
  double* d_decay = nullptr;                        ///< dL/dλ (added to), or null: not wanted
};

/// Linear attention backward on encoded features (docs/training.md).
template <class Backend, class T>
void linear_backward_kernel(const Backend&, const linear_backward_problem<T>&) {
  static_assert(detail::always_false<Backend>,
                "lrpe::linear_attention_backward: no linear_backward_kernel for this backend (the Backend of "
                "this instantiation). The reference kernels are in <lrpe/backend/reference.hpp>, which "
                "<lrpe/lrpe.hpp> includes; a new backend overloads linear_backward_kernel "
                "(docs/training.md, docs/howto-add-backend.md)");
}

/**
 * Features of one side of linear attention (φ, then the encoding) into `out`. The default is
 * the scalar loop `detail::linear_features_into`; a backend may overload it (found by ADL on
 * its tag) with vectorised feature maps.
 */
template <class Backend, class T, class Encoding, class Phi>
void linear_features_kernel(const Backend&, const Encoding& encoding, const Phi& phi, const matrix_view<const T>& x,
                            const positions& pos, canonical::side which, const matrix_view<T>& out) {
  lrpe::detail::linear_features_into<T>(encoding, phi, x, pos, which, out);
}

/**
 * Linear attention that computes the features itself, inside the kernel (e.g. chunk by chunk,
 * so that Q̃ and K̃ never go through memory): `p` holds the raw q and k in `qf` and `kf`, and
 * `state` is never null when `p.causal`. Returns false, having done nothing, for what it does
 * not cover; the caller then computes the features (`linear_features_kernel`) and calls
 * `linear_kernel`. The default covers nothing; a backend may overload it (found by ADL).
 */
template <class Backend, class T, class Encoding, class Phi>
bool linear_fused_kernel(const Backend&, const Encoding&, const Phi&, const linear_problem<T>&,
                         linear_attention_state<T>*) {
  return false;
}

/**
 * c[k] = cos(s·θ_k), sn[k] = sin(s·θ_k), k < count, in double, of the exact angles
 * (`detail::angle_cos_sin`, docs/math.md §Angles): RoPE's table for one token of a KV-cache
 * append. The default evaluates the angles one at a time; a backend may overload it
 * (backend/simd: vectorised over k, within a few double ulps of the default).
 */
template <class Backend>
void cos_sin_kernel(const Backend&, position_t s, const double* theta, index_t count, double* c, double* sn) noexcept {
  for (index_t k = 0; k < count; ++k) {
    const auto [ck, sk] = lrpe::detail::angle_cos_sin(s, theta[k]);
    c[k] = ck;
    sn[k] = sk;
  }
}

}  // namespace backend

// ----------------------------------------------------------------------------------- encode

/// `enc.encode(x, pos, out)` on a backend: no overload for this (backend, encoder) pair.
template <class Backend, class E>
void encode(const Backend&, const E&, matrix_view<const typename E::scalar>, positions,
            matrix_view<typename E::scalar>) {
  static_assert(backend::detail::always_false<Backend>,
                "lrpe::encode: no encode for this (backend, encoder) pair: the reference and SIMD "
                "backends take any lrpe::encoder (lrpe_encoder); include <lrpe/lrpe.hpp> (reference) "
                "or <lrpe/simd.hpp>, or overload encode for the backend (docs/howto-add-backend.md)");
}

/// Q and K of every (batch, head) on a backend: no overload for this (backend, encoder) pair.
template <class Backend, class E>
void encode_qk(const Backend&, const E&, heads_view<const typename E::scalar>, positions,
               heads_view<const typename E::scalar>, positions, heads_view<typename E::scalar>,
               heads_view<typename E::scalar>) {
  static_assert(backend::detail::always_false<Backend>,
                "lrpe::encode_qk: no encode_qk for this (backend, encoder) pair: the reference and "
                "SIMD backends take any lrpe::encoder (lrpe_encoder); include <lrpe/lrpe.hpp> "
                "(reference) or <lrpe/simd.hpp>, or overload encode_qk for the backend "
                "(docs/howto-add-backend.md)");
}

/// The backward of `encode` on a backend: no overload for this (backend, encoder) pair.
template <class Backend, class E>
void encode_backward(const Backend&, const E&, matrix_view<const typename E::scalar>, positions,
                     matrix_view<const typename E::scalar>, matrix_view<typename E::scalar>, encoder_gradient*) {
  static_assert(backend::detail::always_false<Backend>,
                "lrpe::encode_backward: no encode_backward for this (backend, encoder) pair: the reference "
                "backend takes any lrpe::encoder (include <lrpe/lrpe.hpp>); a backend overloads "
                "encode_backward (docs/training.md, docs/howto-add-backend.md)");
}

/// The backward of `encode_qk` on a backend: no overload for this (backend, encoder) pair.
template <class Backend, class E>
void encode_qk_backward(const Backend&, const E&, heads_view<const typename E::scalar>, positions,
                        heads_view<const typename E::scalar>, positions, heads_view<const typename E::scalar>,
                        heads_view<const typename E::scalar>, heads_view<typename E::scalar>,
                        heads_view<typename E::scalar>, encoder_gradient*) {
  static_assert(backend::detail::always_false<Backend>,
                "lrpe::encode_qk_backward: no encode_qk_backward for this (backend, encoder) pair: the "
                "reference backend takes any lrpe::encoder (include <lrpe/lrpe.hpp>); a backend overloads "
                "encode_qk_backward (docs/training.md, docs/howto-add-backend.md)");
}

}  // namespace v0
}  // namespace lrpe
