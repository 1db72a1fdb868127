#!/usr/bin/env bash
# The main job's training rate alone and beside a competing process, under each OpenMP wait setting: libgomp's own
# default (threads spin for a while after each parallel region), OMP_WAIT_POLICY=PASSIVE (they sleep at once), and
# a short spin (GOMP_SPINCOUNT), for 1 and 2 intra-op threads. The competitors: a CPU burner (one busy process per
# core, as an editor's build or a second job would be) and a second baton run of the same job.
# The rate is batches / the training time speed_monitor logs (wall_clock/train), so start-up is not counted.
#   bench/bench_contention.sh                  all settings; BATCHES (default 300) batches per run
#   BATON=other/bin/baton bench/bench_contention.sh
# Last lines: RESULT contended_vs_alone=<rate beside the burner / rate alone, baton's defaults, 2 threads>
#             RESULT alone_cost=<rate alone with baton's defaults / with libgomp's, 2 threads>
set -euo pipefail
cd "$(dirname "$0")/.."
baton=${BATON:-build/bin/baton}
batches=${BATCHES:-300}
cores=$(nproc)
[[ -x $baton ]] || { echo "bench_contention: no $baton (build first: scripts/build.sh)" >&2; exit 1; }

scratch=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$scratch"; }
trap cleanup EXIT
{ cat configs/fashion_mnist.toml; printf '\n[[plugins]]\nname = "speed_monitor"\n'; } >"$scratch/job.toml"

# rate <label> <threads> [VAR=value ...]: one run's batches per second of training.
run_count=0
rate() {
  local label=$1 threads=$2
  shift 2
  run_count=$((run_count + 1))
  local name="run$run_count"
  env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$@" "$baton" train "$scratch/job.toml" --quiet \
    --set run.dir="$scratch/runs" --set run.name="$name" --set trainer.max_duration="${batches}ba" \
    --set trainer.eval_interval=0ba --set checkpoint.save_interval=0ba --set plugins.ema.ema_start=0ba --set trainer.threads="$threads" \
    >"$scratch/$name.log" 2>&1 || { cat "$scratch/$name.log" >&2; exit 1; }
  local seconds
  seconds=$(grep -o '"wall_clock/train":[0-9.e+-]*' "$scratch/runs/$name/metrics.jsonl" | tail -1 | cut -d: -f2)
  awk -v b="$batches" -v s="$seconds" 'BEGIN {printf "%.2f", b / s}'
}

start_burner() {
  for ((c = 0; c < cores; c++)); do
    sh -c 'while :; do :; done' &
    pids+=($!)
  done
}
start_second_run() {  # the same job, long enough to outlast the measured one, with the same wait setting
  env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$@" "$baton" train "$scratch/job.toml" --quiet \
    --set run.dir="$scratch/runs" --set run.name="second$run_count" --set trainer.max_duration=100ep \
    --set trainer.eval_interval=0ba --set checkpoint.save_interval=0ba --set plugins.ema.ema_start=0ba >/dev/null 2>&1 &
  pids+=($!)
  sleep 3  # past its start-up, into training
}
stop_competitors() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; pids=(); }

declare -A settings=(
  [libgomp]="BATON_OPENMP_WAIT=libgomp"
  [passive]="OMP_WAIT_POLICY=PASSIVE"
  [spin10k]="GOMP_SPINCOUNT=10000"
)
declare -A result
echo "bench_contention: $baton, $cores cores, $batches batches per run"
printf '%-8s %7s %10s %10s %10s\n' setting threads alone burner second
for s in libgomp passive spin10k; do
  for t in 1 2; do
    read -r -a vars <<<"${settings[$s]}"
    alone=$(rate "$s" "$t" "${vars[@]}")
    start_burner
    burner=$(rate "$s" "$t" "${vars[@]}")
    stop_competitors
    start_second_run "${vars[@]}"
    second=$(rate "$s" "$t" "${vars[@]}")
    stop_competitors
    result[$s,$t,alone]=$alone result[$s,$t,burner]=$burner result[$s,$t,second]=$second
    printf '%-8s %7s %10s %10s %10s\n' "$s" "$t" "$alone" "$burner" "$second"
  done
done
echo "(batches per second of training; 'burner': beside $cores busy processes; 'second': beside the same job)"
echo "RESULT contended_vs_alone=$(awk -v a="${result[passive,2,alone]}" -v b="${result[passive,2,burner]}" \
  'BEGIN {printf "%.3f", b / a}')"
echo "RESULT alone_cost=$(awk -v n="${result[passive,2,alone]}" -v o="${result[libgomp,2,alone]}" \
  'BEGIN {printf "%.3f", n / o}')"
