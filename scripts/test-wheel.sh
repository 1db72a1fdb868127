#!/usr/bin/env bash
# CI's third platform: PyTorch's own LibTorch, the one inside the `torch` wheel, with CUDA (these machines have the
# CUDA toolkit but no GPU, so the tests run CPU tensors on a CUDA LibTorch), and the NCCL backend linked against the
# wheel's NCCL. The wheel's python3 and torchrun run the Python-side and distributed tests.
#   scripts/test-wheel.sh [ctest arguments]          e.g. scripts/test-wheel.sh -R distributed
#   BATON_TORCH_VERSION   the torch release to test (default below); BATON_WHEEL_PYTHON: the interpreter of the venv
#   BATON_WHEEL_VENV      another virtual environment folder to make or reuse
#
# This platform alone uses the Python package registry; the README's commands use Debian's packages only. Between
# runs it keeps, under $BATON_WHEEL_CACHE (default /var/cache/baton-ci):
#   wheels/                          pip's downloads: torch, the CUDA packages it requires (~2.9 GB), numpy
#   venv-torch<version>-py<X.Y>/     a virtual environment with them installed (written last: .ready)
# so a run after the first needs no network. It builds into build-wheel/ (ccache makes a warm rebuild short).
set -euo pipefail
cd "$(dirname "$0")/.."
torch_version=${BATON_TORCH_VERSION:-2.15.0}
cache=${BATON_WHEEL_CACHE:-/var/cache/baton-ci}
python=${BATON_WHEEL_PYTHON:-/usr/bin/python3}
started=$SECONDS

fail() { echo "test-wheel: $*" >&2; exit 1; }
source scripts/wheel-venv.sh
[[ -x $python ]] || fail "no interpreter at $python (set BATON_WHEEL_PYTHON)"
py=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
find_nvcc || fail "the CUDA toolkit is missing"

venv=${BATON_WHEEL_VENV:-$cache/venv-torch$torch_version-py$py}
# numpy: the TorchScript test reads tensors' bytes through it. safetensors: torch.distributed.checkpoint's
# safetensors storage reads through it (tests/dcp_interop_test.py).
wheel_venv "$venv" "$cache/wheels" "$python" "torch==$torch_version" numpy safetensors
echo "test-wheel: torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)') in $venv ($((SECONDS - started)) s)"

# As PyTorch's users find its LibTorch.
torch_dir=$(wheel_torch_dir "$venv")
BATON_BUILD_DIR=build-wheel scripts/build.sh -DTorch_DIR="$torch_dir" -DPython3_EXECUTABLE="$venv/bin/python" \
  -DBATON_NCCL=ON
echo "test-wheel: built in $((SECONDS - started)) s"

# The wheel's python3 and torchrun first on PATH: the tests that run Python's torch or torchrun take these.
PATH=$venv/bin:$PATH ctest --test-dir build-wheel --output-on-failure --timeout 900 "$@"
echo "test-wheel: torch $torch_version wheel passed in $((SECONDS - started)) s"
