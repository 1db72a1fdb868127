#!/usr/bin/env bash
# baton against MosaicML Composer on the same LibTorch: the main job (configs/fashion_mnist.toml) in baton and in
# Composer (bench/composer_main_job.py), whole processes run alternately (baton, Composer, baton, ...) so that a
# machine slowing down part way slows both alike, each round with its own seed (42, 43, ...) for both, so the
# accuracies show the seed spread. Same work in both: fp32 (Composer runs amp_bf16 only on a GPU), the EMA
# evaluated once per epoch (eval = "ema": Composer evaluates the one set), checkpoints each epoch keeping three (no
# best-checkpoint selection: Composer has none).
#   bench/composer_vs_baton.sh [rounds]       default 3
#
# Composer 0.32.1 (the newest) asks for torch >= 2.6.0, < 2.7.1, so both run on torch 2.7.0's LibTorch: the wheel
# from the Python package registry in a virtual environment kept in $BATON_WHEEL_CACHE (default /var/cache/baton-ci:
# wheels-composer/ and venv-composer<version>-torch<version>-py<X.Y>/), and baton built against it in
# build-composer/ (the CLI and the two plugins the job loads; the first build takes ~35 minutes on two cores). This bench
# alone uses the registry; baton's own commands use Debian's packages.
# Prints each run's wall time (the whole process) and final EMA accuracy, then
# `RESULT baton_vs_composer=<median baton wall time / median Composer wall time> baton_ema=<mean> composer_ema=<mean>`.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
cache=${BATON_WHEEL_CACHE:-/var/cache/baton-ci}
python=${BATON_WHEEL_PYTHON:-/usr/bin/python3}
composer_version=0.32.1 torch_version=2.7.0
source scripts/wheel-venv.sh
py=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
venv=$cache/venv-composer$composer_version-torch$torch_version-py$py
wheel_venv "$venv" "$cache/wheels-composer" "$python" "torch==$torch_version" "mosaicml==$composer_version" numpy
find_nvcc  # the wheel's LibTorch is built with CUDA: its CMake configuration needs the toolkit

build=${BATON_BUILD_DIR:-build-composer}
export CCACHE_BASEDIR=$PWD
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
mkdir -p "$build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" -DTorch_DIR="$(wheel_torch_dir "$venv")" \
  -DBATON_BUILD_TESTS=OFF -DBATON_BUILD_BENCHMARKS=OFF -DBATON_BUILD_EXAMPLES=OFF >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; exit 1; }
cmake --build "$build" -j"${BATON_JOBS:-2}" --target baton_cli ema channels_last >"$build/build.log" 2>&1 ||
  { grep -B2 -A8 -m5 'error' "$build/build.log" >&2; echo "composer_vs_baton: the build failed ($build/build.log)" >&2; exit 1; }
baton=$build/bin/baton

cpu=$(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo)
flags=$(grep -o -w -e avx512_bf16 -e amx_bf16 /proc/cpuinfo | sort -u | tr '\n' ' ' || true)
echo "composer_vs_baton: $cpu, $(nproc) cores (bf16 in hardware: ${flags:-no}); torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'), Composer $composer_version; baton $("$baton" --version | awk '{print $NF}') ($baton, $(ldd "$baton" | awk '/libtorch_cpu/ {print $3; exit}'))"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
baton_times=() composer_times=() baton_accs=() composer_accs=()
for ((r = 1; r <= rounds; r++)); do
  seed=$((41 + r))
  t0=$(date +%s.%N)
  "$baton" train configs/fashion_mnist.toml --quiet --seed "$seed" --set run.dir="$scratch/runs" \
    --set run.name="baton$r" --set trainer.precision=fp32 --set plugins.ema.eval=ema --set plugins.ema.select= \
    >"$scratch/baton$r.log" 2>&1 || { cat "$scratch/baton$r.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  "$venv/bin/python" bench/composer_main_job.py --seed "$seed" --out "$scratch/composer$r" \
    >"$scratch/composer$r.log" 2>&1 || { cat "$scratch/composer$r.log" >&2; exit 1; }
  t2=$(date +%s.%N)
  bt=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
  ct=$(awk -v a="$t1" -v b="$t2" 'BEGIN {printf "%.2f", b - a}')
  b_acc=$(grep -o '"eval/accuracy": *[0-9.]*' "$scratch/runs/baton$r/metrics.jsonl" | tail -1 | grep -o '[0-9.]*$')
  c_acc=$(tail -1 "$scratch/composer$r.log" | grep -o 'ema_accuracy=[0-9.]*' | cut -d= -f2)
  baton_times+=("$bt") composer_times+=("$ct") baton_accs+=("$b_acc") composer_accs+=("$c_acc")
  echo "round $r (seed $seed): baton $bt s (EMA accuracy $b_acc); Composer $ct s (EMA accuracy $c_acc)"
done

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
spread() { printf '%s\n' "$@" | sort -g | awk 'NR == 1 {lo = $1} {hi = $1; s += $1} END {printf "mean %.4f, %.4f to %.4f", s / NR, lo, hi}'; }
bm=$(median "${baton_times[@]}") cm=$(median "${composer_times[@]}")
echo "median wall time: baton $bm s, Composer $cm s"
echo "EMA accuracy: baton $(spread "${baton_accs[@]}"); Composer $(spread "${composer_accs[@]}")"
echo "RESULT baton_vs_composer=$(awk -v b="$bm" -v c="$cm" 'BEGIN {printf "%.4f", b / c}') baton_ema=$(spread "${baton_accs[@]}" | awk '{print $2}' | tr -d ,) composer_ema=$(spread "${composer_accs[@]}" | awk '{print $2}' | tr -d ,)"
