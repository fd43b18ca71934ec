#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Unpacks (does not install) Debian's Eigen, doctest and Google Benchmark into .gpu-deps/ for the
# GPU machine: its image has nvcc, CMake and a host compiler but none of lrpe's Debian
# dependencies, and it cannot fetch packages. Run it here (it needs apt-get download and
# dpkg-deb); .gpu-deps/ is git-ignored, about 12 MiB, and travels with a device run as a carried
# path. bench/results/history.md ("GPU checklist") shows the configure line that uses it:
#   cmake ... -DCMAKE_PREFIX_PATH="$PWD/.gpu-deps/usr" \
#             -Dbenchmark_DIR="$PWD/.gpu-deps/usr/lib/x86_64-linux-gnu/cmake/benchmark"
# and LD_LIBRARY_PATH="$PWD/.gpu-deps/usr/lib/x86_64-linux-gnu" for bench_cuda (libbenchmark.so.1).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(libeigen3-dev doctest-dev libbenchmark-dev libbenchmark1debian)
dest=.gpu-deps
debs=$(mktemp -d)
trap 'rm -rf "$debs"' EXIT

(cd "$debs" && apt-get download "${packages[@]}")
rm -rf "$dest"
mkdir -p "$dest"
for deb in "$debs"/*.deb; do
  dpkg-deb -x "$deb" "$dest"
done
# plain files only (libbenchmark.so.1 is a symlink in the package): nothing depends on a carried
# path keeping its links
find "$dest" -type l | while read -r link; do
  target=$(readlink -f "$link")
  rm "$link"
  [[ -e "$target" ]] && cp -a "$target" "$link"
done
echo "gpu-deps: ${packages[*]} unpacked into $dest ($(du -sh "$dest" | cut -f1))"
