#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds lrpe's libFuzzer targets (tests/fuzz, clang with ASan + UBSan) and runs each one for a
# bounded time from a copy of its checked-in seed corpus; the repository is never written to.
#
#   scripts/fuzz.sh                      every target, LRPE_FUZZ_SECONDS (60) each
#   scripts/fuzz.sh fuzz_buckets ...     only these targets
#
# Environment:
#   LRPE_FUZZ_SECONDS  seconds per target (default 60), libFuzzer's -max_total_time
#   LRPE_FUZZ_BUILD    build directory (default build/fuzz); runs go to <build>/runs/<target>/
#   LRPE_FUZZ_JOBS     parallel compile jobs (default 2)
#   LRPE_FUZZ_CXX      the clang++ to use (default clang++)
#   LRPE_FUZZ_PARALLEL targets fuzzed at once (default: the number of CPUs; each uses one)
#   LRPE_SKIP_DEPS=1   do not check or install packages
#   LRPE_FUZZ_SKIP     ids of input classes to step over (tests/fuzz/README.md; never in CI)
#
# First the checked-in inputs of every target are replayed once (corpus and regressions: a
# fixed bug stays fixed), then each target fuzzes with -max_total_time, -timeout=10 and
# -rss_limit_mb=2048. Prints per target the executions (stat::number_of_executed_units) and the
# final coverage (cov: edges, ft: features, corp: corpus entries/bytes), and for a crash the
# artifact's path and how to reproduce it. Exits nonzero when any target crashed, timed out,
# ran out of memory or failed to replay.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${LRPE_FUZZ_SECONDS:-60}"
build="${LRPE_FUZZ_BUILD:-$root/build/fuzz}"
jobs="${LRPE_FUZZ_JOBS:-2}"
cxx="${LRPE_FUZZ_CXX:-clang++}"
parallel="${LRPE_FUZZ_PARALLEL:-$(nproc 2>/dev/null || echo 1)}"

# ---------------------------------------------------------------------------- dependencies
# clang, its libFuzzer/sanitizer runtime (a package of its own on Debian: libclang-rt-<N>-dev),
# CMake, make, Eigen and xsimd. Installed with apt-get only when missing (as
# scripts/install-deps.sh does for the rest of the project).
can_link_fuzzer() {
  local dir
  dir="$(mktemp -d)"
  printf '#include <cstdint>\n#include <cstddef>\nextern "C" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }\n' \
    >"$dir/t.cpp"
  "$cxx" -fsanitize=fuzzer,address,undefined "$dir/t.cpp" -o "$dir/t" >/dev/null 2>&1
  local rc=$?
  rm -rf "$dir"
  return $rc
}

install_packages() {
  local missing=()
  for p in "$@"; do
    dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  local as_root=()
  if [[ "$(id -u)" -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || { echo "fuzz.sh: missing ${missing[*]}, and I am neither root nor have sudo" >&2; exit 1; }
    as_root=(sudo)
  fi
  echo "fuzz.sh: installing ${missing[*]}"
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

if [[ "${LRPE_SKIP_DEPS:-0}" != 1 ]]; then
  if command -v dpkg >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    base=(cmake make libeigen3-dev libxsimd-dev)
    command -v "$cxx" >/dev/null 2>&1 || base+=(clang)
    install_packages "${base[@]}"
    if ! can_link_fuzzer; then
      major="$("$cxx" -dumpversion 2>/dev/null | cut -d. -f1)"
      install_packages "libclang-rt-${major:-14}-dev"
    fi
  fi
  if ! command -v "$cxx" >/dev/null 2>&1 || ! can_link_fuzzer; then
    echo "fuzz.sh: $cxx cannot link -fsanitize=fuzzer,address,undefined; install clang and its" \
         "compiler-rt runtime (Debian/Ubuntu: clang libclang-rt-14-dev)" >&2
    exit 1
  fi
fi

# ---------------------------------------------------------------------------- build
cmake -S "$root/tests/fuzz" -B "$build" -DCMAKE_CXX_COMPILER="$cxx" -DLRPE_BUILD_FUZZ=ON >/dev/null
cmake --build "$build" -j "$jobs" --target lrpe_fuzz_all

if (($# > 0)); then
  targets=("$@")
else
  targets=()
  for src in "$root"/tests/fuzz/fuzz_*.cpp; do targets+=("$(basename "$src" .cpp)"); done
fi

# ---------------------------------------------------------------------------- replay
failed=()
echo
echo "== replay of the checked-in inputs"
for t in "${targets[@]}"; do
  inputs=()
  for dir in corpus regressions; do
    [[ -d "$root/tests/fuzz/$dir/$t" ]] || continue
    while IFS= read -r -d '' f; do inputs+=("$f"); done < <(find "$root/tests/fuzz/$dir/$t" -type f -print0 | sort -z)
  done
  ((${#inputs[@]} == 0)) && continue
  mkdir -p "$build/runs/$t"
  bad=0
  for f in "${inputs[@]}"; do  # one at a time: every crashing input is named, not only the first
    rel="${f#"$root/tests/fuzz/"}"
    log="$build/runs/$t/replay-${rel//\//_}.log"
    if ! "$build/$t" "$f" >"$log" 2>&1; then
      echo "$t: REPLAY CRASH on ${f#"$root"/} (log: $log)"
      grep -m2 -E 'ERROR: |runtime error|postcondition failed' "$log" | sed 's/^/    /' || true
      bad=$((bad + 1))
    fi
  done
  if ((bad == 0)); then
    echo "$t: ${#inputs[@]} inputs replayed, no crash"
  else
    failed+=("$t (replay: $bad of ${#inputs[@]} inputs)")
  fi
done

# ---------------------------------------------------------------------------- fuzz
echo
echo "== fuzzing, ${seconds} s per target, ${parallel} at a time"
# One target's run: its result line in $run/result, its status in $run/status (ok | crash).
fuzz_one() {
  local t="$1" run="$build/runs/$1"
  rm -rf "$run/corpus" "$run/artifacts" "$run/result" "$run/status"
  mkdir -p "$run/corpus" "$run/artifacts"
  [[ -d "$root/tests/fuzz/corpus/$t" ]] && cp -R "$root/tests/fuzz/corpus/$t/." "$run/corpus/"
  local dict=()
  [[ -f "$root/tests/fuzz/$t.dict" ]] && dict=("-dict=$root/tests/fuzz/$t.dict")
  local log="$run/fuzz.log" rc=0
  # print_stacktrace: UBSan's reports carry the call chain (ASan's always do)
  UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}" \
    "$build/$t" "$run/corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$run/artifacts/" "${dict[@]}" >"$log" 2>&1 || rc=$?
  local execs cov_line cov ft corp line
  execs="$(grep -m1 '^stat::number_of_executed_units:' "$log" | awk '{print $2}' || true)"
  cov_line="$(grep -E '^#[0-9]+[[:space:]].* cov: ' "$log" | tail -1 || true)"
  cov="$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$cov_line")"
  ft="$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$cov_line")"
  corp="$(sed -n 's/.* corp: \([^ ]*\).*/\1/p' <<<"$cov_line")"
  line="$(printf '%-24s executions %-10s cov %-6s ft %-7s corpus %s' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}")"
  if ((rc == 0)); then
    echo "$line  ok" >"$run/result"
    echo ok >"$run/status"
  else
    local artifact
    artifact="$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1 || true)"
    {
      echo "$line  CRASH (exit $rc)"
      grep -m5 -E '==ERROR|ERROR: libFuzzer|runtime error|postcondition failed|^  ' "$log" | sed 's/^/    /' || true
      echo "    artifact: ${artifact:-none written}; log: $log"
      echo "    reproduce: $build/$t ${artifact:-<artifact>}"
    } >"$run/result"
    echo crash >"$run/status"
  fi
  cat "$run/result"
}
running=0
for t in "${targets[@]}"; do
  if ((running >= parallel)); then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait || true
summary=()
for t in "${targets[@]}"; do
  summary+=("$(head -n1 "$build/runs/$t/result" 2>/dev/null || echo "$t  NO RESULT")")
  [[ "$(cat "$build/runs/$t/status" 2>/dev/null)" == ok ]] || failed+=("$t")
done

echo
echo "== summary (${seconds} s per target; cov = edges, ft = features)"
printf '%s\n' "${summary[@]}"
if ((${#failed[@]} > 0)); then
  echo "fuzz.sh: FAILED: ${failed[*]}"
  exit 1
fi
echo "fuzz.sh: no crash"
