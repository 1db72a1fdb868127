#!/usr/bin/env bash
# Installs the Debian packages baton needs (Debian 12 and 13 name them alike), only those that are missing. Safe to
# run again. python3-torch brings torchrun, which the distributed tests run baton under; python3-sklearn the CSV
# data of configs/diabetes.toml and configs/breast_cancer.toml (and numpy, which checks the regression's fit); time
# (GNU time) measures the peak memory of the safetensors dataset's memory test; libpng-dev writes the diffusion
# example's sample grids, and python3-numpy/python3-scipy compute the reference Frechet distance its test checks;
# Boost.CRC (in libboost-dev) checksums the tensorboard logger's event records, and python3-venv holds the venvs its
# test installs TensorBoard's reader into and the mlflow logger's test its MLflow server; libcurl4-openssl-dev: the
# mlflow logger's HTTP client.
set -euo pipefail

packages=(
  g++ cmake make pkg-config git ca-certificates
  libtorch-dev libgloo-dev libopenblas0-pthread
  libtomlplusplus-dev doctest-dev libboost-dev libboost-filesystem-dev
  nlohmann-json3-dev libcli11-dev zlib1g-dev
  dataset-fashion-mnist python3 python3-torch python3-sklearn time
  libpng-dev python3-numpy python3-scipy
  python3-venv libcurl4-openssl-dev
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
