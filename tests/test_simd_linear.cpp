// SPDX-License-Identifier: MIT
// SIMD linear attention (backend::simd, simd_policy) == the reference backend; tolerances:
// simd_attention_helpers.hpp.
#include "simd_attention_helpers.hpp"

namespace {

struct linear_case_options {
  bool causal = false;
  lrpe::normalisation norm = lrpe::normalisation::none;
  index_t chunk = 64;
  double decay = 1.0;
};

/// Runs reference and SIMD linear attention on one shape; returns the difference.
template <class T, class Enc, class Phi>
double linear_case(const shape& s, const Enc& enc, const Phi& phi, const linear_case_options& lo, std::uint64_t seed) {
  lrpe::generator g(seed);
  const index_t d = s.d;
  const rm<T> q = random_matrix<T>(g, s.nq, d, 0.5), k = random_matrix<T>(g, s.nk, d, 0.5),
              v = random_matrix<T>(g, s.nk, s.dv);
  const auto qp = sorted_positions(g, s.nq, s.q_offset), kp = sorted_positions(g, s.nk, s.k_offset);
  lrpe::linear_options opt;
  opt.causal = lo.causal;
  opt.norm = lo.norm;
  opt.chunk = lo.chunk;
  opt.decay = lo.decay;
  set_positions(opt, s, qp, kp);
  rm<T> ref(s.nq, s.dv), out(s.nq, s.dv);
  out.setConstant(T(123));
  lrpe::linear_attention(q, k, v, ref, enc, phi, opt);
  lrpe::linear_attention(q, k, v, out, enc, phi, opt, lrpe::backend::simd<>{});
  return diff(out, ref);
}

#define LINEAR_INFO(lo) INFO("causal=" << lo.causal << " norm=" << int(lo.norm) << " chunk=" << lo.chunk << " decay=" << lo.decay)

/// Rows [a, b) as one segment: through the SIMD backend (`backend`, state st) and the reference
/// (state ref_st), checking the two outputs agree; returns the SIMD output.
template <class T, class Enc, class Phi, class Backend>
rm<T> run_segment(const rm<T>& q, const rm<T>& k, const rm<T>& v, index_t a, index_t b, const Enc& enc, const Phi& phi,
                  lrpe::linear_attention_state<T>& st, lrpe::linear_attention_state<T>& ref_st,
                  const lrpe::linear_options& seg, const Backend& backend) {
  const index_t dv = v.cols();
  rm<T> o(b - a, dv), o_ref(b - a, dv);
  lrpe::linear_attention(q.middleRows(a, b - a), k.middleRows(a, b - a), v.middleRows(a, b - a), o, enc, phi, st, seg,
                         backend);
  lrpe::linear_attention(q.middleRows(a, b - a), k.middleRows(a, b - a), v.middleRows(a, b - a), o_ref, enc, phi,
                         ref_st, seg);
  CHECK(diff(o, o_ref) <= kernel_vs_kernel<T>());
  return o;
}

/// The SIMD-built state equals the reference state: count, last position, S and z.
template <class T>
void check_same_state(const lrpe::linear_attention_state<T>& st, const lrpe::linear_attention_state<T>& ref_st) {
  CHECK(st.count() == ref_st.count());
  CHECK(st.last_position() == ref_st.last_position());
  CHECK(diff(rm<T>(st.kv()), rm<T>(ref_st.kv())) <= kernel_vs_kernel<T>());
  CHECK(diff(rm<T>(st.k_sum().transpose()), rm<T>(ref_st.k_sum().transpose())) <= kernel_vs_kernel<T>());
}

}  // namespace

TEST_CASE_TEMPLATE("simd linear attention, no encoding: == reference (causal or not, norms, chunks, decay, offsets)", T,
                   float, double) {
  const std::uint64_t seed = 0x51D0'0010;
  MESSAGE("seed = " << seed);
  lrpe::generator g(seed);
  // any chunk >= 1 is valid: 2^40 and 2^63 - 1 sized the SIMD scratch (bad_alloc, overflowed sizes)
  const index_t chunks[] = {1, 7, 16, 64, 100, index_t{1} << 40, std::numeric_limits<index_t>::max()};
  const double decays[] = {1.0, 0.97, 0.5};
  int n = 0;
  for (const shape& s : shapes(seed, 40)) {
    SHAPE_INFO(s);
    linear_case_options lo;
    lo.causal = s.causal;
    lo.norm = g.below(2) == 0 ? lrpe::normalisation::none : lrpe::normalisation::denominator;
    lo.chunk = chunks[g.below(std::size(chunks))];
    lo.decay = s.causal ? decays[g.below(std::size(decays))] : 1.0;
    LINEAR_INFO(lo);
    CHECK(linear_case<T>(s, lrpe::no_encoding{}, lrpe::feature_maps::elu_plus_one{}, lo, seed + static_cast<std::uint64_t>(++n)) <=
          kernel_vs_kernel<T>());
    lo.causal = !lo.causal;  // the other mode on the same shape (no decay without causal)
    if (!lo.causal) lo.decay = 1.0;
    LINEAR_INFO(lo);
    CHECK(linear_case<T>(s, lrpe::no_encoding{}, lrpe::feature_maps::relu{}, lo, seed + static_cast<std::uint64_t>(++n)) <=
          kernel_vs_kernel<T>());
  }
}

TEST_CASE_TEMPLATE("simd linear attention with a large output (non-temporal stores) == reference", T, float, double) {
  // One head whose output reaches linear_stream_bytes takes non-temporal stores in both the
  // non-causal pass and the causal one-vector chunks; 17 rows past a multiple of the vector
  // width leave a tail for the general path after the streamed chunks.
  const std::uint64_t seed = 0x51D0'0020;
  MESSAGE("seed = " << seed);
  const index_t d = 64, dv = 64;
  const auto rows = static_cast<index_t>(lrpe::backend::simd_detail::linear_stream_bytes / (dv * sizeof(T))) + 17;
  int n = 0;
  for (bool causal : {false, true}) {
    for (double decay : {1.0, 0.999}) {
      if (!causal && decay != 1.0) continue;
      const shape s{rows, rows, d, dv, causal, 0, 0, false};
      SHAPE_INFO(s);
      const linear_case_options lo{causal, lrpe::normalisation::denominator, 64, decay};
      LINEAR_INFO(lo);
      // the output (an Eigen matrix) is vector-aligned: the case reaches the streamed stores
      REQUIRE(reinterpret_cast<std::uintptr_t>(rm<T>(rows, dv).data()) % sizeof(xsimd::batch<T>) == 0);
      CHECK(linear_case<T>(s, lrpe::no_encoding{}, lrpe::feature_maps::elu_plus_one{}, lo,
                           seed + static_cast<std::uint64_t>(++n)) <= kernel_vs_kernel<T>());
    }
  }
}

TEST_CASE_TEMPLATE("linear attention, reference and SIMD: a NaN in q or k makes exactly the rows it reaches NaN", T,
                   float, double) {
  // n = 100 (one-vector chunks of 16 with a remainder; key 40 sits inside the chunk of rows
  // 32–47, where the intra-chunk product must not carry it back to rows 32–39), every
  // vectorised φ (relu too: φ(NaN) = NaN), both normalisations, with and without RoPE (the
  // features computed inside the kernel) and a decay.
  const index_t n = 100, d = 32, dv = 24, poisoned_q = 5, poisoned_k = 40;
  lrpe::generator g(0x5AA6);
  const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, dv);
  const lrpe::rope_neox<T> rope(d);
  const auto row_nan = [](const rm<T>& o, index_t i) {
    for (index_t c = 0; c < o.cols(); ++c)
      if (!std::isnan(o(i, c))) return false;
    return true;
  };
  const auto check = [&](const auto& enc, const auto& phi, const char* name) {
    for (const auto norm : {lrpe::normalisation::none, lrpe::normalisation::denominator}) {
      for (const bool causal : {false, true}) {
        for (const bool simd : {false, true}) {
          INFO(std::string(name) << ", norm " << static_cast<int>(norm) << ", causal " << causal << ", simd " << simd);
          lrpe::linear_options opt{.causal = causal, .norm = norm};
          if (causal) opt.decay = 0.97;
          const auto run = [&](const rm<T>& qq, const rm<T>& kk) {
            rm<T> out(n, dv);
            out.setConstant(T(123));
            if (simd) lrpe::linear_attention(qq, kk, v, out, enc, phi, opt, lrpe::backend::simd<>{});
            else lrpe::linear_attention(qq, kk, v, out, enc, phi, opt);
            return out;
          };
          const rm<T> clean = run(q, k);
          rm<T> qq = q, kk = k;
          qq(poisoned_q, 7) = std::numeric_limits<T>::quiet_NaN();
          kk(poisoned_k, 3) = std::numeric_limits<T>::quiet_NaN();
          const rm<T> out_q = run(qq, k), out_k = run(q, kk);
          for (index_t i = 0; i < n; ++i) {
            INFO("row " << i);
            if (i == poisoned_q) CHECK(row_nan(out_q, i));
            else CHECK((out_q.row(i).array() == clean.row(i).array()).all());
            if (!causal || i >= poisoned_k) CHECK(row_nan(out_k, i));
            else CHECK((out_k.row(i).array() == clean.row(i).array()).all());
          }
        }
      }
    }
  };
  for (const bool with_rope : {false, true}) {
    const auto each_phi = [&](const auto& enc) {
      check(enc, lrpe::feature_maps::identity{}, "identity");
      check(enc, lrpe::feature_maps::elu_plus_one{}, "elu+1");
      check(enc, lrpe::feature_maps::relu{}, "relu");
      check(enc, lrpe::feature_maps::relu_eps{}, "relu+eps");
    };
    if (with_rope) each_phi(rope);
    else each_phi(lrpe::no_encoding{});
  }
}

TEST_CASE_TEMPLATE("linear attention, reference and SIMD: a NaN or Inf in v reaches exactly the rows that see its key",
                   T, float, double) {
  // d = d_v = 32 reaches the one-vector chunks for float on AVX-512 as well (f and d_v
  // multiples of W), d_v = 24 the general path there. A poisoned value row must be skipped,
  // not multiplied by A's zeros (0·NaN = 0·Inf = NaN), by the rows before it that share its
  // block: row 40 sits in the general path's 6-row group 36–41 (and the reference's chunk
  // 0–63), row 42 in the one-vector chunks' 4-row block 40–43. Causal, with and without a
  // decay, both normalisations.
  const index_t n = 100, d = 32;
  const lrpe::feature_maps::elu_plus_one phi;
  for (const index_t dv : {index_t{24}, index_t{32}}) {
    lrpe::generator g(0x5AA7 + static_cast<std::uint64_t>(dv));
    const rm<T> q = random_matrix<T>(g, n, d), k = random_matrix<T>(g, n, d), v = random_matrix<T>(g, n, dv);
    for (const index_t poisoned : {index_t{40}, index_t{42}}) {
      for (const T bad : {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity()}) {
        rm<T> vv = v;
        vv(poisoned, 5) = bad;
        for (const auto norm : {lrpe::normalisation::none, lrpe::normalisation::denominator}) {
          for (const double decay : {1.0, 0.97}) {
            for (const bool simd : {false, true}) {
              INFO("dv " << dv << ", row " << poisoned << ", " << bad << ", norm " << static_cast<int>(norm)
                         << ", decay " << decay << ", simd " << simd);
              const lrpe::linear_options opt{.causal = true, .norm = norm, .decay = decay};
              const auto run = [&](const rm<T>& values) {
                rm<T> out(n, dv);
                out.setConstant(T(123));
                if (simd) {
                  lrpe::linear_attention(q, k, values, out, lrpe::no_encoding{}, phi, opt, lrpe::backend::simd<>{});
                } else {
                  lrpe::linear_attention(q, k, values, out, lrpe::no_encoding{}, phi, opt);
                }
                return out;
              };
              const rm<T> clean = run(v), out = run(vv);
              for (index_t i = 0; i < n; ++i) {
                INFO("row " << i);
                // the poisoned column from the poisoned row on: NaN, or ±Inf from an Inf; every
                // other value as in the clean call, bit for bit
                for (index_t c = 0; c < dv; ++c) {
                  if (i >= poisoned && c == 5) CHECK(!std::isfinite(out(i, c)));
                  else CHECK(out(i, c) == clean(i, c));
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("simd linear attention, every LRPE preset and feature map: == reference", T, float, double) {
  const std::uint64_t seed = 0x51D0'0011;
  MESSAGE("seed = " << seed);
  const index_t d = 16;
  auto check = [&](const auto& enc, const char* name) {
    INFO("preset " << name);
    int n = 0;
    // Offsets and sorted position arrays (n = 150 > the 64-row encode block: slices of both).
    for (const auto& ca : {std::pair{false, false}, std::pair{true, false}, std::pair{true, true}}) {
      const bool causal = ca.first, arrays = ca.second;  // (CAPTURE is a lambda: clang < 16 captures no binding)
      const shape s{150, 150, d, 24, true, 5, 5, arrays};
      CAPTURE(arrays);
      linear_case_options lo{causal, lrpe::normalisation::denominator, 64, causal ? 0.9 : 1.0};
      LINEAR_INFO(lo);
      CHECK(linear_case<T>(s, enc, lrpe::feature_maps::elu_plus_one{}, lo, seed + static_cast<std::uint64_t>(++n)) <=
            kernel_vs_kernel<T>());
      lo.norm = lrpe::normalisation::none;
      CHECK(linear_case<T>(s, enc, lrpe::feature_maps::identity{}, lo, seed + static_cast<std::uint64_t>(++n)) <=
            kernel_vs_kernel<T>());
      CHECK(linear_case<T>(s, enc, lrpe::feature_maps::relu_eps{}, lo, seed + static_cast<std::uint64_t>(++n)) <=
            kernel_vs_kernel<T>());
      CHECK(linear_case<T>(s, enc, [](T x) { return x * x; }, lo, seed + static_cast<std::uint64_t>(++n)) <=
            kernel_vs_kernel<T>());
    }
  };
  for_each_preset<T>(d, check);
}

TEST_CASE_TEMPLATE("simd causal linear attention in segments with a state == one call; state == reference state", T,
                   float, double) {
  lrpe::generator g(51);
  const index_t n = 230, d = 16, dv = 12;
  const rm<T> q = random_matrix<T>(g, n, d, 0.5), k = random_matrix<T>(g, n, d, 0.5), v = random_matrix<T>(g, n, dv);
  const lrpe::type1<T> enc(d);
  const lrpe::feature_maps::elu_plus_one phi;
  for (double decay : {1.0, 0.95}) {
    INFO("decay = " << decay);
    rm<T> whole(n, dv), parts(n, dv);
    lrpe::linear_options opt{.causal = true, .norm = lrpe::normalisation::denominator, .chunk = 32, .decay = decay};
    lrpe::linear_attention(q, k, v, whole, enc, phi, opt, lrpe::backend::simd<>{});
    lrpe::linear_attention_state<T> st(enc.feature_dim(), dv, decay), ref_st(enc.feature_dim(), dv, decay);
    const index_t cuts[] = {0, 1, 50, 51, 130, n};
    for (std::size_t c = 0; c + 1 < std::size(cuts); ++c) {
      const index_t a = cuts[c], b = cuts[c + 1];
      lrpe::linear_options seg = opt;
      seg.q_positions = a;
      seg.k_positions = a;
      parts.middleRows(a, b - a) = run_segment(q, k, v, a, b, enc, phi, st, ref_st, seg, lrpe::backend::simd<>{});
    }
    CHECK(diff(parts, whole) <= kernel_vs_kernel<T>());
    check_same_state(st, ref_st);
    // streaming: the next token through the SIMD-built state == through the reference state
    std::vector<T> a_out(static_cast<std::size_t>(dv)), b_out(a_out.size());
    st.query(enc, phi, q.row(n - 1).data(), n, a_out.data(), lrpe::normalisation::denominator);
    ref_st.query(enc, phi, q.row(n - 1).data(), n, b_out.data(), lrpe::normalisation::denominator);
    for (index_t j = 0; j < dv; ++j) CHECK(std::abs(a_out[static_cast<std::size_t>(j)] - b_out[static_cast<std::size_t>(j)]) <= 10 * kernel_vs_kernel<T>());
  }
}

TEST_CASE_TEMPLATE("simd causal linear self-attention by one-vector chunks (keys at the queries' positions) == reference",
                   T, float, double) {
  // Keys at the queries' positions with d and d_v multiples of 16 take the SIMD kernel's
  // one-vector chunks; the last n mod W rows take the general path.
  const std::uint64_t seed = 0x51D0'0013;
  MESSAGE("seed = " << seed);
  int n = 0;
  const std::pair<index_t, index_t> dims[] = {{16, 16}, {64, 64}, {32, 48}};
  for (index_t rows : {1, 15, 16, 17, 100, 257}) {
    for (auto [d, dv] : dims) {
      for (position_t offset : {0, 37}) {
        const shape s{rows, rows, d, dv, true, offset, offset, false};
        SHAPE_INFO(s);
        for (auto norm : {lrpe::normalisation::none, lrpe::normalisation::denominator}) {
          for (double decay : {1.0, 0.97, 0.5}) {
            const linear_case_options lo{true, norm, 64, decay};
            LINEAR_INFO(lo);
            CHECK(linear_case<T>(s, lrpe::no_encoding{}, lrpe::feature_maps::elu_plus_one{}, lo,
                                 seed + static_cast<std::uint64_t>(++n)) <= kernel_vs_kernel<T>());
          }
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("simd causal linear attention, a decode loop of one-row segments == one reference call", T, float,
                   double) {
  // One token per call, positions with gaps (array positions in the one-call reference): each
  // call takes the state recurrence (`step_rows`), including d_v not a multiple of the vector
  // width (padded columns) and a first token on an empty state. The features of the one row
  // take the SIMD encoder with direct tables (RoPE, LRPE cosine: P = I) or the scalar encoder
  // (Type 1's Householder P).
  lrpe::generator g(57);
  const index_t n = 40;
  const lrpe::feature_maps::elu_plus_one phi;
  const std::pair<index_t, index_t> dims[] = {{64, 64}, {20, 12}};
  std::vector<position_t> pos(static_cast<std::size_t>(n));
  position_t p = 3;
  for (index_t i = 0; i < n; ++i) pos[static_cast<std::size_t>(i)] = (p += 1 + (i % 7 == 3 ? 25 : 0));
  const auto run = [&](const auto& enc, index_t d, index_t dv) {
    const rm<T> q = random_matrix<T>(g, n, d, 0.5), k = random_matrix<T>(g, n, d, 0.5), v = random_matrix<T>(g, n, dv);
    for (double decay : {1.0, 0.9}) {
      for (auto norm : {lrpe::normalisation::none, lrpe::normalisation::denominator}) {
        INFO("d = " << d << " dv = " << dv << " decay = " << decay << " norm = " << int(norm));
        lrpe::linear_options all{.causal = true, .norm = norm, .decay = decay,
                                 .q_positions = std::span<const position_t>(pos),
                                 .k_positions = std::span<const position_t>(pos)};
        rm<T> ref(n, dv), steps(n, dv);
        lrpe::linear_attention_state<T> ref_st(enc.feature_dim(), dv, decay), st(enc.feature_dim(), dv, decay);
        lrpe::linear_attention(q, k, v, ref, enc, phi, ref_st, all);
        for (index_t i = 0; i < n; ++i) {
          const position_t t = pos[static_cast<std::size_t>(i)];
          rm<T> o(1, dv);
          lrpe::linear_attention(q.middleRows(i, 1), k.middleRows(i, 1), v.middleRows(i, 1), o, enc, phi, st,
                                 lrpe::linear_options{.causal = true, .norm = norm, .decay = decay, .q_positions = t,
                                                      .k_positions = t},
                                 lrpe::backend::simd<>{});
          steps.row(i) = o;
        }
        CHECK(diff(steps, ref) <= kernel_vs_kernel<T>());
        CHECK(st.count() == n);
        CHECK(st.last_position() == pos.back());
        check_same_state(st, ref_st);
      }
    }
  };
  for (auto [d, dv] : dims) {
    run(lrpe::rope_neox<T>(d), d, dv);
    run(lrpe::encoder{lrpe::p::identity<T>(d), lrpe::lambda::complex_phase<T>(d)}, d, dv);
    run(lrpe::type1<T>(d), d, dv);
  }
}

TEST_CASE("simd causal linear attention in float with λ close to 1: decode steps and one call stay at the rounding floor") {
  // See the streaming test of the same name: the decay factor's rounding is carried from one
  // rescale to the next (state.decay_carry()), in the decode recurrence (`step_rows`, on the
  // state's storage when d_v is a multiple of the vector width, else on a copy) and in the
  // chunked paths. Without the carry, decode steps drifted to 8e-5 here.
  constexpr double decay = 0.9999, bound = 1.5e-5;
  for (const index_t d : {8, 4}) {
    CAPTURE(d);
    const auto c = attention_test::make_decay_drift_case(12000, d, d, decay, 0x51D0'0001);
    const index_t n = c.q.rows();
    const lrpe::feature_maps::identity phi;
    rm<float> steps(n, d), whole(n, d);
    lrpe::linear_attention_state<float> st(d, d, decay), ref_st(d, d, decay);
    for (index_t t = 0; t < n; ++t) {
      lrpe::linear_attention(c.q.middleRows(t, 1), c.k.middleRows(t, 1), c.v.middleRows(t, 1), steps.middleRows(t, 1),
                             lrpe::no_encoding{}, phi, st,
                             lrpe::linear_options{.causal = true, .decay = decay, .q_positions = t, .k_positions = t},
                             lrpe::backend::simd<>{});
      ref_st.append_features(c.k.row(t).data(), c.v.row(t).data(), t);
    }
    CHECK(attention_test::rel_error(steps, c.exact) <= bound);
    CHECK(st.decay_carry() == ref_st.decay_carry());  // the same factors, token by token
    lrpe::linear_attention(c.q, c.k, c.v, whole, lrpe::no_encoding{}, phi,
                           lrpe::linear_options{.causal = true, .decay = decay}, lrpe::backend::simd<>{});
    CHECK(attention_test::rel_error(whole, c.exact) <= bound);
  }
}

TEST_CASE_TEMPLATE("simd multi-head segments, one state per (b, h): prefill then decode steps == one reference call", T,
                   float, double) {
  // The decode steps' features on the SIMD backend: RoPE and LRPE cosine take direct tables
  // (their angles evaluated once per step for every head, q and k), Type 1 the scalar encoder;
  // the prefill (70 tokens) crosses a chunk. Single thread and a 2-thread pool.
  lrpe::backend::simd_threads pool(2);
  const lrpe::backend::simd_policy<> threads{&pool};
  const auto check = [&](const auto& enc, const char* what) {
    INFO(what);
    CHECK(attention_test::multihead_state_error<T>(enc, lrpe::backend::simd<>{}, 2, 4, 32, 70, 12, 0x51'0001) <=
          kernel_vs_kernel<T>());
    CHECK(attention_test::multihead_state_error<T>(enc, threads, 2, 4, 32, 70, 12, 0x51'0002) <= kernel_vs_kernel<T>());
  };
  check(lrpe::rope_neox<T>(32), "rope_neox");
  check(lrpe::encoder{lrpe::p::identity<T>(32), lrpe::lambda::complex_phase<T>(32)}, "LRPE cosine");
  check(lrpe::type1<T>(32), "type1");
  // Per-head encodings (RoPE of base 10⁴·(h+1)): one position, other θ per head, so the
  // remembered angles of one head must never serve another.
  check([](index_t h) { return lrpe::rope_neox<T>(32, 1e4 * static_cast<double>(h + 1)); }, "per-head RoPE bases");
  // The one-row features of RoPE and LRPE cosine do take the SIMD encoder (direct tables).
  using cosine = lrpe::encoder<lrpe::p::identity<T>, lrpe::lambda::complex_phase<T>>;
  static_assert(lrpe::backend::simd_detail::few_rows_simd_v<lrpe::rope_neox<T>> &&
                lrpe::backend::simd_detail::few_rows_simd_v<cosine> &&
                !lrpe::backend::simd_detail::few_rows_simd_v<lrpe::type1<T>>);
  static_assert(lrpe::simd_encoder<lrpe::rope_neox<T>>::path == lrpe::simd_path::vectorised &&
                lrpe::simd_encoder<cosine>::path == lrpe::simd_path::vectorised);
}

TEST_CASE_TEMPLATE("simd causal linear self-attention by one-vector chunks, in segments with gaps == reference", T,
                   float, double) {
  // Each segment continues a state whose last position lies 1, 40 or 1000 positions back:
  // the first chunk's weights λ^{s−last} come from outside the kernel's table of λ^{<2W}.
  lrpe::generator g(53);
  const index_t n = 300, d = 32, dv = 32;
  const rm<T> q = random_matrix<T>(g, n, d, 0.5), k = random_matrix<T>(g, n, d, 0.5), v = random_matrix<T>(g, n, dv);
  const lrpe::feature_maps::elu_plus_one phi;
  for (double decay : {1.0, 0.99}) {
    for (auto norm : {lrpe::normalisation::none, lrpe::normalisation::denominator}) {
      INFO("decay = " << decay << " norm = " << int(norm));
      lrpe::linear_attention_state<T> st(d, dv, decay), ref_st(d, dv, decay);
      const index_t cuts[] = {0, 40, 41, 120, 200, n};
      const position_t gaps[] = {0, 1, 40, 1000, 7};
      position_t start = 0;
      for (std::size_t c = 0; c + 1 < std::size(cuts); ++c) {
        const index_t a = cuts[c], b = cuts[c + 1];
        start += gaps[c] + (c > 0 ? cuts[c] - cuts[c - 1] - 1 : 0);
        lrpe::linear_options seg{.causal = true, .norm = norm, .decay = decay, .q_positions = start, .k_positions = start};
        CAPTURE(start);
        run_segment(q, k, v, a, b, lrpe::no_encoding{}, phi, st, ref_st, seg, lrpe::backend::simd<>{});
        check_same_state(st, ref_st);
      }
    }
  }
}

TEST_CASE_TEMPLATE("simd causal linear self-attention with the features computed in the kernel == reference", T,
                   float, double) {
  // Keys at the queries' positions, d_f and d_v multiples of 16, φ then an lrpe encoder (or a
  // vectorised φ alone): the SIMD backend computes Q̃ and K̃ block by block (64 rows) inside the
  // kernel. n crosses the block and chunk boundaries (16, 17, 65, 150); n = 15 has no whole
  // chunk and takes the stored-features path. Type 8 is complex: d_f = 2d = 32.
  const std::uint64_t seed = 0x51D0'0014;
  MESSAGE("seed = " << seed);
  const index_t d = 16, dv = 32;
  auto check = [&](const auto& enc, const char* name) {
    INFO("encoding " << std::string(name));
    int n = 0;
    for (index_t rows : {15, 16, 17, 65, 150}) {
      const shape s{rows, rows, d, dv, true, rows % 2 == 0 ? 0 : 5, rows % 2 == 0 ? 0 : 5, false};
      SHAPE_INFO(s);
      for (auto [norm, decay] : {std::pair{lrpe::normalisation::none, 1.0}, std::pair{lrpe::normalisation::denominator, 0.9}}) {
        const linear_case_options lo{true, norm, 64, decay};
        LINEAR_INFO(lo);
        CHECK(linear_case<T>(s, enc, lrpe::feature_maps::elu_plus_one{}, lo, seed + static_cast<std::uint64_t>(++n)) <=
              kernel_vs_kernel<T>());
        CHECK(linear_case<T>(s, enc, lrpe::feature_maps::relu_eps{}, lo, seed + static_cast<std::uint64_t>(++n)) <=
              kernel_vs_kernel<T>());
        CHECK(linear_case<T>(s, enc, [](T x) { return x * x; }, lo, seed + static_cast<std::uint64_t>(++n)) <=
              kernel_vs_kernel<T>());
        if constexpr (!std::is_same_v<std::decay_t<decltype(enc)>, lrpe::no_encoding>) {
          CHECK(linear_case<T>(s, enc, lrpe::feature_maps::identity{}, lo, seed + static_cast<std::uint64_t>(++n)) <=
                kernel_vs_kernel<T>());
        }
      }
    }
  };
  check(lrpe::no_encoding{}, "none");
  for_each_preset<T>(d, check);
}

TEST_CASE_TEMPLATE("simd causal linear attention, features in the kernel: segments with a state, O(block) scratch", T,
                   float, double) {
  lrpe::generator g(54);
  const index_t n = 1000, d = 32, dv = 16;
  const rm<T> q = random_matrix<T>(g, n, d, 0.5), k = random_matrix<T>(g, n, d, 0.5), v = random_matrix<T>(g, n, dv);
  const lrpe::rope_gptj<T> enc(d);
  const lrpe::feature_maps::elu_plus_one phi;
  lrpe::backend::simd_workspace ws;
  const lrpe::backend::simd_policy<> policy{nullptr, &ws};
  for (double decay : {1.0, 0.98}) {
    INFO("decay = " << decay);
    lrpe::linear_attention_state<T> st(d, dv, decay), ref_st(d, dv, decay);
    const index_t cuts[] = {0, 5, 70, 71, 600, n};  // segments shorter than a chunk, longer than a block
    for (std::size_t c = 0; c + 1 < std::size(cuts); ++c) {
      const index_t a = cuts[c], b = cuts[c + 1];
      const lrpe::linear_options seg{
          .causal = true, .norm = lrpe::normalisation::denominator, .decay = decay, .q_positions = a, .k_positions = a};
      CAPTURE(a);
      run_segment(q, k, v, a, b, enc, phi, st, ref_st, seg, policy);
      check_same_state(st, ref_st);
    }
  }
  // The features never exist for the whole sequence: the workspace holds blocks of 64 rows,
  // less than the n × d_f Q̃ and K̃ (2 × 125 KiB in float) that computing them first needs.
  CHECK(ws.capacity() < static_cast<std::size_t>(2 * n * d) * sizeof(T));
}

TEST_CASE_TEMPLATE("simd linear attention, multi-head with per-head decays on a 2-thread pool == reference", T, float,
                   double) {
  lrpe::backend::simd_threads pool(2);
  lrpe::generator g(61);
  const index_t b = 1, h = 4, n = 150, d = 16;
  std::vector<T> q(static_cast<std::size_t>(b * h * n * d)), k(q.size()), v(q.size()), ref(q.size()), out(q.size());
  for (auto* x : {&q, &k, &v})
    for (auto& e : *x) e = static_cast<T>(0.5 * g.normal());
  const std::vector<double> decays{1.0, 0.99, 0.9, 0.5};
  const lrpe::linear_options opt{.causal = true, .norm = lrpe::normalisation::denominator, .head_decays = decays};
  const lrpe::rope_neox<T> enc(d);
  lrpe::linear_attention(lrpe::bnsh(q.data(), b, h, n, d), lrpe::bnsh(k.data(), b, h, n, d), lrpe::bnsh(v.data(), b, h, n, d),
                         lrpe::bnsh(ref.data(), b, h, n, d), enc, lrpe::feature_maps::elu_plus_one{}, opt);
  lrpe::linear_attention(lrpe::bnsh(q.data(), b, h, n, d), lrpe::bnsh(k.data(), b, h, n, d), lrpe::bnsh(v.data(), b, h, n, d),
                         lrpe::bnsh(out.data(), b, h, n, d), enc, lrpe::feature_maps::elu_plus_one{}, opt,
                         lrpe::backend::simd_policy<>{&pool});
  double err = 0;
  for (std::size_t i = 0; i < out.size(); ++i) err = std::max(err, std::abs(static_cast<double>(out[i] - ref[i])));
  CHECK(err <= 10 * kernel_vs_kernel<T>());
}

