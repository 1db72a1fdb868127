#!/usr/bin/env python3
"""TorchScript models, the round trip a user makes: Python scripts (and traces) a model and saves it with
torch.jit.save; `baton train` trains it from `[model] torchscript = "..."` with the EMA plugin; Python loads baton's
model.safetensors and ema.safetensors back into a fresh instance of its own class with load_state_dict(strict=True)
and checks its outputs against `baton predict` on the same rows, and the final accuracy against baton's evaluation.
A resumed run must end bitwise where the uninterrupted one does, and two data-parallel ranks must train it too.

Needs Python's torch of LibTorch's major.minor (Debian's python3-torch beside libtorch-dev): TorchScript archives
are read by the LibTorch that matches the writer. Run by CTest; exit 77 (skipped) when that torch is missing, 1 on
any failed check."""
import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))
from checks import check, finish, run  # noqa: E402

try:
    import torch
    from torch import nn
except ImportError:
    print("SKIPPED: this Python has no torch (install python3-torch)")
    sys.exit(77)

# --- the models, as a user writes them ---------------------------------------------------------------------------

FEATURES, CLASSES = 6, 3


class Net(nn.Module):
    """Nested names (body.0.weight), a batch norm (buffers, num_batches_tracked) and dropout (train/eval mode)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(FEATURES, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.1),
                                  nn.Linear(32, 16), nn.ReLU())
        self.head = nn.Linear(16, CLASSES)

    def forward(self, x):
        return self.head(self.body(x))


class Plain(nn.Module):
    """For tracing: no mode-dependent layer, so the traced graph is the model in either mode."""

    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(FEATURES, 16)
        self.out = nn.Linear(16, CLASSES)

    def forward(self, x):
        return self.out(torch.tanh(self.hidden(x)))


class TwoInputs(nn.Module):
    """A forward of two tensors returning a tuple: class scores and the hidden features."""

    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(FEATURES + 1, 16)
        self.out = nn.Linear(16, CLASSES)

    def forward(self, x, t):
        h = torch.tanh(self.hidden(torch.cat([x, t], 1)))
        return self.out(h), h


# --- safetensors, read and written with the standard library and torch ------------------------------------------

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "F16": torch.float16,
          "BF16": torch.bfloat16, "I32": torch.int32, "U8": torch.uint8}


def read_safetensors(path):
    blob = Path(path).read_bytes()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    data = blob[8 + n:]
    out = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        raw = bytearray(data[begin:end])
        tensor = torch.frombuffer(raw, dtype=DTYPES[entry["dtype"]]) if raw else torch.empty(0, dtype=DTYPES[entry["dtype"]])
        out[name] = tensor.reshape(entry["shape"]).clone()
    return out


def write_safetensors(path, tensors):
    """The format's header (JSON: dtype, shape, offsets), then each tensor's bytes in order."""
    names = {torch.float32: "F32", torch.int64: "I64"}
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        # The bytes through torch alone (no numpy: a bare torch wheel has none); the tensors here are small.
        raw = bytes(t.contiguous().view(-1).view(torch.uint8).tolist())
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    Path(path).write_bytes(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def loaded(cls, path):
    """A fresh instance of `cls` with the file's tensors, by name, strictly: a missing or extra name fails."""
    model = cls()
    tensors = read_safetensors(path)
    model.load_state_dict(tensors, strict=True)
    model.eval()
    return model, tensors


# --- the data --------------------------------------------------------------------------------------------------

def write_data(folder):
    """Three Gaussian classes in 6 dimensions, overlapping enough that accuracy is neither 0 nor 1."""
    g = torch.Generator().manual_seed(7)
    centers = torch.randn(CLASSES, FEATURES, generator=g) * 1.5
    labels = torch.randint(0, CLASSES, (600,), generator=g)
    inputs = centers[labels] + torch.randn(600, FEATURES, generator=g)
    lines = [",".join([f"x{i}" for i in range(FEATURES)] + ["label"])]
    for row, label in zip(inputs.tolist(), labels.tolist()):
        lines.append(",".join(f"{v:.6f}" for v in row) + f",{label}")
    (folder / "blobs.csv").write_text("\n".join(lines) + "\n")
    # The values as the file has them (6 decimals), as baton reads them.
    table = [[float(c) for c in line.split(",")] for line in lines[1:]]
    rows = torch.tensor(table, dtype=torch.float64)
    return rows[:, :FEATURES].float(), rows[:, FEATURES].long()


CONFIG = """[run]
name = "{name}"
dir = "runs"
seed = 5

[data]
name = "csv"
path = "blobs.csv"
target = "label"
task = "classification"
eval_fraction = 0
standardize = false
batch_size = 50
eval_batch_size = 128

[model]
torchscript = "{model}"

[optimizer]
name = "sgd"
lr = 0.05
momentum = 0.9

[trainer]
precision = "fp32"
max_duration = "{epochs}ep"
eval_interval = "1ep"
progress = false

[checkpoint]
save_interval = "1ep"

[[plugins]]
name = "ema"
half_life = "10ba"
"""


def write_config(folder, name, model, epochs=3):
    path = folder / f"{name}.toml"
    path.write_text(CONFIG.format(name=name, model=model, epochs=epochs))
    return path.name


def final_accuracy(run_dir):
    lines = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines() if l.strip()]
    values = [l["eval/accuracy"] for l in lines if "eval/accuracy" in l]
    return values[-1] if values else None


def check_round_trip(baton, folder, inputs, labels, cls, model_file, name):
    """Trains the saved model, then checks the exported weights in Python against baton's own outputs."""
    initial = {k: v.clone() for k, v in torch.jit.load(str(folder / model_file)).state_dict().items()}
    run(baton + ["train", write_config(folder, name, model_file)], folder)
    run_dir = folder / "runs" / name
    raw_model, raw = loaded(cls, run_dir / "model.safetensors")
    ema_model, ema = loaded(cls, run_dir / "ema.safetensors")
    check(set(raw) == set(initial), f"{name}: model.safetensors names {sorted(raw)} differ from Python's {sorted(initial)}")
    moved = [k for k in initial if initial[k].is_floating_point() and not torch.equal(initial[k], raw[k])]
    check("head.weight" in moved or "out.weight" in moved,
          f"{name}: training did not change the output layer's weights (changed: {moved})")
    check(any(not torch.equal(raw[k], ema[k]) for k in raw if raw[k].is_floating_point()),
          f"{name}: the EMA weights equal the raw ones")

    checkpoint = run_dir / "checkpoints/ep3"
    check(checkpoint.is_dir(), f"{name}: no checkpoint {checkpoint}")
    for weights, model in (("raw", raw_model), ("ema", ema_model)):
        out = folder / f"{name}_{weights}.safetensors"
        run(baton + ["predict", f"{name}.toml", "--checkpoint", checkpoint, "--weights", weights, "-o", out], folder)
        predicted = read_safetensors(out)
        check(torch.equal(predicted["targets"], labels), f"{name}: predict's rows are not the file's rows in order")
        with torch.no_grad():
            expected = model(inputs)
        error = (predicted["outputs"] - expected).abs().max().item()
        check(error < 1e-4, f"{name}/{weights}: baton's outputs differ from Python's with the exported weights "
                            f"by up to {error}")
        print(f"  {name}/{weights}: Python's outputs with the exported weights match baton predict to {error:.2e}")

    # Evaluation swaps the EMA in: the last eval/accuracy is the EMA model's accuracy on these rows.
    with torch.no_grad():
        python_accuracy = (ema_model(inputs).argmax(1) == labels).float().mean().item()
    accuracy = final_accuracy(run_dir)
    check(accuracy is not None and abs(accuracy - python_accuracy) < 1e-6,
          f"{name}: baton's final eval/accuracy {accuracy} differs from Python's {python_accuracy} (EMA weights)")
    check(python_accuracy > 0.6, f"{name}: accuracy {python_accuracy} after training; the model did not learn")
    print(f"  {name}: accuracy {python_accuracy:.4f} in Python and {accuracy} in baton")
    return run_dir


def check_resume(baton, folder, reference):
    """Two epochs, then a resume to three, ends bitwise where three uninterrupted epochs end."""
    run(baton + ["train", write_config(folder, "resumed", "scripted.pt", epochs=2)], folder)
    run(baton + ["train", "resumed.toml", "--resume", "auto", "--set", "trainer.max_duration=3ep"], folder)
    a = read_safetensors(reference / "model.safetensors")
    b = read_safetensors(folder / "runs/resumed/model.safetensors")
    different = [k for k in a if not torch.equal(a[k], b[k])]
    check(not different, f"resumed: these tensors differ from the uninterrupted run's: {different}")
    a = read_safetensors(reference / "ema.safetensors")
    b = read_safetensors(folder / "runs/resumed/ema.safetensors")
    different = [k for k in a if not torch.equal(a[k], b[k])]
    check(not different, f"resumed: these EMA tensors differ from the uninterrupted run's: {different}")


def check_data_parallel(baton, folder):
    """Two Gloo ranks train the scripted model; the result loads into Python and has learnt."""
    run(baton + ["launch", "--nproc", "2", "train", write_config(folder, "ranks", "scripted.pt", epochs=2)], folder)
    model, _ = loaded(Net, folder / "runs/ranks/model.safetensors")
    accuracy = final_accuracy(folder / "runs/ranks")
    check(accuracy is not None and accuracy > 0.6, f"data-parallel: final accuracy {accuracy}")


TWO_INPUTS_CONFIG = """[run]
name = "two_inputs"
dir = "runs"
seed = 5

[data]
name = "safetensors"
path = "two_inputs.safetensors"
inputs = ""
targets = "label"
fields = ["x", "t"]
eval_fraction = 0
batch_size = 50
eval_batch_size = 128

[model]
torchscript = "two_inputs.pt"
inputs = ["x", "t"]
outputs = ["logits", "features"]

[optimizer]
name = "sgd"
lr = 0.05
momentum = 0.9

[trainer]
precision = "fp32"
max_duration = "3ep"
progress = false

[[plugins]]
name = "ema"
half_life = "10ba"
eval = "both"
"""


def check_two_inputs(baton, folder, inputs, labels):
    """forward(x, t) -> (logits, features), fed from named fields of a safetensors file: baton trains it, and both
    outputs of `baton predict` equal Python's with the exported EMA weights."""
    t = (labels.float() - 1).unsqueeze(1) * 0.5  # a second input that carries part of the class
    write_safetensors(folder / "two_inputs.safetensors", {"x": inputs, "t": t, "label": labels})
    torch.manual_seed(4)
    torch.jit.save(torch.jit.script(TwoInputs()), str(folder / "two_inputs.pt"))
    (folder / "two_inputs.toml").write_text(TWO_INPUTS_CONFIG)
    run(baton + ["train", "two_inputs.toml"], folder)
    run_dir = folder / "runs/two_inputs"
    model, _ = loaded(TwoInputs, run_dir / "ema.safetensors")
    out = folder / "two_inputs_ema.safetensors"
    run(baton + ["predict", "two_inputs.toml", "--checkpoint", run_dir / "checkpoints/ep3", "--weights", "ema",
                 "-o", out], folder)
    predicted = read_safetensors(out)
    check(set(predicted) >= {"logits", "features", "predictions", "targets"},
          f"two inputs: predict wrote {sorted(predicted)}, expected both named outputs")
    with torch.no_grad():
        logits, features = model(inputs, t)
    error = max((predicted["logits"] - logits).abs().max().item(), (predicted["features"] - features).abs().max().item())
    check(error < 1e-4, f"two inputs: baton's outputs differ from Python's with the exported EMA weights by {error}")
    accuracy = final_accuracy(run_dir)
    check(accuracy is not None and accuracy > 0.6, f"two inputs: final accuracy {accuracy}")
    print(f"  two inputs: both outputs match baton predict to {error:.2e}; accuracy {accuracy}")


def check_errors(baton, folder):
    (folder / "not_a_model.pt").write_text("hello")
    proc = run(baton + ["check", write_config(folder, "bad", "not_a_model.pt")], folder, expect=2)
    check("model.torchscript" in proc.stderr and "not_a_model.pt" in proc.stderr and "not a TorchScript archive"
          in proc.stderr, f"a file that is no TorchScript archive: {proc.stderr.strip()!r}")
    proc = run(baton + ["check", write_config(folder, "missing", "missing.pt")], folder, expect=2)
    check("model.torchscript" in proc.stderr and "missing.pt: cannot open: No such file or directory" in proc.stderr,
          f"a missing file: {proc.stderr.strip()!r}")


def check_traced_mode(baton, folder):
    """A trace records dropout and batch norm in the mode it ran in: baton says which at load, once; a scripted
    model and a trace without such layers get no such line."""
    for mode in ("train", "eval"):
        net = Net()
        net.train(mode == "train")
        torch.jit.save(torch.jit.trace(net, torch.zeros(4, FEATURES)), str(folder / f"traced_{mode}.pt"))
        proc = run(baton + ["check", write_config(folder, f"traced_{mode}", f"traced_{mode}.pt")], folder)
        lines = [line for line in proc.stdout.splitlines() if "was traced in" in line]
        check(len(lines) == 1 and f"traced in {mode} mode" in lines[0],
              f"a model traced in {mode} mode: {proc.stdout.strip()!r}")
    for model_file in ("scripted.pt", "traced.pt"):
        proc = run(baton + ["check", write_config(folder, "mode_" + model_file[:-3], model_file)], folder)
        check("was traced in" not in proc.stdout, f"{model_file}: no note expected, got {proc.stdout.strip()!r}")
    print("  traced mode: named once for traces in train and eval mode; none for scripted or mode-free models")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--baton", required=True)
    parser.add_argument("--build-dir", required=True, type=Path)
    parser.add_argument("--torch-version", required=True, help="LibTorch's version, major.minor")
    args = parser.parse_args()
    started = time.monotonic()
    python_torch = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    if python_torch != args.torch_version:
        print(f"SKIPPED: Python's torch is {torch.__version__}, LibTorch {args.torch_version}: their TorchScript "
              "archives need not be compatible")
        sys.exit(77)

    folder = args.build_dir.resolve() / "test-scratch/torchscript"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    inputs, labels = write_data(folder)
    torch.manual_seed(3)
    torch.jit.save(torch.jit.script(Net()), str(folder / "scripted.pt"))
    torch.jit.save(torch.jit.trace(Plain(), torch.zeros(2, FEATURES)), str(folder / "traced.pt"))

    baton = [args.baton]
    reference = check_round_trip(baton, folder, inputs, labels, Net, "scripted.pt", "scripted")
    check_round_trip(baton, folder, inputs, labels, Plain, "traced.pt", "traced")
    check_resume(baton, folder, reference)
    check_data_parallel(baton, folder)
    check_two_inputs(baton, folder, inputs, labels)
    check_traced_mode(baton, folder)
    check_errors(baton, folder)
    return finish("torchscript", started)


if __name__ == "__main__":
    sys.exit(main())
