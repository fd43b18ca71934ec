#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds and runs bench/peers/ggml_peer.cpp: ggml's CPU flash attention and RoPE on the shapes of
# bench_simd_attention / bench_simd_encode, the peer the issue-6 targets name. (The program sits
# in peers/ because CMake builds every bench/*.cpp as a Google Benchmark program.)
#
# ggml is not in Debian 12. Its sources come from the llama-cpp-python sdist on PyPI, which
# vendors llama.cpp (and so ggml) at a fixed commit; the version is pinned below so that runs
# compare like with like. ggml is built CPU-only, static, -march=native, without OpenMP (its own
# thread pool), in build/ggml. Nothing here is a dependency of the library or of its tests.
#
# Usage: bench/ggml_peer.sh [--out build/ggml_peer.json] [--reps 5] [--sizes 512,2048,4096,8192]
#        bench/ggml_peer.sh --decode 4096,16384,65536   (decode steps only: one query row per head)
#        bench/ggml_peer.sh --decode-gqa 32768           (decode, 32 query heads over 8 K/V heads, d = 128)
#        python3 bench/summary.py build/simd_attention.json build/torch_peer.json \
#            --ggml build/ggml_peer.json --markdown
set -euo pipefail

version="${LRPE_GGML_SDIST_VERSION:-0.3.36}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$root/build/ggml"
src="$work/llama_cpp_python-$version/vendor/llama.cpp/ggml"
bin="$work/ggml_peer"
mkdir -p "$work"

if [[ ! -d "$src" ]]; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "ggml_peer.sh: needs pip to fetch ggml's sources (Debian: apt-get install python3-pip)" >&2
    exit 1
  fi
  python3 -m pip download --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work"
  tar -xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work"
  # the sdist leaves out ggml's pkg-config template, which a standalone configure insists on
  [[ -f "$src/ggml.pc.in" ]] || : > "$src/ggml.pc.in"
fi

if [[ ! -f "$work/build/src/libggml.a" ]]; then
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
      -DGGML_NATIVE=ON -DGGML_OPENMP=OFF -DGGML_CCACHE=OFF \
      -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF
  cmake --build "$work/build" -j "$(nproc)"
fi

if [[ ! -x "$bin" || "$root/bench/peers/ggml_peer.cpp" -nt "$bin" ]]; then
  "${CXX:-c++}" -std=c++20 -O2 -march=native -I"$src/include" "$root/bench/peers/ggml_peer.cpp" \
      "$work/build/src/libggml.a" "$work/build/src/libggml-cpu.a" "$work/build/src/libggml-base.a" \
      -lpthread -ldl -o "$bin"
fi

cd "$root"
exec "$bin" "$@"
