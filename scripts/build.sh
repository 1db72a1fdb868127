#!/usr/bin/env bash
# The standard build: Release into build/, two jobs (the machines have 2 cores). With ccache installed, compiles go
# through it, keyed on paths relative to the checkout, so another clone of the same code reuses them.
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${launcher[@]}"
cmake --build build -j"${BATON_JOBS:-2}"
