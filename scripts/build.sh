#!/usr/bin/env bash
# The standard build: Release into build/, two jobs (the machines have 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"${BATON_JOBS:-2}"
