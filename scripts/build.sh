#!/usr/bin/env bash
# The standard build: Release into build/, two jobs (the machines have 2 cores). With ccache installed, compiles go
# through it, keyed on paths relative to the checkout, so another clone of the same code reuses them.
#   scripts/build.sh [cmake configure arguments]     BATON_BUILD_DIR: another build folder (default build)
# e.g. BATON_BUILD_DIR=build-wheel scripts/build.sh -DTorch_DIR=... (scripts/test-wheel.sh does so).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${BATON_BUILD_DIR:-build}
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "$@"
cmake --build "$dir" -j"${BATON_JOBS:-2}"
