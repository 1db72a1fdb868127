#!/usr/bin/env bash
# One command for a machine with a GPU, PyTorch (and so its LibTorch), nvcc and CMake, that reaches no package
# registry: builds baton against that PyTorch's LibTorch with CUDA and the NCCL backend, then checks it there.
#   scripts/gpu-check.sh [bundle]     bundle: scripts/make-offline-bundle.sh's archive (default
#                                     build-bundle/baton-offline-deps.tar.xz), unpacked into BATON_CHECK_DEPS
#   PYTHON               the interpreter whose torch to use (default: python3 on PATH)
#   BATON_CHECK_DIR      build and scratch folder (default build-gpu)
#   BATON_CHECK_DEPS     where the bundle is unpacked (default ~/.cache/baton/gpu-check-deps; outside the checkout)
#   BATON_CHECK_DEVICE   cuda (default where torch sees a GPU) or cpu: the same path on a machine without one
#   BATON_CHECK_PARTS    the parts to run (default, in this order: "amp_bf16 amp_fp16 nccl sharding bench_ema graphs
#                        speed tests";
#                        also "diffusion", not in the default: minutes of training)
#   BATON_CHECK_DATA     the folder holding fashion-mnist/ for the diffusion part (default /usr/share/datasets)
#   BATON_CHECK_DIFFUSION  more `baton train` arguments for the diffusion part, as shell words (e.g.
#                        "--set trainer.max_duration=20000ba --set 'plugins.ema.posthoc={ sigma_rels = [0.05] }'")
#   BATON_CHECK_SPEED_BATCHES  the diffusion job's batches in part speed (default 2000)
#   BATON_JOBS           build jobs (default: one per core); the test suite runs half as many at once
# Prints one RESULT line per part, and ends `gpu-check: N passed, M failed`; exit 1 if a part failed:
#   build     what the GPU parts need first (the CLI, the ema plugin, two test programs), the rest before the tests
#   amp_bf16, amp_fp16   a short convnet run with the EMA plugin under each precision on the device
#   nccl      a one-rank NCCL process group reducing a CUDA tensor
#   sharding  two ranks over Gloo on the one GPU train the convnet with the EMA under sharding none, zero1, zero2,
#             zero3 (units gathered per layer, recomputed in the backward on the device):
#             the evaluations agree across modes (relative 1e-3) and the sharded runs write shard files
#   bench_ema the EMA update's GB/s against a device-to-device copy of the same bytes
#   graphs    the convnet run with trainer.cuda_graphs false and true, and true across a resume: the step recorded,
#             equal checkpoints and weights within 1e-4 relative, graphs_vs_plain (training time)
#   speed     the main job and the diffusion job's training on the GPU: baton plain and with graphs,
#             bench/python_*_job.py and (when it imports) bench/composer_*_job.py on this torch: graphs_vs_plain,
#             baton_vs_python_gpu, baton_vs_composer_gpu, and the same for the diffusion job (diffusion_ prefix)
#   diffusion configs/fashion_mnist_ddpm.toml on the device (bench/diffusion_bench.sh: EMA and raw Frechet distances),
#             the feature classifier from runs/fashion_mnist/model.safetensors, trained on the device when absent
#   tests     the whole test suite; the tests that take a device run on BATON_TEST_DEVICE = the device
# The GPU parts come before the whole build and the test suite, so that a machine lent for minutes reports them
# first; a second run reuses the build folder and goes on where the first stopped.
set -uo pipefail
cd "$(dirname "$0")/.."
source_dir=$PWD
bundle=$(realpath -m "${1:-build-bundle/baton-offline-deps.tar.xz}")
dir=$(realpath -m "${BATON_CHECK_DIR:-build-gpu}")
python=$(command -v "${PYTHON:-python3}" || true)
parts=${BATON_CHECK_PARTS:-amp_bf16 amp_fp16 nccl sharding bench_ema graphs speed tests}
jobs=${BATON_JOBS:-$(nproc)}
passed=0
failed=0

say() { echo "gpu-check: $*"; }
result() {  # result <part> <ok|fail|skipped> [details]
  local part=$1 status=$2; shift 2
  echo "RESULT $part $status $*"
  case $status in ok) passed=$((passed + 1));; fail) failed=$((failed + 1));; esac
}
finish() {
  say "$passed passed, $failed failed"
  ((failed == 0))
  exit
}
die() { say "$*" >&2; result setup fail "$*"; finish; }

[[ -n $python ]] || die "no python3 with PyTorch (set PYTHON)"
[[ -f $bundle ]] || die "no bundle at $bundle (make it with scripts/make-offline-bundle.sh where Debian's packages are reachable)"
read -r torch_version torch_cuda has_gpu torch_dir < <("$python" -c '
import torch
print(torch.__version__, torch.version.cuda or "none", int(torch.cuda.is_available()), torch.utils.cmake_prefix_path + "/Torch")
' 2>/dev/null) || die "$python cannot import torch"
device=${BATON_CHECK_DEVICE:-$([[ $has_gpu == 1 ]] && echo cuda || echo cpu)}
say "torch $torch_version (CUDA $torch_cuda) from $python; device $device"
[[ $torch_cuda != none ]] || die "this PyTorch is built without CUDA: nothing to check"
if ! command -v nvcc >/dev/null; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [[ -x $d/nvcc ]] && { export PATH=$d:$PATH; break; }; done
fi
command -v nvcc >/dev/null || die "no nvcc on PATH or in /usr/local/cuda*/bin"

# --- the bundle, in a private prefix (again when the bundle changes) ---
# Outside the checkout and the build folder: CMake leaves a library folder inside the project out of an installed
# baton's RPATH, and the installed baton (the sdk_install test) must find toml++ and Boost there.
deps=$(realpath -m "${BATON_CHECK_DEPS:-${XDG_CACHE_HOME:-$HOME/.cache}/baton/gpu-check-deps}")
mkdir -p "$dir"
if [[ ! -f $deps/BUNDLE.txt || $bundle -nt $deps/BUNDLE.txt ]]; then
  rm -rf "$deps" && mkdir -p "$deps"
  tar -C "$deps" -xJf "$bundle" || die "cannot unpack $bundle"
  # doctest's CMake file names its install prefix (/usr) outright; everything else is relative to its own folder.
  grep -rl 'set(_IMPORT_PREFIX "/usr")' "$deps/usr/lib" --include='*.cmake' 2>/dev/null |
    xargs -r sed -i "s|set(_IMPORT_PREFIX \"/usr\")|set(_IMPORT_PREFIX \"$deps/usr\")|"
  touch "$deps/BUNDLE.txt"
fi
say "dependencies from $(head -1 "$deps/BUNDLE.txt")"

# --- build: first what the GPU parts need, the rest before the test suite ---
started=$SECONDS
build=$dir/build
generator=()
command -v ninja >/dev/null && [[ ! -f $build/Makefile ]] && generator=(-G Ninja)
if ! cmake -S "$source_dir" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DTorch_DIR="$torch_dir" \
     -DCMAKE_PREFIX_PATH="$deps/usr" -DCMAKE_LIBRARY_ARCHITECTURE=x86_64-linux-gnu \
     -DPython3_EXECUTABLE="$python" -DBATON_NCCL=ON > "$dir/configure.log" 2>&1; then
  tail -30 "$dir/configure.log"
  die "configure failed (log: $dir/configure.log)"
fi
build_targets() {  # build_targets <log> [targets...]: all targets when none are named
  local log=$1; shift
  local targets=()
  (($# == 0)) || targets=(--target "$@")
  if ! cmake --build "$build" -j"$jobs" "${targets[@]}" >> "$log" 2>&1; then
    grep -m20 -B2 -A6 'error' "$log"
    die "build failed (log: $log)"
  fi
}
say "building what the GPU parts need with $jobs jobs (log: $dir/build.log)"
build_targets "$dir/build.log" baton_cli ema bench_ema distributed_tests
result build ok "part=cli,ema,bench_ema,distributed_tests seconds=$((SECONDS - started)) torch=$torch_version cuda=$torch_cuda"
baton=$build/bin/baton
export PATH=$(dirname "$python"):$PATH  # this PyTorch's torchrun for the distributed tests

# --- the GPU parts' run: the convnet on synthetic data with Adam and the EMA, evaluated both ways ---
convnet_config() {  # convnet_config <device> <precision> [more TOML tables]
  cat <<EOF
[run]
name = "convnet"
seed = 1

[data]
name = "synthetic"
batch_size = 64
train_size = 2048
eval_size = 512

[model]
name = "convnet"

[optimizer]
name = "adam"
lr = 1e-3

[trainer]
max_duration = "2ep"
eval_interval = "1ep"
device = "$1"
precision = "$2"
progress = false

${3:-}

[[plugins]]
name = "ema"
half_life = "16ba"
eval = "both"
EOF
}

# --- a short convnet run with the EMA under a mixed precision ---
check_amp() {  # check_amp <precision>
  local precision=$1 run=$dir/convnet-$1 started=$SECONDS metrics
  if [[ $precision == amp_fp16 && $device != cuda* ]]; then
    result "$precision" skipped "amp_fp16 needs a CUDA device"
    return
  fi
  rm -rf "$run" && mkdir -p "$run"
  convnet_config "$device" "$precision" > "$run/run.toml"
  if (cd "$run" && "$baton" train run.toml) > "$run/train.log" 2>&1; then
    metrics=$("$python" - "$run" <<'EOF'
import json, pathlib, sys
lines = [json.loads(l) for p in pathlib.Path(sys.argv[1]).rglob("metrics.jsonl") for l in open(p)]
last = {}
for line in lines:
    last.update({k: v for k, v in line.items() if k.startswith("eval") and isinstance(v, (int, float))})
print(" ".join(f"{k}={v:.4g}" for k, v in sorted(last.items()) if "accuracy" in k or "loss" in k))
EOF
)
    result "$precision" ok "device=$device seconds=$((SECONDS - started)) $metrics"
  else
    tail -15 "$run/train.log"
    result "$precision" fail "device=$device (log: $run/train.log)"
  fi
}

# --- a one-rank NCCL process group ---
check_nccl() {
  local out
  if [[ $device != cuda* ]]; then
    result nccl skipped "no CUDA device"
    return
  fi
  out=$("$build/bin/distributed_tests" --no-intro=true -tc='a one-rank NCCL group*' -s 2>&1)
  if [[ $? -eq 0 && $out == *"allreduce and broadcast done"* ]]; then
    result nccl ok "one rank on cuda:0: allreduce and broadcast"
  else
    echo "$out" | tail -20
    result nccl fail "one-rank NCCL group"
  fi
}

# --- a sharded run of every mode on the device: two ranks over Gloo on one GPU (NCCL refuses two ranks on one) ---
check_sharding() {
  local root=$dir/sharding started=$SECONDS mode line summary="" begun
  if [[ $device != cuda* ]]; then
    result sharding skipped "no CUDA device"
    return
  fi
  rm -rf "$root" && mkdir -p "$root"
  convnet_config cuda:0 fp32 '[checkpoint]
save_interval = "1ep"

[distributed]
backend = "gloo"' > "$root/run.toml"
  for mode in none zero1 zero2 zero3; do
    mkdir -p "$root/$mode"
    begun=$SECONDS
    if ! (cd "$root/$mode" && "$baton" launch --nproc 2 train ../run.toml --set "distributed.sharding=$mode") \
         > "$root/$mode/train.log" 2>&1; then
      tail -15 "$root/$mode/train.log"
      result sharding fail "mode=$mode did not train (log: $root/$mode/train.log)"
      return
    fi
    summary+=" ${mode}_seconds=$((SECONDS - begun))"
  done
  # Every mode is the same optimisation: the EMA's and the raw weights' evaluations agree across modes up to the
  # device's order of reduction (cuDNN, the sums over ranks), and the sharded runs wrote shard files.
  line=$("$python" - "$root" <<'EOF'
import json, pathlib, sys
root = pathlib.Path(sys.argv[1])
last = {}
for mode in ("none", "zero1", "zero2", "zero3"):
    values = {}
    for path in (root / mode).rglob("metrics.jsonl"):
        for text in open(path):
            record = json.loads(text)
            values.update({k: v for k, v in record.items() if k.startswith("eval") and "loss" in k})
    last[mode] = values
worst = 0.0
for mode in ("zero1", "zero2", "zero3"):
    for key, a in last["none"].items():
        b = last[mode].get(key)
        if b is None:
            print(f"{mode} logged no {key}")
            sys.exit(1)
        worst = max(worst, abs(a - b) / max(abs(a), 1e-12))
shards = sum(1 for m in ("zero1", "zero2", "zero3") for _ in (root / m).rglob("model-shard-*.safetensors"))
print(" ".join(f"{k}={v:.5g}" for k, v in sorted(last["none"].items())), f"worst_rel_diff={worst:.2e}",
      f"shard_files={shards}")
sys.exit(0 if last["none"] and worst <= 1e-3 and shards > 0 else 1)
EOF
)
  if (($? == 0)); then
    result sharding ok "device=$device ranks=2 backend=gloo $line$summary seconds=$((SECONDS - started))"
  else
    result sharding fail "modes disagree or wrote no shard files: $line$summary (runs: $root)"
  fi
}

# --- EMA update bandwidth ---
check_bench_ema() {
  local out status line
  out=$("$build/bin/bench_ema" --device "$device" 2>&1)
  status=$?
  echo "$out" | grep -v '^RESULT'
  line=$(echo "$out" | grep '^RESULT' | tail -1)
  if ((status == 0)) && [[ -n $line ]]; then
    result bench_ema ok "${line#RESULT }"
  else
    result bench_ema fail "exit $status"
  fi
}

# --- the diffusion example on the device ---
check_diffusion() {
  local data=${BATON_CHECK_DATA:-/usr/share/datasets} runs=$dir/runs started=$SECONDS out line
  local classifier=$source_dir/runs/fashion_mnist/model.safetensors
  if [[ ! -d $data/fashion-mnist ]]; then
    result diffusion skipped "no $data/fashion-mnist (BATON_CHECK_DATA)"
    return
  fi
  build_targets "$dir/build.log" diffusion
  if [[ ! -f $classifier ]]; then
    classifier=$runs/fashion_mnist/model.safetensors
    say "training the feature classifier on $device (configs/fashion_mnist.toml)"
    if ! "$baton" train configs/fashion_mnist.toml --set "run.dir=$runs" --set "data.path=$data/fashion-mnist" \
         --set "trainer.device=$device" --set trainer.progress=false > "$dir/classifier.log" 2>&1; then
      tail -15 "$dir/classifier.log"
      result diffusion fail "the feature classifier did not train (log: $dir/classifier.log)"
      return
    fi
  fi
  local extra=()
  eval "extra=(${BATON_CHECK_DIFFUSION:-})"  # shell words, so a TOML value with spaces can be quoted
  out=$(BATON=$baton BATON_RUNS=$runs BATON_CLASSIFIER=$classifier bench/diffusion_bench.sh \
        --set "data.path=$data/fashion-mnist" --set "trainer.device=$device" "${extra[@]}" 2>&1)
  local status=$?
  echo "$out" | grep -E '^batch |eval(_raw)?: fd|trained to' | tail -40
  line=$(echo "$out" | grep '^RESULT' | tail -1)
  if ((status == 0)) && [[ -n $line ]]; then
    result diffusion ok "device=$device seconds=$((SECONDS - started)) ${line#RESULT }"
  else
    echo "$out" | tail -20
    result diffusion fail "exit $status (run: $runs/fashion_mnist_ddpm)"
  fi
}

# --- the training step as one CUDA graph: the same run recorded and not, and recorded across a resume ---
# Runs of the convnet (Adam, the EMA, 2 epochs of 32 batches of 64, a checkpoint each epoch) from the same seed:
# trainer.cuda_graphs false, true, and true stopped after epoch 1 and resumed (--resume auto) to epoch 2. The graphs
# runs must say they recorded the step; the recorded run's checkpoints (model, optimizer state, EMA) and final
# weights must equal the plain run's within 1e-4 relative (the recorded optimizer step rounds like LibTorch's within
# one rounding; cuDNN may pick other algorithms under a recording), and the resumed run's the uninterrupted recorded
# run's; the training time of the first two, from speed_monitor.
graph_run() {  # graph_run <name> <true|false> [more baton arguments]: trains in $dir/graphs-<name>
  local run=$dir/graphs-$1 graphs=$2
  shift 2
  mkdir -p "$run"
  [[ -f $run/run.toml ]] ||
    convnet_config "$device" amp_bf16 $'[[plugins]]\nname = "speed_monitor"' > "$run/run.toml"
  (cd "$run" && "$baton" train run.toml --set "trainer.cuda_graphs=$graphs" "$@") >> "$run/train.log" 2>&1
}
graph_seconds() {  # graph_seconds <name>: the run's wall_clock/train
  "$python" - "$dir/graphs-$1" <<'EOF'
import json, pathlib, sys
last = {}
for p in pathlib.Path(sys.argv[1]).rglob("metrics.jsonl"):
    for line in open(p):
        last.update(json.loads(line))
print(last.get("wall_clock/train", 0))
EOF
}
graph_compare() {  # graph_compare <run a> <run b>: "files=N <kind>_rel=... <1 when all within 1e-4, else 0>"
  "$python" - "$dir/graphs-$1" "$dir/graphs-$2" <<'EOF'
import json, pathlib, struct, sys, torch
DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64,
          "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8}
def read(path):  # safetensors: an 8-byte header length, a JSON header, the raw data
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] not in DTYPES:
            continue
        a, b = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[8 + n + a:8 + n + b]), dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
    return out
a_dir, b_dir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
worst, files = {}, 0
for kind in ("model", "state", "ema"):
    for path in sorted(a_dir.rglob(f"{kind}.safetensors")):
        other = b_dir / path.relative_to(a_dir)
        if not other.exists():
            continue
        a, b = read(path), read(other)
        files += 1
        for k in a:
            x, y = a[k].double(), b[k].double()
            rel = ((x - y).abs().max() / (x.abs().max() + 1e-12)).item() if x.numel() else 0.0
            worst[kind] = max(worst.get(kind, 0.0), rel)
ok = files >= 3 and max(worst.values()) <= 1e-4
print(f"files={files}", " ".join(f"{k}_rel={v:.3g}" for k, v in worst.items()), int(ok))
EOF
}
check_graphs() {
  local plain graphs started=$SECONDS compare resumed ratio name
  if [[ $device != cuda* ]]; then
    result graphs skipped "CUDA graphs need a CUDA device"
    return
  fi
  build_targets "$dir/build.log" speed_monitor
  rm -rf "$dir"/graphs-*
  graph_run plain false || { tail -15 "$dir/graphs-plain/train.log"; result graphs fail "the plain run failed"; return; }
  graph_run graphs true || { tail -15 "$dir/graphs-graphs/train.log"; result graphs fail "the graphs run failed"; return; }
  { graph_run resumed true --set trainer.max_duration=1ep &&
    graph_run resumed true --resume auto --set trainer.max_duration=2ep; } ||
    { tail -15 "$dir/graphs-resumed/train.log"; result graphs fail "the resumed graphs run failed"; return; }
  for name in graphs resumed; do
    if ! grep -q "recorded the training step" "$dir/graphs-$name/train.log"; then
      grep "cuda_graphs" "$dir/graphs-$name/train.log" | tail -5
      result graphs fail "the $name run did not record its step (log: $dir/graphs-$name/train.log)"
      return
    fi
  done
  compare=$(graph_compare plain graphs) || { result graphs fail "could not compare the runs' weights"; return; }
  resumed=$(graph_compare graphs resumed) || { result graphs fail "could not compare the resumed run's weights"; return; }
  plain=$(graph_seconds plain)
  graphs=$(graph_seconds graphs)
  ratio=$(awk -v g="$graphs" -v p="$plain" 'BEGIN {printf "%.4f", (p > 0) ? g / p : 0}')
  if [[ ${compare##* } == 1 && ${resumed##* } == 1 ]]; then
    result graphs ok "device=$device seconds=$((SECONDS - started)) plain_train_s=$plain graphs_train_s=$graphs graphs_vs_plain=$ratio vs_plain: ${compare% *} resumed_vs_graphs: ${resumed% *}"
  else
    result graphs fail "device=$device the recorded runs differ: vs_plain: ${compare% *} resumed_vs_graphs: ${resumed% *} (runs: $dir/graphs-*)"
  fi
}

# --- speed: the main job and the diffusion job on the GPU, baton (plain and recorded), a PyTorch loop, Composer ---
# The same torch for all: baton built against it, bench/python_*_job.py and bench/composer_*_job.py on its python
# (Composer when it imports there: this machine reaches no package registry). Whole process wall times and batches
# per second over them. The main job (3752 batches, evaluation and a checkpoint each epoch) under amp_bf16, with
# each run's final EMA accuracy. The diffusion job's training: BATON_CHECK_SPEED_BATCHES batches of 32 (default
# 2000: a GPU machine is lent for minutes), fp32 as its config, checkpoints every 1000 batches, evaluation off in
# all four (its Frechet distance is part `diffusion`), with the mean loss of the last 100 batches. The diffusion
# model draws its timesteps and noise on the host (a resumed run draws what the uninterrupted one did), which a
# recording cannot hold: its graphs run must fall back to plain steps with a warning and still finish.
# RESULT speed ... graphs_vs_plain=<graphs / plain> baton_vs_python_gpu=<baton / the loop>
# baton_vs_composer_gpu=<baton / Composer> (the main job), and the same with a diffusion_ prefix.
check_speed() {
  local data=${BATON_CHECK_DATA:-/usr/share/datasets} started=$SECONDS runs=$dir/speed line
  local batches=${BATON_CHECK_SPEED_BATCHES:-2000}
  if [[ $device != cuda* ]]; then
    result speed skipped "the GPU speed part needs a CUDA device"
    return
  fi
  if [[ ! -d $data/fashion-mnist ]]; then
    result speed skipped "no $data/fashion-mnist (BATON_CHECK_DATA)"
    return
  fi
  build_targets "$dir/build.log" channels_last diffusion
  rm -rf "$runs" && mkdir -p "$runs"
  local -A seconds=() quality=()
  elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}'; }
  # speed_run <name> <log> <command...>: times a whole process; false when it failed.
  speed_run() {
    local name=$1 log=$2 t0
    shift 2
    t0=$(date +%s.%N)
    if "$@" > "$log" 2>&1; then
      seconds[$name]=$(elapsed "$t0")
    else
      tail -15 "$log"
      say "speed: $name failed (log: $log)"
      return 1
    fi
  }
  local common=(--quiet --set "run.dir=$runs" --set "data.path=$data/fashion-mnist" --set "trainer.device=$device"
                --set trainer.progress=false)
  local name graphs
  for name in plain graphs; do
    graphs=$([[ $name == graphs ]] && echo true || echo false)
    speed_run "$name" "$runs/$name.log" "$baton" train configs/fashion_mnist.toml "${common[@]}" \
      --set "run.name=$name" --set trainer.precision=amp_bf16 --set "trainer.cuda_graphs=$graphs" ||
      { result speed fail "baton ($name) failed (log: $runs/$name.log)"; return; }
    quality[$name]=$(grep -o '"eval/accuracy": *[0-9.]*' "$runs/$name/metrics.jsonl" | tail -1 | grep -o '[0-9.]*$')
    speed_run "diffusion_$name" "$runs/diffusion_$name.log" "$baton" train configs/fashion_mnist_ddpm.toml \
      "${common[@]}" --set "run.name=diffusion_$name" --set "trainer.cuda_graphs=$graphs" \
      --set "trainer.max_duration=${batches}ba" \
      --set trainer.eval_interval=0ba --set trainer.log_interval=50ba --set data.metrics=[] \
      --set plugins.ema.select= --set plugins.ema.posthoc= ||
      { result speed fail "baton (diffusion_$name) failed (log: $runs/diffusion_$name.log)"; return; }
    quality[diffusion_$name]=$(grep -o '"train/loss": *[0-9.]*' "$runs/diffusion_$name/metrics.jsonl" | tail -2 |
      grep -o '[0-9.]*$' | awk '{s += $1} END {if (NR) printf "%.4f", s / NR}')
  done
  local diffusion_graphs=fell_back
  grep -q 'recorded the training step' "$runs/diffusion_graphs.log" && diffusion_graphs=recorded
  if speed_run python "$runs/python.log" "$python" bench/python_main_job.py --data "$data/fashion-mnist" \
       --device cuda --out "$runs/python"; then
    quality[python]=$(tail -1 "$runs/python.log" | grep -o 'ema_accuracy=[0-9.]*' | cut -d= -f2)
  fi
  if speed_run diffusion_python "$runs/diffusion_python.log" "$python" bench/python_diffusion_job.py \
       --data "$data/fashion-mnist" --device cuda --batches "$batches" --out "$runs/diffusion_python"; then
    quality[diffusion_python]=$(tail -1 "$runs/diffusion_python.log" | grep -o 'train_loss=[0-9.]*' | cut -d= -f2)
  fi
  if "$python" -c 'import composer' 2>/dev/null; then
    if speed_run composer "$runs/composer.log" "$python" bench/composer_main_job.py --data "$data/fashion-mnist" \
         --device gpu --precision amp_bf16 --out "$runs/composer"; then
      quality[composer]=$(tail -1 "$runs/composer.log" | grep -o 'ema_accuracy=[0-9.]*' | cut -d= -f2)
    fi
    speed_run diffusion_composer "$runs/diffusion_composer.log" "$python" bench/composer_diffusion_job.py \
      --data "$data/fashion-mnist" --device gpu --batches "$batches" --out "$runs/diffusion_composer" || true
  fi
  ratio() { [[ -n ${seconds[$1]:-} && -n ${seconds[$2]:-} ]] &&
    awk -v a="${seconds[$1]}" -v b="${seconds[$2]}" 'BEGIN {printf "%.4f", a / b}' || echo none; }
  per_second() { [[ -n ${seconds[$1]:-} ]] && awk -v n="$2" -v s="${seconds[$1]}" 'BEGIN {printf "%.1f", n / s}' || echo none; }
  line="device=$device seconds=$((SECONDS - started))"
  for name in plain graphs python composer; do
    line+=" ${name}_s=${seconds[$name]:-none} ${name}_bps=$(per_second "$name" 3752) ${name}_ema=${quality[$name]:-none}"
  done
  for name in plain graphs python composer; do
    line+=" diffusion_${name}_s=${seconds[diffusion_$name]:-none} diffusion_${name}_bps=$(per_second "diffusion_$name" "$batches")"
    line+=" diffusion_${name}_loss=${quality[diffusion_$name]:-none}"
  done
  line+=" diffusion_graphs=$diffusion_graphs"
  line+=" graphs_vs_plain=$(ratio graphs plain) baton_vs_python_gpu=$(ratio plain python)"
  line+=" baton_vs_composer_gpu=$(ratio plain composer) diffusion_graphs_vs_plain=$(ratio diffusion_graphs diffusion_plain)"
  line+=" diffusion_baton_vs_python_gpu=$(ratio diffusion_plain diffusion_python)"
  line+=" diffusion_baton_vs_composer_gpu=$(ratio diffusion_plain diffusion_composer)"
  result speed ok "$line"
}

# --- the test suite ---
# A few test cases compare with Debian's reference tools (its dataset packages, scikit-learn's data files, numpy and
# scipy in /usr/bin/python3). A machine without them skips those cases (BATON_TEST_WITHOUT_DEBIAN=1), and says so.
check_tests() {
  local without_debian=0 started status summary test_jobs=$(((jobs + 1) / 2))
  if [[ ! -d /usr/share/datasets/fashion-mnist || ! -d /usr/lib/python3/dist-packages/sklearn/datasets/data ]] ||
    ! /usr/bin/python3 -c 'import numpy, scipy' 2>/dev/null; then
    without_debian=1
    say "Debian's datasets, scikit-learn data or numpy/scipy are missing: the test cases comparing with them are skipped"
  fi
  started=$SECONDS
  say "building the rest (log: $dir/build.log)"
  build_targets "$dir/build.log"
  result build ok "part=all seconds=$((SECONDS - started))"
  started=$SECONDS
  BATON_TEST_WITHOUT_DEBIAN=$without_debian BATON_TEST_DEVICE=$device ctest --test-dir "$build" -j"$test_jobs" --output-on-failure --timeout 900 > "$dir/ctest.log" 2>&1
  status=$?
  summary=$(grep -E 'tests passed|tests failed' "$dir/ctest.log" | tail -1)
  if ((status == 0)); then
    result tests ok "device=$device jobs=$test_jobs seconds=$((SECONDS - started)) without_debian=$without_debian $summary"
  else
    grep -A30 'The following tests FAILED' "$dir/ctest.log"
    result tests fail "device=$device $summary (log: $dir/ctest.log)"
  fi
}

for part in $parts; do
  case $part in
    amp_bf16 | amp_fp16) check_amp "$part" ;;
    nccl) check_nccl ;;
    sharding) check_sharding ;;
    bench_ema) check_bench_ema ;;
    diffusion) check_diffusion ;;
    graphs) check_graphs ;;
    speed) check_speed ;;
    tests) check_tests ;;
    *) result "$part" fail "no such part (BATON_CHECK_PARTS: amp_bf16 amp_fp16 nccl sharding bench_ema graphs speed diffusion tests)" ;;
  esac
done
finish
