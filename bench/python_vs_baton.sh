#!/usr/bin/env bash
# The main job in baton and the same job in Python (bench/python_main_job.py), whole processes run alternately
# (baton, Python, baton, Python, ...), so a machine that slows down part way slows both alike. Prints each run's wall
# time and final accuracies, then `RESULT baton_vs_python=<median of baton's wall times / median of Python's>`.
#   bench/python_vs_baton.sh [rounds]          Debian's LibTorch: build/bin/baton and /usr/bin/python3 (python3-torch)
#   BATON=build-wheel/bin/baton PYTHON=<venv>/bin/python bench/python_vs_baton.sh   another platform's pair
# Compare a pair on the same LibTorch: the script prints the library baton loads and Python's torch version.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
baton=${BATON:-build/bin/baton}
python=${PYTHON:-/usr/bin/python3}
[[ -x $baton ]] || { echo "python_vs_baton: no $baton (build first: scripts/build.sh)" >&2; exit 1; }

baton_version=$("$baton" --version | awk '{print $NF}')
torch_version=$("$python" -c 'import torch; print(torch.__version__)')
libtorch=$(ldd "$baton" | awk '/libtorch_cpu/ {print $3; exit}')
echo "python_vs_baton: baton $baton_version ($baton, ${libtorch:-libtorch_cpu not found by ldd}), Python torch $torch_version ($python), $rounds rounds"
echo "python_vs_baton: OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-<unset>} OMP_NUM_THREADS=${OMP_NUM_THREADS:-<unset>}"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
baton_times=() python_times=()
for ((r = 1; r <= rounds; r++)); do
  t0=$(date +%s.%N)
  "$baton" train configs/fashion_mnist.toml --quiet --set run.dir="$scratch/runs" --set run.name="baton$r" \
    >"$scratch/baton$r.log" 2>&1 || { cat "$scratch/baton$r.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  "$python" bench/python_main_job.py --out "$scratch/python$r" >"$scratch/python$r.log" 2>&1 ||
    { cat "$scratch/python$r.log" >&2; exit 1; }
  t2=$(date +%s.%N)
  bt=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
  pt=$(awk -v a="$t1" -v b="$t2" 'BEGIN {printf "%.2f", b - a}')
  baton_times+=("$bt") python_times+=("$pt")
  b_acc=$(grep -o '"eval/accuracy": *[0-9.]*' "$scratch/runs/baton$r/metrics.jsonl" | tail -1 | grep -o '[0-9.]*$')
  b_raw=$(grep -o '"eval_raw/accuracy": *[0-9.]*' "$scratch/runs/baton$r/metrics.jsonl" | tail -1 | grep -o '[0-9.]*$')
  p_line=$(tail -1 "$scratch/python$r.log")
  echo "round $r: baton ${bt} s (EMA $b_acc, raw $b_raw); python ${pt} s (${p_line#RESULT })"
done

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
bm=$(median "${baton_times[@]}") pm=$(median "${python_times[@]}")
echo "median wall time: baton $bm s, python $pm s"
echo "RESULT baton_vs_python=$(awk -v b="$bm" -v p="$pm" 'BEGIN {printf "%.4f", b / p}')"
