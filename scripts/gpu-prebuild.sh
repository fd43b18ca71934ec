#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the GPU checklist's binaries here, where nvcc works without a GPU, and copies them
# into .gpu-bin/ (git-ignored) so that a device run carries them and spends no device time on
# compiling: `LRPE_GPU_BIN=.gpu-bin scripts/gpu-checklist.sh ...` with `.gpu-bin` and `.gpu-deps`
# in the run's carry (scripts/gpu-deps.sh makes .gpu-deps; the binaries find libbenchmark there
# through the checklist's LD_LIBRARY_PATH). They need a glibc no newer than the device image's:
# the checklist builds there instead when they do not start.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

[[ -d .gpu-deps ]] || scripts/gpu-deps.sh
deps="$PWD/.gpu-deps/usr"
cmake -S . -B build/cuda -DCMAKE_BUILD_TYPE=Release -DLRPE_ENABLE_CUDA=ON -DLRPE_BUILD_EXAMPLES=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$deps" \
  -Dbenchmark_DIR="$deps/lib/x86_64-linux-gnu/cmake/benchmark" >/dev/null
cmake --build build/cuda --target test_cuda_kernels bench_cuda cuda_peer_io example_cuda_quickstart -j "${LRPE_JOBS:-$(nproc)}"
rm -rf .gpu-bin
mkdir -p .gpu-bin
cp build/cuda/tests/test_cuda_kernels build/cuda/bench/bench_cuda build/cuda/bench/cuda_peer_io \
  build/cuda/examples/example_cuda_quickstart .gpu-bin/
echo "gpu-prebuild: $(ls .gpu-bin | tr '\n' ' ')in .gpu-bin ($(du -sh .gpu-bin | cut -f1))"
