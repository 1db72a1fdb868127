#!/usr/bin/env bash
# The diffusion example's benchmark (docs/diffusion.md): trains configs/fashion_mnist_ddpm.toml (unless --report-only)
# and prints, from the run's metrics, the last evaluation's Frechet distances of the EMA and the raw weights, their
# ratio (the goal: <= 0.5), how many evaluations the EMA was ahead at, and the training time in seconds, as
#   RESULT fd_ema=... fd_raw=... fd_ratio=... ema_ahead=3/3 train_s=...
# Needs the feature classifier first: build/bin/baton train configs/fashion_mnist.toml. Extra arguments go to
# `baton train` (e.g. --set trainer.max_duration=200ba).
#   BATON          the baton executable (default build/bin/baton)
#   BATON_RUNS     the runs folder (run.dir; default runs): the run is <BATON_RUNS>/fashion_mnist_ddpm
#   BATON_CLASSIFIER  the fd metric's classifier (default runs/fashion_mnist/model.safetensors)
set -euo pipefail
cd "$(dirname "$0")/.."
config=configs/fashion_mnist_ddpm.toml
baton=${BATON:-build/bin/baton}
runs=${BATON_RUNS:-runs}
run=$runs/fashion_mnist_ddpm
classifier=${BATON_CLASSIFIER:-runs/fashion_mnist/model.safetensors}
python=/usr/bin/python3
[[ -x $python ]] || python=python3
if [[ ${1:-} != --report-only ]]; then
  [[ -f $classifier ]] || {
    echo "diffusion_bench: no $classifier: run $baton train configs/fashion_mnist.toml first" >&2
    exit 2
  }
  rm -rf "$run"
  mkdir -p "$run"
  metric="[{ name = \"fd\", classifier = \"$classifier\", classifier_config = \"configs/fashion_mnist.toml\" }]"
  "$baton" train "$config" --set trainer.progress=false --set "run.dir=$runs" --set "data.metrics=$metric" "$@" 2>&1 |
    tee "$run.log"
  mv "$run.log" "$run/train.log"
fi
"$python" - "$run" <<'PY'
import json, re, sys
run = sys.argv[1]
ema, raw = {}, {}
for line in open(f"{run}/metrics.jsonl"):
    record = json.loads(line)
    if "eval/fd" in record: ema[record["batch"]] = record["eval/fd"]
    if "eval_raw/fd" in record: raw[record["batch"]] = record["eval_raw/fd"]
batches = sorted(set(ema) & set(raw))
if not batches:
    sys.exit(f"diffusion_bench: no eval/fd and eval_raw/fd in {run}/metrics.jsonl")
last = batches[-1]
ahead = sum(ema[b] < raw[b] for b in batches)
train_s = "nan"
try:
    match = re.search(r"trained to .* in ([0-9.]+) s", open(f"{run}/train.log").read())
    train_s = match.group(1) if match else "nan"
except OSError:
    pass
for b in batches:
    print(f"batch {b:6d}  eval/fd {ema[b]:9.3f}  eval_raw/fd {raw[b]:9.3f}  ratio {ema[b] / raw[b]:.3f}")
print(f"RESULT fd_ema={ema[last]:.4f} fd_raw={raw[last]:.4f} fd_ratio={ema[last] / raw[last]:.4f} "
      f"ema_ahead={ahead}/{len(batches)} train_s={train_s}")
PY
