#!/usr/bin/env python3
"""A sharded baton checkpoint read by PyTorch's distributed checkpoint, and the reverse, as a user moving between the
two would: `baton launch --nproc 2` trains under zero2 and saves; Python's torch.distributed.checkpoint.load with its
safetensors reader (HuggingFaceStorageReader) fills a state dict from the checkpoint's model/ folder at 1 rank (plain
tensors) and at 2 ranks (DTensors sharded along dim 0 over a Gloo device mesh), and its consolidation function writes
whole tensors: each equal bit for bit to baton's own export of the same weights (model.safetensors). Then Python saves
weights of its own from 2 ranks with the safetensors writer (save_distributed), and `baton train` starts from that
folder (model.init): one step at lr 1e-30 leaves every weight as it was read (an update below half an ulp of weights
in [1, 2)), so the run's model.safetensors must equal Python's weights bit for bit.

Needs a torch with torch.distributed.checkpoint's safetensors storage (2.9 or later) and the safetensors package:
the PyTorch wheel platform (scripts/test-wheel.sh). Run by CTest; exit 77 (skipped) without them, 1 on a failed
check."""
import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))
from checks import check, finish, require, run  # noqa: E402

try:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import torch.multiprocessing as mp
    from safetensors.torch import load_file, save_file  # noqa: F401  (the reader needs the package)
    from torch.distributed.checkpoint import HuggingFaceStorageReader, HuggingFaceStorageWriter
    from torch.distributed.checkpoint._consolidate_hf_safetensors import consolidate_safetensors_files
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
except ImportError as e:
    print(f"SKIPPED: no torch with distributed checkpoint's safetensors storage and the safetensors package ({e})")
    sys.exit(77)

CONFIG = """[run]
name = "{name}"
dir = "runs"
seed = 3
[data]
name = "synthetic"
train_size = 512
eval_size = 100
batch_size = {batch}
[model]
name = "mlp"
widths = [48]
[optimizer]
name = "{optimizer}"
lr = {lr}
[trainer]
precision = "fp32"
max_duration = "{duration}"
threads = 1
progress = false
[checkpoint]
save_interval = "1ep"
[distributed]
timeout_seconds = 60
sharding = "{sharding}"
"""


def in_ranks(world, fn, *args):
    """Runs fn(rank, world, *args) in `world` processes joined by a Gloo process group."""
    store = tempfile.mktemp(prefix="dcp-store-")
    mp.spawn(_rank_main, args=(world, store, fn, args), nprocs=world, join=True)


def _rank_main(rank, world, store, fn, args):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        fn(rank, world, *args)
    finally:
        dist.destroy_process_group()


def load_sharded(rank, world, folder, shapes, out):
    """Loads the folder into DTensors sharded along dim 0 over the ranks; rank 0 saves the whole tensors to `out`."""
    mesh = init_device_mesh("cpu", (world,))
    state = {k: distribute_tensor(torch.zeros(s), mesh, [Shard(0)]) for k, s in shapes.items()}
    dcp.load(state, storage_reader=HuggingFaceStorageReader(folder))
    whole = {k: v.full_tensor() for k, v in state.items()}
    if rank == 0:
        save_file(whole, out)


def save_sharded(rank, world, weights_file, folder):
    """Saves the weights of `weights_file` from DTensors sharded along dim 0, each rank writing its file."""
    mesh = init_device_mesh("cpu", (world,))
    state = {k: distribute_tensor(v, mesh, [Shard(0)]) for k, v in load_file(weights_file).items()}
    dcp.save(state, storage_writer=HuggingFaceStorageWriter(folder, save_distributed=True))


def same(got, want, what):
    check(sorted(got) == sorted(want), f"{what}: tensors {sorted(got)} but baton's export has {sorted(want)}")
    for k in want:
        if k in got:
            check(got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]),
                  f"{what}: tensor {k} differs from what was written")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--baton", required=True)
    args = parser.parse_args()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="baton-dcp-"))
    print(f"torch {torch.__version__}, work folder {work}")

    # baton -> Python.
    (work / "sharded.toml").write_text(CONFIG.format(name="sharded", batch=32, optimizer="adam", lr=0.01,
                                                     duration="1ep", sharding="zero2")
                                      + '[[plugins]]\nname = "ema"\nhalf_life = "4ba"\n')
    run([args.baton, "launch", "--nproc", "2", "train", "sharded.toml"], cwd=work)
    export = load_file(str(work / "runs/sharded/model.safetensors"))
    model_dir = str(work / "runs/sharded/checkpoints/ep1/model")
    shapes = {k: v.shape for k, v in export.items()}
    print("model/ holds " + ", ".join(sorted(os.listdir(model_dir))))

    state = {k: torch.zeros(s) for k, s in shapes.items()}
    dcp.load(state, storage_reader=HuggingFaceStorageReader(model_dir), no_dist=True)
    same(state, export, "dcp.load at 1 rank")

    in_ranks(2, load_sharded, model_dir, shapes, str(work / "loaded-at-2.safetensors"))
    same(load_file(str(work / "loaded-at-2.safetensors")), export, "dcp.load at 2 ranks (DTensor, Shard(0))")

    consolidated = work / "consolidated"
    consolidated.mkdir()
    consolidate_safetensors_files(model_dir, str(consolidated), fqn_to_index_mapping={k: 1 for k in shapes})
    whole = {}
    for file in sorted(consolidated.glob("*.safetensors")):
        whole.update(load_file(str(file)))
    same(whole, export, "consolidate_safetensors_files")

    # The EMA, sharded as the run is, is checkpointed as each rank's rows in ema/, named as the model's tensors: Python
    # loads it as a model state dict. The checkpoint is the run's last, so it is the EMA baton exported at the end.
    ema_dir = str(work / "runs/sharded/checkpoints/ep1/ema")
    ema = {k: torch.zeros(s) for k, s in shapes.items()}
    dcp.load(ema, storage_reader=HuggingFaceStorageReader(ema_dir), no_dist=True)
    same(ema, load_file(str(work / "runs/sharded/ema.safetensors")), "dcp.load of the EMA's rows at 1 rank")

    # Python -> baton: weights in [1, 2), saved from 2 ranks.
    mine = {k: 1 + (torch.arange(v.numel(), dtype=torch.float32) % 97).reshape(v.shape) / 97
            for k, v in export.items()}
    save_file(mine, str(work / "mine.safetensors"))
    python_dir = work / "from-python"
    in_ranks(2, save_sharded, str(work / "mine.safetensors"), str(python_dir))
    files = sorted(p.name for p in python_dir.glob("*.safetensors"))
    print("Python wrote " + ", ".join(files))
    require(len(files) == 2, f"Python's writer wrote {files}, expected one file per rank")
    (work / "init.toml").write_text(CONFIG.format(name="init", batch=32, optimizer="sgd", lr="1e-30",
                                                  duration="1ba", sharding="none"))
    started_from = run([args.baton, "train", "init.toml", "--set", f"model.init={python_dir}"], cwd=work)
    check("2 safetensors files of a distributed checkpoint" in started_from.stdout + started_from.stderr,
          "baton's log names the folder as a distributed checkpoint's files")
    same(load_file(str(work / "runs/init/model.safetensors")), mine, "baton started from Python's files")
    status = finish("dcp_interop", started)
    if status == 0:
        shutil.rmtree(work)
    return status


if __name__ == "__main__":
    sys.exit(main())
