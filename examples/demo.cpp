// lrpe demo: build every preset of the LRPE paper's Table 1 plus RoPE and PermuteFormer, check
// the math contract on each (W_0 = I, unitarity, W_sᴴ W_t = W_{t−s} at far-apart positions,
// shift-invariant scores), and show that scores depend on t − s only.
#include <lrpe/lrpe.hpp>

#include <chrono>
#include <cstdio>
#include <string>

namespace {

template <class E>
bool show(const char* name, const E& enc) {
  using T = typename E::scalar;
  const auto zero = lrpe::check::identity_at_zero(enc);
  const auto unit = lrpe::check::unitarity(enc, {-1'000'000, -7, 0, 3, 1'000'000});
  const auto rel = lrpe::check::relative(enc, -3, 1'000'000);
  const auto shift = lrpe::check::shift_invariance(enc, 10, 250, 999'983);

  // Encode a block of 1024 rows and time it.
  const lrpe::index_t n = 1024;
  const lrpe::row_matrix<T> x = lrpe::row_matrix<T>::Random(n, enc.dim());
  lrpe::row_matrix<T> out(n, enc.feature_dim());
  const auto t0 = std::chrono::steady_clock::now();
  enc.encode(lrpe::view(x), /*offset=*/4096, lrpe::view(out));
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();

  const bool ok = zero.passed && unit.passed && rel.passed && shift.passed;
  std::printf("%-14s %-8s feat %3ld | W_0=I %.1e  unitary %.1e  W_s^H W_t=W_{t-s} %.1e  shift %.1e | %6.1f us/1024 rows  %s\n",
              name, E::is_complex ? "complex" : "real", static_cast<long>(enc.feature_dim()), zero.max_error,
              unit.max_error, rel.max_error, shift.max_error, us, ok ? "ok" : "FAILED");
  return ok;
}

}  // namespace

int main() {
  constexpr lrpe::index_t d = 64;
  std::printf("lrpe %d.%d.%d demo: d = %ld, float; errors are max-abs, checks at s = -3, t = 1e6\n\n",
              LRPE_VERSION_MAJOR, LRPE_VERSION_MINOR, LRPE_VERSION_PATCH, static_cast<long>(d));
  bool ok = true;
  ok &= show("type1", lrpe::type1<float>(d));
  ok &= show("type2", lrpe::type2<float>(d));
  ok &= show("type3", lrpe::type3<float>(d));
  ok &= show("type4", lrpe::type4<float>(d));
  ok &= show("type5", lrpe::type5<float>(d));
  ok &= show("type6", lrpe::type6<float>(d));
  ok &= show("type7", lrpe::type7<float>(d));
  ok &= show("type8", lrpe::type8<float>(d));
  ok &= show("rope_gptj", lrpe::rope_gptj<float>(d));
  ok &= show("rope_neox", lrpe::rope_neox<float>(d));
  ok &= show("permuteformer", lrpe::permuteformer<float>(d));

  // Relative, not absolute: the same pair of rows scores the same at (s, t) and (s+c, t+c).
  const lrpe::type5<double> enc(d);
  const lrpe::row_matrix<double> q = lrpe::row_matrix<double>::Random(1, d);
  const lrpe::row_matrix<double> k = lrpe::row_matrix<double>::Random(1, d);
  std::printf("\ntype5 score(q@s, k@t) for t - s = 7:\n");
  for (lrpe::position_t s : {0L, 1000L, -5000L, 123456789L})
    std::printf("  s = %-10ld t = %-10ld score = %.12f\n", static_cast<long>(s), static_cast<long>(s + 7),
                enc.score(q.data(), s, k.data(), s + 7));
  std::printf("\n%s\n", ok ? "all checks passed" : "SOME CHECKS FAILED");
  return ok ? 0 : 1;
}
