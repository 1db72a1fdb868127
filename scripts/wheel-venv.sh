# Sourced by the scripts that build baton against a torch wheel from the Python package registry
# (scripts/test-wheel.sh, bench/composer_vs_baton.sh): a virtual environment made once and kept, and the wheel's
# LibTorch for CMake. Only these side platforms use the registry; the README's commands use Debian's packages.
#
#   wheel_venv VENV WHEELS PYTHON PACKAGE...   makes VENV (once: VENV/.ready, written last, lists PACKAGE...) and installs PACKAGE...
#                                              from WHEELS, downloading into WHEELS only what is not there yet
#   wheel_torch_dir VENV                       the Torch_DIR of VENV's torch
#   find_nvcc                                  puts the CUDA toolkit's nvcc on PATH (a CUDA LibTorch's CMake needs it)

wheel_venv() {
  local venv=$1 wheels=$2 python=$3
  shift 3
  [[ -x $python ]] || { echo "wheel_venv: no interpreter at $python" >&2; return 1; }
  # Debian's python3 makes virtual environments only with python3-venv (ensurepip).
  if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
    local sudo=""
    [[ $(id -u) -eq 0 ]] || sudo=sudo
    echo "wheel_venv: installing python3-venv (for the wheel's virtual environment)"
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null
  fi
  mkdir -p "$wheels"
  # .ready lists what was installed: the same list again needs no pip at all (its check takes a minute for
  # Composer's dependencies).
  [[ -f $venv/.ready && $(cat "$venv/.ready") == "$*" ]] && return 0
  if [[ ! -f $venv/.ready ]]; then
    rm -rf "$venv"
    "$python" -m venv "$venv"
  fi
  # Offline first (a kept environment that has them all, or a cache that holds every wheel, needs no network);
  # then what is missing is downloaded once into the cache. A package added to the list later comes in here too.
  if ! "$venv/bin/pip" install -q --no-index --find-links "$wheels" "$@" 2>/dev/null; then
    echo "wheel_venv: downloading $* and what they require into $wheels (once)"
    "$venv/bin/pip" download -q --dest "$wheels" "$@"
    "$venv/bin/pip" install -q --no-index --find-links "$wheels" "$@"
  fi
  echo "$*" >"$venv/.ready"
}

wheel_torch_dir() {
  echo "$("$1/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')/Torch"
}

find_nvcc() {
  if ! command -v nvcc >/dev/null; then
    local dir
    for dir in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
      [[ -x $dir/nvcc ]] && { export PATH=$dir:$PATH; break; }
    done
  fi
  command -v nvcc >/dev/null ||
    { echo "no nvcc on PATH or in /usr/local/cuda*/bin: a CUDA LibTorch's CMake needs the CUDA toolkit" >&2; return 1; }
}
