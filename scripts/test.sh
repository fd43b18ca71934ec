#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Configure, build and test lrpe with a CMake preset (default: dev = RelWithDebInfo, all
# tests and examples). Usage: scripts/test.sh [preset] [extra ctest args...]
#   scripts/test.sh                  # the README test command (GCC, -march=native)
#   scripts/test.sh asan             # clang, ASan + UBSan
#   scripts/test.sh x86-64-v3        # the SIMD tests, examples and benches for AVX2 (x86-64: SSE2)
#   scripts/test.sh dev -R encoder   # only tests matching 'encoder'
# Parallelism: $LRPE_JOBS (default: number of CPUs) for both the build and ctest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

preset="${1:-dev}"
shift $(( $# > 0 ? 1 : 0 ))
jobs="${LRPE_JOBS:-$(nproc 2>/dev/null || echo 2)}"

case "${preset}" in
  asan) scripts/install-deps.sh clang ;;  # the asan preset builds with clang
  dev) scripts/install-deps.sh mpi ;;     # the dev preset enables lrpe::mpi
  *) scripts/install-deps.sh ;;
esac

echo "== lrpe: preset ${preset}, ${jobs} jobs"
cmake --preset "${preset}"
cmake --build --preset "${preset}" --parallel "${jobs}"
ctest --preset "${preset}" --parallel "${jobs}" "$@"
