#!/usr/bin/env bash
# README command 1: install what is missing, build, and train the default model on Fashion-MNIST.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/bin/baton train configs/fashion_mnist.toml "$@"
