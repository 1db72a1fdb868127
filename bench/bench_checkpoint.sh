#!/usr/bin/env bash
# Sharded checkpoints at scale: a model whose training state (fp32 weights + Adam's two moments) is about 143 MB,
# trained under zero2 at W = 1, 2 and 4 ranks (`baton launch`, Gloo on loopback) with a save after the first batch:
# the save's seconds (rank 0's "checkpoint ... (X s)": capture, every rank's files, the commit) and the bytes of each
# rank's shard files against state / W; then resumes at another world size (2 -> 4, 4 -> 2, 2 -> 1, 1 -> 4, the global
# batch fixed) and takes from rank 0's report what each rank read of the shard files against the bytes it took.
#   bench/bench_checkpoint.sh [build folder]     (default build/; BATON overrides the binary)
# Last line: RESULT save_s_w1=... save_s_w2=... save_s_w4=... shard_bytes_vs_state_over_w_w2=... (max over ranks)
# shard_bytes_vs_state_over_w_w4=... resume_read_vs_shard=... (the largest ratio of any rank of any resume).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
baton=${BATON:-$PWD/$build/bin/baton}
[[ -x $baton ]] || { echo "bench_checkpoint: no baton at $baton (build first)" >&2; exit 1; }
work=$(mktemp -d /tmp/baton-bench-checkpoint.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
echo "bench_checkpoint: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; in $work"

global=32
config() {  # name world
  cat > "$1.toml" <<EOF
[run]
name = "$1"
dir = "runs"
seed = 1
[data]
name = "synthetic"
train_size = 256
eval_size = 32
batch_size = $((global / $2))
[model]
name = "mlp"
widths = [3072, 3072]
[optimizer]
name = "adam"
lr = 0.0001
[trainer]
precision = "fp32"
max_duration = "2ba"
eval_interval = "0ep"
progress = false
[checkpoint]
save_interval = "1ba"
keep_last = 0
[distributed]
timeout_seconds = 300
sharding = "zero2"
EOF
}

launch() {  # world args...
  local world=$1
  shift
  if [[ $world == 1 ]]; then "$baton" "$@"; else "$baton" launch --nproc "$world" "$@"; fi
}

declare -A save_s shard_ratio
state_bytes=""
for w in 1 2 4; do
  config "w$w" "$w"
  out=$(launch "$w" train "w$w.toml" 2>&1) || { echo "$out" | tail -20; exit 1; }
  save_s[$w]=$(echo "$out" | grep -m1 -o 'checkpoint runs/w'"$w"'/checkpoints/ba1 ([0-9.]* s)' | grep -o '([0-9.]*' | tr -d '(')
  ckpt=runs/w$w/checkpoints/ba1
  if [[ -z $state_bytes ]]; then
    state_bytes=$(cat "$ckpt"/model/*.safetensors "$ckpt"/optimizer/*.safetensors | wc -c)
  fi
  worst=0
  for r in $(seq 1 "$w"); do
    f=$(printf 'shard-%05d-model-00001-of-00001.safetensors' "$r")
    bytes=$(cat "$ckpt/model/$f" "$ckpt/optimizer/$f" | wc -c)
    ratio=$(awk -v b="$bytes" -v s="$state_bytes" -v w="$w" 'BEGIN { printf "%.3f", b / (s / w) }')
    worst=$(awk -v a="$worst" -v b="$ratio" 'BEGIN { print (b > a ? b : a) }')
    echo "W=$w rank $((r - 1)): $bytes bytes of shard files ($ratio x state / W)"
  done
  shard_ratio[$w]=$worst
  echo "W=$w: save ${save_s[$w]} s"
done
echo "state (model + Adam, all shard files at W=1): $state_bytes bytes"

worst_read=0
for pair in "2 4" "4 2" "2 1" "1 4"; do
  read -r from to <<<"$pair"
  name="from${from}to${to}"
  config "$name" "$to"
  out=$(launch "$to" train "$name.toml" --resume "runs/w$from/checkpoints/ba1" 2>&1) || { echo "$out" | tail -20; exit 1; }
  report=$(echo "$out" | grep -m1 'read in parts: ' | sed 's/^\[rank 0\] //')
  echo "W=$from -> $to: ${report#*read in parts: }"
  for ratio in $(echo "$report" | grep -o '([0-9.]* x)' | grep -o '[0-9.]*'); do
    worst_read=$(awk -v a="$worst_read" -v b="$ratio" 'BEGIN { print (b > a ? b : a) }')
  done
done

echo "RESULT save_s_w1=${save_s[1]} save_s_w2=${save_s[2]} save_s_w4=${save_s[4]}" \
  "shard_bytes_vs_state_over_w_w2=${shard_ratio[2]} shard_bytes_vs_state_over_w_w4=${shard_ratio[4]}" \
  "resume_read_vs_shard=$worst_read"
