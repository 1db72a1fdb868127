#!/usr/bin/env bash
# README command 2: install what is missing, build, and run every test suite (one process per suite).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
# Two suites at once (the machines have 2 cores): the suite is mostly single-threaded process starts and waits.
ctest --test-dir build --output-on-failure --timeout 900 -j"${BATON_JOBS:-2}"
