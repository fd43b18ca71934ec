#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what lrpe's build, tests, examples and benches need (Debian/Ubuntu, apt).
# Idempotent: only packages that are not installed yet are installed, and apt-get is not
# touched at all when everything is present. Runs as root directly, otherwise via sudo.
# Set LRPE_SKIP_DEPS=1 to skip (e.g. when the dependencies come from elsewhere).
#   scripts/install-deps.sh          what the GCC build needs
#   scripts/install-deps.sh clang    also clang and its sanitizer/libFuzzer runtimes (the asan
#                                    preset and scripts/fuzz.sh)
#   scripts/install-deps.sh mpi      also Open MPI (lrpe::mpi: LRPE_ENABLE_MPI, on in the dev preset)
set -euo pipefail

packages=(cmake g++ libeigen3-dev libxsimd-dev doctest-dev libbenchmark-dev libpng-dev)
for extra in "$@"; do
  case "$extra" in
    clang) packages+=(clang libclang-rt-dev) ;;
    mpi) packages+=(libopenmpi-dev openmpi-bin) ;;
    *) echo "install-deps: unknown extra '$extra' (known: clang, mpi)" >&2; exit 2 ;;
  esac
done

if [[ "${LRPE_SKIP_DEPS:-0}" == 1 ]]; then
  echo "install-deps: LRPE_SKIP_DEPS=1, not checking ${packages[*]}"
  exit 0
fi
if ! command -v dpkg >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: no dpkg/apt-get on this system; install these (or their equivalents)" \
       "yourself: ${packages[*]}" >&2
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed'; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all present (${packages[*]})"
  exit 0
fi

if [[ "$(id -u)" -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "install-deps: missing ${missing[*]}, and I am neither root nor have sudo" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${missing[@]}"
