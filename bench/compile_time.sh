#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Compile time of the probes in bench/compile/ (issue 37): a plain Eigen TU, a typical SIMD user
# TU (RoPE softmax + causal type1 linear) and a TU running every preset through the SIMD backend.
#   bench/compile_time.sh [include-dir[:precompiled] ...]   (default: this checkout's include/)
# A dir suffixed ":precompiled" compiles the probes as a user of lrpe::simd_kernels does
# (-DLRPE_SIMD_PRECOMPILED: the kernels are declared extern and come from the library, whose own
# one-time build is not counted).
# Several include dirs (e.g. a worktree of an older commit) are measured alternately, `rounds`
# times (ROUNDS, default 3), so that both see the same machine load. Prints one line per run:
# include-dir, probe, wall seconds, user+sys seconds, peak RSS in MiB.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dirs=("$@")
[[ ${#dirs[@]} -eq 0 ]] && dirs=("$here/../include")
rounds="${ROUNDS:-3}"
cxx="${CXX:-g++}"
flags=(-std=c++20 -O2 -march=native -DLRPE_HAS_SIMD -isystem /usr/include/eigen3 -c -o /dev/null)
printf '%-40s %-14s %8s %8s %8s\n' include probe wall_s cpu_s rss_mib
for ((r = 0; r < rounds; ++r)); do
  for probe in probe_eigen probe_simd probe_presets; do
    for spec in "${dirs[@]}"; do
      inc="${spec%:precompiled}"
      extra=()
      [[ "$spec" == *:precompiled ]] && extra=(-DLRPE_SIMD_PRECOMPILED=1)
      out=$( { /usr/bin/time -f '%e %U %S %M' "$cxx" "${flags[@]}" "${extra[@]}" -I"$inc" "$here/compile/$probe.cpp"; } 2>&1 | tail -1)
      read -r wall user sys rss <<<"$out"
      printf '%-40s %-14s %8.2f %8.2f %8.0f\n' "$spec" "$probe" "$wall" "$(echo "$user + $sys" | bc)" "$((rss / 1024))"
    done
  done
done
