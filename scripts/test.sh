#!/usr/bin/env bash
# README command 2: install what is missing, build, and run every test suite (one process per suite).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
# Two suites at once (the machines have 2 cores): the suite is mostly single-threaded process starts and waits.
# Most suites run LibTorch in their own process, where libgomp's default wait (300000 spins) lets the two suites'
# OpenMP threads spin on the cores the other needs. The short spin that `baton` sets for itself (kSpinCount in
# core/cli/openmp_wait.cpp: keep the two alike) took the suite from 198 / 192 s to 163 / 164 s on 2 cores. A wait
# setting already in the environment is kept.
if [[ -z ${OMP_WAIT_POLICY+x} && -z ${GOMP_SPINCOUNT+x} ]]; then export GOMP_SPINCOUNT=10000; fi
ctest --test-dir build --output-on-failure --timeout 900 -j"${BATON_JOBS:-2}"
