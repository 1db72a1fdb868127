#!/usr/bin/env bash
# README command 2: install what is missing, build, and run every test suite (one process per suite).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure --timeout 900
