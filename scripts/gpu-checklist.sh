#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The GPU checklist (bench/results/history.md) in one command, for the GPU machine (the device tool runs it in
# the repository root; carry `.gpu-deps`, made here by scripts/gpu-deps.sh). Writes every log
# and JSON under $OUT (default build/gpu-out) and prints a short summary last.
#
#   scripts/gpu-checklist.sh [parts...]     parts: tests sanitize peer bench (default: tests peer bench)
#
# Device time is scarce: the three binaries can be built here (nvcc, no GPU needed) and carried.
# With LRPE_GPU_BIN=<dir> holding test_cuda_kernels, bench_cuda, cuda_peer_io and example_cuda_quickstart (as
# `scripts/gpu-prebuild.sh` leaves them in .gpu-bin), the script runs those and builds only if
# they do not start there. Each part runs under a time limit (LRPE_GPU_TIMEOUT, seconds, default
# 240) so that one slow part cannot take the whole call.
#
#   tests     build test_cuda_kernels, bench_cuda and example_cuda_quickstart; run the tests (must not
#             skip) twice, then the example
#   sanitize  compute-sanitizer memcheck and racecheck on the tests (slow: a call of its own)
#   peer      bench/torch_gpu_peer.py (HF rotary, SDPA FlashAttention, copy bandwidth, and lrpe's
#             softmax and RoPE against them on the same inputs through cuda_peer_io)
#   bench     bench_cuda, then bench/cuda_summary.py against the peer's results
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

out="${OUT:-build/gpu-out}"
mkdir -p "$out"
parts=("$@")
((${#parts[@]})) || parts=(tests peer bench)
want() { local p; for p in "${parts[@]}"; do [[ "$p" == "$1" ]] && return 0; done; return 1; }
status=0
note() { echo "gpu-checklist: $*" | tee -a "$out/summary.txt"; }

deps="$PWD/.gpu-deps/usr"
if [[ ! -d "$deps" ]]; then
  note "no .gpu-deps (run scripts/gpu-deps.sh here and carry .gpu-deps); trying the system's packages"
fi
export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

{ nvidia-smi; nvcc --version; cmake --version | head -n1; c++ --version | head -n1; } >"$out/versions.txt" 2>&1

limit="${LRPE_GPU_TIMEOUT:-240}"
bin_dir="build/cuda"
prebuilt="${LRPE_GPU_BIN:-}"
if [[ -n "$prebuilt" ]] && "$prebuilt/test_cuda_kernels" --count >/dev/null 2>&1 &&
   "$prebuilt/bench_cuda" --benchmark_list_tests >/dev/null 2>&1; then
  mkdir -p build/cuda/tests build/cuda/bench build/cuda/examples
  cp "$prebuilt/test_cuda_kernels" build/cuda/tests/
  cp "$prebuilt/bench_cuda" "$prebuilt/cuda_peer_io" build/cuda/bench/
  cp "$prebuilt/example_cuda_quickstart" build/cuda/examples/
  note "using the prebuilt binaries of $prebuilt"
elif want tests || want sanitize || want bench; then
  [[ -n "$prebuilt" ]] && note "prebuilt binaries in $prebuilt do not start here: building"
  if ! cmake -S . -B build/cuda -DCMAKE_BUILD_TYPE=Release -DLRPE_ENABLE_CUDA=ON -DLRPE_BUILD_EXAMPLES=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$deps" \
      -Dbenchmark_DIR="$deps/lib/x86_64-linux-gnu/cmake/benchmark" >"$out/configure.log" 2>&1 ||
     ! cmake --build build/cuda --target test_cuda_kernels bench_cuda cuda_peer_io example_cuda_quickstart -j "$(nproc)" \
         >"$out/build.log" 2>&1; then
    tail -n 40 "$out/configure.log" "$out/build.log" 2>/dev/null
    note "configure or build FAILED (logs: configure.log, build.log)"
    exit 1
  fi
  note "built test_cuda_kernels, bench_cuda, cuda_peer_io and example_cuda_quickstart"
fi

if want tests; then
  for run in 1 2; do  # twice: an error that changes between runs is a race
    timeout "$limit" ./build/cuda/tests/test_cuda_kernels >"$out/cuda_tests_$run.log" 2>&1
    rc=$?
    if grep -q '\[lrpe-skip\]' "$out/cuda_tests_$run.log"; then
      note "tests run $run SKIPPED (no device seen)"; status=1
    else
      note "tests run $run: exit $rc, $(grep -c '^\[lrpe-error\]' "$out/cuda_tests_$run.log") measured errors"
      ((rc == 0)) || status=1
    fi
  done
  if ! diff <(grep '^\[lrpe-error\]' "$out/cuda_tests_1.log") <(grep '^\[lrpe-error\]' "$out/cuda_tests_2.log") \
      >"$out/cuda_tests_diff.txt"; then
    note "measured errors DIFFER between the two runs (cuda_tests_diff.txt): a race?"; status=1
  fi
  grep '^\[lrpe-error\]' "$out/cuda_tests_1.log" | sort -t: -k2 -g | tail -n 5 | sed 's/^/  largest: /'
  # docs/cuda.md's snippet, checked against the CPU library (bf16 bounds)
  timeout "$limit" ./build/cuda/examples/example_cuda_quickstart >"$out/cuda_quickstart.log" 2>&1
  rc=$?
  note "example_cuda_quickstart: exit $rc$(grep -q '\[lrpe-skip\]' "$out/cuda_quickstart.log" && echo ' (SKIPPED: no device)')"
  sed 's/^/  /' "$out/cuda_quickstart.log"
  ((rc == 0)) && ! grep -q '\[lrpe-skip\]' "$out/cuda_quickstart.log" || status=1
fi

if want sanitize; then
  for tool in memcheck racecheck; do
    timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 3 ./build/cuda/tests/test_cuda_kernels \
      >"$out/sanitize_$tool.log" 2>&1
    rc=$?
    note "compute-sanitizer $tool: exit $rc ($(tail -n 1 "$out/sanitize_$tool.log"))"
    ((rc == 0)) || status=1
  done
fi

if want peer; then
  if PYTHONUNBUFFERED=1 timeout "$limit" python3 bench/torch_gpu_peer.py --out "$out/torch_peer" \
      --lrpe-io build/cuda/bench/cuda_peer_io >"$out/torch_peer.log" 2>&1; then
    note "torch peer done (torch_peer/results.json)"
  else
    tail -n 20 "$out/torch_peer.log"; note "torch peer FAILED (torch_peer.log)"; status=1
  fi
fi

if want bench; then
  if timeout "$limit" ./build/cuda/bench/bench_cuda --benchmark_out="$out/bench_cuda.json" >"$out/bench_cuda.log" 2>&1; then
    peer_json=()
    [[ -f "$out/torch_peer/results.json" ]] && peer_json=(--torch "$out/torch_peer/results.json")
    python3 bench/cuda_summary.py "$out/bench_cuda.json" "${peer_json[@]}" --markdown | tee "$out/cuda_summary.md"
  else
    tail -n 20 "$out/bench_cuda.log"; note "bench_cuda FAILED (bench_cuda.log)"; status=1
  fi
fi

cat "$out/summary.txt"
exit $status
