#!/usr/bin/env bash
# One timed run of the main job (configs/fashion_mnist.toml) with changes, for the time-to-accuracy table in
# docs/algorithms.md: prints the training time (speed_monitor's wall_clock/train: no start-up, no evaluation), the
# final EMA and raw accuracies, and the best EMA accuracy of any epoch.
#   bench/main_job_trial.sh <label> [--set key=value ...]        EXTRA_TOML: TOML appended to the config (plugins)
#   EXTRA_TOML=$'[[plugins]]\nname = "label_smoothing"\nsmoothing = 0.1' bench/main_job_trial.sh smoothing
# Last line: RESULT label=<label> train_s=<s> ema=<final EMA accuracy> raw=<final raw accuracy>
set -euo pipefail
cd "$(dirname "$0")/.."
baton=${BATON:-build/bin/baton}
label=$1
shift
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
{ cat configs/fashion_mnist.toml; printf '\n[[plugins]]\nname = "speed_monitor"\n\n%s\n' "${EXTRA_TOML:-}"; } >"$scratch/job.toml"
"$baton" train "$scratch/job.toml" --quiet --set run.dir="$scratch/runs" --set run.name=trial "$@" >"$scratch/log" 2>&1 ||
  { cat "$scratch/log" >&2; exit 1; }
metrics=$scratch/runs/trial/metrics.jsonl
last() { grep -o "\"$1\": *[0-9.e+-]*" "$metrics" | tail -1 | sed 's/.*: *//'; }
best=$(grep -o '"eval/accuracy": *[0-9.]*' "$metrics" | sed 's/.*: *//' | sort -g | tail -1)
echo "RESULT label=$label train_s=$(last wall_clock/train) ema=$(last eval/accuracy) raw=$(last eval_raw/accuracy) best_ema=$best"
