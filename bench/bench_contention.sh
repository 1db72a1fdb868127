#!/usr/bin/env bash
# The main job's training rate alone and beside a competing process, under each OpenMP wait setting: libgomp's own
# default (threads spin 300000 times after each parallel region), OMP_WAIT_POLICY=PASSIVE (they sleep at once), and
# baton's default (nothing in the environment: baton sets GOMP_SPINCOUNT=10000 itself), for 1 and 2 intra-op threads
# and for `baton launch --nproc 2` (two ranks of one thread). The competitors: a CPU burner (one busy process per
# core, as an editor's build or a second job would be) and a second baton run of the same job with the same setting.
# The rate is batches / the training time speed_monitor logs (wall_clock/train), so start-up is not counted.
#   bench/bench_contention.sh                  all settings; BATCHES (default 300) batches per run
#   TABLE=0 ROUNDS=5 bench/bench_contention.sh  only the alternating alone runs behind alone_cost
#   BATON=other/bin/baton bench/bench_contention.sh
# Last lines: RESULT contended_vs_alone=<rate beside the burner / rate alone, baton's default, 2 threads>
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

# rate <threads or "launch"> [VAR=value ...]: one run's batches per second of training.
run_count=0
rate() {
  local threads=$1 launch=()
  shift
  if [[ $threads == launch ]]; then threads=1 launch=(launch --nproc 2); fi
  run_count=$((run_count + 1))
  local name="run$run_count"
  env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u BATON_OPENMP_WAIT "$@" "$baton" "${launch[@]}" train "$scratch/job.toml" --quiet \
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
  env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u BATON_OPENMP_WAIT "$@" "$baton" train "$scratch/job.toml" --quiet \
    --set run.dir="$scratch/runs" --set run.name="second$run_count" --set trainer.max_duration=100ep \
    --set trainer.eval_interval=0ba --set checkpoint.save_interval=0ba --set plugins.ema.ema_start=0ba >/dev/null 2>&1 &
  pids+=($!)
  sleep 3  # past its start-up, into training
}
stop_competitors() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; pids=(); }

declare -A settings=(
  [libgomp]="BATON_OPENMP_WAIT=libgomp"
  [passive]="OMP_WAIT_POLICY=PASSIVE"
  [baton]=""
)
declare -A result
echo "bench_contention: $baton, $cores cores, $batches batches per run"
if [[ ${TABLE:-1} == 1 ]]; then
  printf '%-8s %7s %10s %10s %10s\n' setting threads alone burner second
  for s in libgomp passive baton; do
    for t in 1 2 launch; do
      read -r -a vars <<<"${settings[$s]}"
      alone=$(rate "$t" "${vars[@]}")
      start_burner
      burner=$(rate "$t" "${vars[@]}")
      stop_competitors
      start_second_run "${vars[@]}"
      second=$(rate "$t" "${vars[@]}")
      stop_competitors
      result[$s,$t,alone]=$alone result[$s,$t,burner]=$burner result[$s,$t,second]=$second
      printf '%-8s %7s %10s %10s %10s\n' "$s" "$t" "$alone" "$burner" "$second"
    done
  done
  echo "(batches per second of training; 'launch': two ranks of one thread; 'burner': beside $cores busy processes;"
  echo " 'second': beside the same job with the same setting)"
  echo "RESULT contended_vs_alone=$(awk -v a="${result[baton,2,alone]}" -v b="${result[baton,2,burner]}" \
    'BEGIN {printf "%.3f", b / a}')"
fi
# The cost alone is a few per cent at most, below one run's noise: libgomp's default and baton's alternate, ROUNDS
# times each, and the medians are compared.
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
old=() new=()
for ((r = 1; r <= ${ROUNDS:-3}; r++)); do
  old+=("$(rate 2 BATON_OPENMP_WAIT=libgomp)")
  new+=("$(rate 2)")
  echo "alone, 2 threads, round $r: libgomp's default ${old[-1]}, baton's ${new[-1]}"
done
echo "RESULT alone_cost=$(awk -v n="$(median "${new[@]}")" -v o="$(median "${old[@]}")" 'BEGIN {printf "%.3f", n / o}')"
