#!/usr/bin/env python3
"""The documentation works when copied (issue 24 §1-3).

- Every Markdown file of docs/, the README and examples/plugins/README.md has balanced code fences: an opening
  fence (```lang) is closed by a bare ``` before the next opening one, and none is open at the end. An unclosed
  fence swaps text and code for the rest of the page.
- Every ```toml block that is a `[[plugins]]` table naming a plugin (`name = ...`), or any other section a small
  synthetic config lacks (`[loss]`, `[optimizer]`, …), passes `baton check`, added to that config; a block that is a whole config (it has `[data]` and `[model]`) passes by itself. Blocks
  naming the reader's own library (`path = ...`) or files the reader brings are fragments and are not run.
- Every `baton train|check|eval|predict CONFIG ... --set k=v` line of a ```sh block whose CONFIG is a file of this
  repository passes `baton check CONFIG --set ...`; a code block of bare `--set` lines is checked against the
  nearest ```toml block above it in the same file. Where the result has an `ema` plugin, its `ema_start` must fall
  before `max_duration` when both are in epochs (otherwise the demo shows the raw weights twice: §3).
"""
import argparse
import os
import pathlib
import re
import shlex
import sys
import tempfile
import time
import tomllib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "support"))
from checks import check, finish, run  # noqa: E402

# Images (1x28x28) and a convnet, so that image algorithms (mixup, cutmix, channels_last) apply as documented; it pools
# globally, so progressive_resizing's smaller images fit it too.
BASE = """[run]
name = "docs_check"
dir = "runs"
seed = 1

[data]
name = "synthetic"
batch_size = 32
train_size = 128
eval_size = 64

[model]
name = "convnet"
widths = [8]
global_pool = true
"""
# Sections a fragment may hold and still be checked on top of BASE.
FRAGMENT_SECTIONS = {"loss", "optimizer", "scheduler", "trainer", "checkpoint", "distributed", "plugins"}


def markdown_files(source):
    files = sorted((source / "docs").glob("*.md"))
    return files + [source / "README.md", source / "examples" / "plugins" / "README.md"]


def code_blocks(path):
    """(line of the opening fence, language, text) of each fenced block, and the fence problems found."""
    blocks, problems = [], []
    opened = None
    lines = path.read_text().split("\n")
    for number, line in enumerate(lines, 1):
        if not line.startswith("```"):
            if opened:
                opened[2].append(line)
            continue
        info = line[3:].strip()
        if opened is None:
            opened = (number, info, [])
        elif info:
            problems.append(f"{path.name}:{opened[0]}: the ```{opened[1]} block is not closed before the "
                            f"```{info} at line {number}")
            opened = (number, info, [])
        else:
            blocks.append((opened[0], opened[1], "\n".join(opened[2])))
            opened = None
    if opened:
        problems.append(f"{path.name}:{opened[0]}: the ```{opened[1]} block is never closed")
    return blocks, problems


def checkable_toml(text):
    """The config text to check for a ```toml block, or None for a fragment."""
    doc = tomllib.loads(text)
    plugins = doc.get("plugins", [])
    if "data" in doc and "model" in doc:
        return None if any("path" in p for p in plugins) else text
    if doc and set(doc) <= FRAGMENT_SECTIONS and all("name" in p for p in plugins):
        return BASE + "\n" + text
    return None


def epochs(value):
    match = re.fullmatch(r"(\d+)ep", str(value))
    return int(match.group(1)) if match else None


def check_ema_start(config_text, sets, where):
    """The resolved run's ema plugin starts averaging before the run ends (when both times are in epochs)."""
    doc = tomllib.loads(config_text)
    duration = doc.get("trainer", {}).get("max_duration", "1ep")
    starts = {p.get("ema_start") for p in doc.get("plugins", []) if p.get("name") == "ema"}
    for s in sets:
        key, _, value = s.partition("=")
        if key == "trainer.max_duration":
            duration = value
        if key == "plugins.ema.ema_start":
            starts = {value}
    for start in starts:
        if epochs(start) is not None and epochs(duration) is not None:
            check(epochs(start) < epochs(duration),
                  f"{where}: ema_start {start} is not before max_duration {duration}: the EMA never starts")


def baton_check(baton, scratch, config_text, sets, where, cwd):
    config = scratch / f"block{len(list(scratch.iterdir()))}.toml"
    config.write_text(config_text)
    args = [baton, "check", config]
    for s in sets:
        args += ["--set", s]
    proc = run(args, cwd=cwd, expect=None)
    check(proc.returncode == 0, f"{where}: baton check failed ({proc.returncode}): {proc.stderr.strip()}")


def without_debian_dataset(error):
    """A check refused only because a Debian dataset package is missing, where BATON_TEST_WITHOUT_DEBIAN=1 says the
    machine has none (scripts/gpu-check.sh on a machine with PyTorch but not Debian's packages)."""
    return (os.environ.get("BATON_TEST_WITHOUT_DEBIAN") == "1" and "no such folder: '/usr/share/datasets/" in error
            and error.count("error:") == 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--baton", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--python", default="", help="an interpreter with torch, for data.md's recipe")
    args = parser.parse_args()
    started = time.monotonic()
    source = pathlib.Path(args.source_dir)
    env_scratch = tempfile.TemporaryDirectory(prefix="baton-docs-")
    scratch = pathlib.Path(env_scratch.name)
    for path in markdown_files(source):
        blocks, problems = code_blocks(path)
        for problem in problems:
            check(False, problem)
        if problems:
            continue  # the blocks of a page with a broken fence are not what the reader sees
        last_toml = None
        for line, lang, text in blocks:
            where = f"{path.relative_to(source)}:{line}"
            if lang == "toml":
                try:
                    config_text = checkable_toml(text)
                except tomllib.TOMLDecodeError as e:
                    check(False, f"{where}: not valid TOML: {e}")
                    continue
                if config_text is not None:
                    last_toml = config_text
                    baton_check(args.baton, scratch, config_text, [], where, source)
                continue
            text = re.sub(r"\\\n", " ", text)  # a command continued on the next line is one command
            commands = [l.strip() for l in text.split("\n") if l.strip() and not l.strip().startswith("#")]
            if commands and all(c.startswith("--set") for c in commands):
                if last_toml is None:
                    check(False, f"{where}: --set lines with no ```toml block above them to apply to")
                    continue
                for c in commands:  # each line is an alternative, checked on its own
                    sets = shlex.split(c.split("#")[0])[1::2]
                    baton_check(args.baton, scratch, last_toml, sets, where, source)
                continue
            if lang != "sh":
                continue
            for c in commands:
                words = shlex.split(c.split("  #")[0])
                if len(words) < 3 or not words[0].endswith("baton") or "--set" not in words:
                    continue
                if words[1] not in ("train", "check", "eval", "predict"):
                    continue
                config = source / words[2]
                if not config.is_file():
                    continue  # a file the reader writes (cfg.toml)
                sets = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--set"]
                proc = run([args.baton, "check", config] + [a for s in sets for a in ("--set", s)], cwd=source,
                           expect=None)
                if proc.returncode != 0 and without_debian_dataset(proc.stderr):
                    print(f"skipped: {where}: `{c}` reads a Debian dataset package this machine lacks")
                    continue
                check(proc.returncode == 0, f"{where}: `{c}`: baton check failed: {proc.stderr.strip()}")
                check_ema_start(config.read_text(), sets, f"{where}: `{c}`")
    check_python_recipe(args, source, scratch)
    return finish("docs", started)


RECIPE_CONFIG = """[data]
name = "safetensors"
path = "train.safetensors"
batch_size = 8
[model]
name = "mlp"
"""


def check_python_recipe(args, source, scratch):
    """data.md's torch-only writer and reader (§4): they run with the interpreter that has torch, the reader gets
    back what the writer wrote, and baton reads the file."""
    # Tensor.numpy() needs numpy beside torch (a bare torch wheel has none).
    if not args.python or run([args.python, "-c", "import torch, numpy"], expect=None).returncode != 0:
        print("no Python with torch and numpy: data.md's recipe is not run")
        return
    text = (source / "docs" / "data.md").read_text()
    match = re.search(r"```python\n(import json, struct, torch\n.*?)```", text, re.S)
    if not check(match is not None, "data.md: no torch-only safetensors recipe (```python starting `import json, "
                                    "struct, torch`)"):
        return
    program = ("import torch\nx = torch.randn(40, 1, 4, 4); y = torch.arange(40) % 3\n" + match.group(1) +
               "\nback = load_safetensors('train.safetensors')\n"
               "assert torch.equal(back['inputs'], x) and torch.equal(back['targets'], y), back\n")
    (scratch / "recipe.py").write_text(program)
    proc = run([args.python, "recipe.py"], cwd=scratch, expect=None)
    check(proc.returncode == 0, f"data.md's recipe failed: {proc.stderr.strip()}")
    (scratch / "recipe.toml").write_text(RECIPE_CONFIG)
    proc = run([args.baton, "check", "recipe.toml"], cwd=scratch, expect=None)
    check(proc.returncode == 0, f"baton check of the recipe's file failed: {proc.stderr.strip()}")


if __name__ == "__main__":
    sys.exit(main())
