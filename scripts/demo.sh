#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds and runs the demo (examples/demo.cpp) in a Release build (build/release).
# Usage: scripts/demo.sh [arguments passed to the demo]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs="${LRPE_JOBS:-$(nproc 2>/dev/null || echo 2)}"

scripts/install-deps.sh

cmake --preset release >/dev/null
cmake --build --preset release --target example_demo --parallel "${jobs}"
exec build/release/examples/example_demo "$@"
