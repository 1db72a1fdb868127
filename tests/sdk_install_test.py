#!/usr/bin/env python3
"""The plugin SDK as a user meets it: install baton into a temporary prefix, build examples/plugins against it with
find_package(baton), run the installed `baton train` with the example plugins loaded by path, and check what they
did. Also checks that the SDK header stays light and that the installed binary needs no LD_LIBRARY_PATH.

Run by CTest (tests/CMakeLists.txt); any failed check exits with status 1 and says what was expected."""
import argparse
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))
from checks import check, finish, require, run  # noqa: E402


def user_env():
    """A user's shell: nothing pointing into the build tree, so only RPATHs can find libbaton and the plugins."""
    env = dict(os.environ)
    for name in ("LD_LIBRARY_PATH", "BATON_PLUGIN_PATH"):
        env.pop(name, None)
    return env


def check_installed_files(prefix, build):
    expected = ["bin/baton", "lib/libbaton.so", "include/baton/plugin.h", "include/baton/plugin_config.h",
                "include/baton/event.h", "include/baton/events.def", "include/baton/export.h",
                "lib/cmake/baton/batonConfig.cmake", "lib/cmake/baton/batonConfigVersion.cmake",
                "lib/cmake/baton/batonTargets.cmake", "lib/cmake/baton/BatonPlugin.cmake"]
    for rel in expected:
        check((prefix / rel).exists(), f"{rel} is not installed")
    check(any(prefix.glob("lib/libbaton.so.*")), "lib/libbaton.so.<version> is not installed")
    built_in = sorted(p.name for p in (build / "lib/baton/plugins").glob("*.so"))
    installed = sorted(p.name for p in (prefix / "lib/baton/plugins").glob("*.so"))
    check(installed == built_in, f"installed plugins {installed}, expected the built-in ones {built_in}")
    check(not any(n.startswith(("fixture_", "bench_")) for n in installed), "test or benchmark plugins installed")
    return installed


def check_installed_binary(prefix, installed_plugins):
    ldd = run(["ldd", prefix / "bin/baton"], env=user_env()).stdout
    line = next((l for l in ldd.splitlines() if "libbaton.so" in l), "")
    resolved = os.path.realpath(line.split("=>")[-1].split("(")[0].strip()) if "=>" in line else ""
    check(resolved.startswith(os.path.realpath(prefix / "lib") + os.sep),
          f"the installed baton does not find libbaton in {prefix}/lib by itself: {line.strip()!r}")
    proc = run([prefix / "bin/baton", "plugins"], env=user_env(), expect=None)
    status, out, err = proc.returncode, proc.stdout, proc.stderr
    check(status == 0, f"baton plugins exited with {status}: {err}")
    check(str(prefix / "lib/baton/plugins") in out, f"baton plugins does not search {prefix}/lib/baton/plugins")
    check("warning" not in err, f"an installed plugin does not load: {err.strip()}")
    for name in installed_plugins:
        check(re.search(r"^" + re.escape(name[:-3]) + r"\s", out, re.M) is not None,
              f"baton plugins does not list the installed {name}")


LIGHT_PLUGIN = """#include "baton/plugin.h"
namespace {
struct Light final : baton::Callback {
  void batch_end(baton::State& state, baton::Logger& logger) override {
    logger.log_metric("light/batch", static_cast<double>(state.timestamp().batch));
  }
};
}  // namespace
BATON_PLUGIN(Light, "light", "1.0.0", "a callback that includes only the SDK header")
"""


def check_header_is_light(args, prefix, scratch):
    """A plugin TU including only baton/plugin.h must not see <torch/torch.h> nor any torch/nn header."""
    source = scratch / "light_plugin.cpp"
    source.write_text(LIGHT_PLUGIN)
    includes = ["-I", prefix / "include"]
    for d in filter(None, args.torch_includes.split(":")):
        includes += ["-isystem", d]
    deps = run([args.cxx, "-std=c++17", *args.torch_cxx_flags.split(), *includes, "-M", source]).stdout
    headers = deps.replace("\\\n", " ").split()[2:]
    heavy = [h for h in headers if re.search(r"/torch/(torch\.h|nn\.h|nn/)", h)]
    check(not heavy, f"baton/plugin.h pulls in heavy LibTorch headers: {heavy[:5]}")
    check(any(h.endswith("torch/version.h") for h in headers), "baton/plugin.h no longer includes torch/version.h")
    print(f"  a plugin TU including baton/plugin.h reads {len(headers)} headers, none of torch/torch.h or torch/nn",
          flush=True)


def metrics_of(run_dir):
    path = run_dir / "metrics.jsonl"
    require(path.exists(), f"{path} was not written")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def values(lines, key):
    return [line[key] for line in lines if key in line]


BASE_CONFIG = """[run]
name = "{name}"
dir = "runs"
seed = 3

[data]
name = "synthetic"
batch_size = 32
train_size = 256
eval_size = 64

[model]
name = "mlp"
widths = [16]

[optimizer]
name = "sgd"
lr = 0.05

[trainer]
precision = "fp32"
max_duration = "1ep"
eval_interval = "1ep"
log_interval = "1ba"
progress = false

[checkpoint]
save_interval = "0ep"
"""
BATCHES = 256 // 32


def plugins_toml(plugin_dir, clip_keys, logger_keys):
    return (f'\n[[plugins]]\npath = "{plugin_dir}/grad_clip.so"\n{clip_keys}\n'
            f'\n[[plugins]]\npath = "{plugin_dir}/grad_norm_logger.so"\n{logger_keys}\n')


def train(prefix, run_root, name, plugin_dir, clip_keys, logger_keys, expect=0):
    config = run_root / f"{name}.toml"
    config.write_text(BASE_CONFIG.format(name=name) + plugins_toml(plugin_dir, clip_keys, logger_keys))
    return config, run([prefix / "bin/baton", "train", config.name], cwd=run_root, env=user_env(), expect=expect).stderr


def check_training(prefix, run_root, plugin_dir):
    # max_norm far above any gradient norm: nothing is clipped, the logger sees the raw norms every batch.
    train(prefix, run_root, "unclipped", plugin_dir, "max_norm = 1e6", "every = 1")
    lines = metrics_of(run_root / "runs/unclipped")
    baseline_losses = values(lines, "train/loss")
    norms = values(lines, "grad_norm/total")
    check(len(norms) == BATCHES, f"unclipped: {len(norms)} grad_norm/total values, expected one per batch ({BATCHES})")
    check(all(n > 0 for n in norms), f"unclipped: grad_norm/total values not all > 0: {norms}")
    clipped = values(lines, "grad_clip/clipped")
    check(len(clipped) == BATCHES and all(c == 0.0 for c in clipped),
          f"unclipped: grad_clip/clipped should be 0.0 at each of {BATCHES} batches, got {clipped}")

    # A tiny max_norm clips every batch; the callback runs after the algorithm on after_backward, so the norm it
    # logs is the clipped one, max_norm itself (float32 gradients: a relative error near 1e-7).
    max_norm = 1e-3
    train(prefix, run_root, "clipped", plugin_dir, f"max_norm = {max_norm}", "every = 2")
    lines = metrics_of(run_root / "runs/clipped")
    clipped = values(lines, "grad_clip/clipped")
    check(len(clipped) == BATCHES and all(c == 1.0 for c in clipped),
          f"clipped: grad_clip/clipped should be 1.0 at each of {BATCHES} batches, got {clipped}")
    norms = values(lines, "grad_norm/total")
    check(len(norms) == BATCHES // 2, f"clipped: every = 2 gave {len(norms)} values, expected {BATCHES // 2}")
    check(all(abs(n - max_norm) <= 1e-5 * max_norm for n in norms),
          f"clipped: the logged norms should equal max_norm {max_norm} after clipping, got {norms}")
    return baseline_losses


def check_input_noise(prefix, run_root, plugin_dir, baseline_losses):
    """The example algorithm that rewrites the batch: trained alone, it must change what the model sees. The same
    seed and data without it (the "unclipped" run: grad_clip far above any norm changes nothing) give
    `baseline_losses`; the first train/loss is computed before any update, from the first batch alone, so it
    differs only if the batch did."""
    config = run_root / "noisy.toml"
    config.write_text(BASE_CONFIG.format(name="noisy") +
                      f'\n[[plugins]]\npath = "{plugin_dir}/input_noise.so"\nstd = 0.5\nevery = 2\n')
    run([prefix / "bin/baton", "train", config.name], cwd=run_root, env=user_env())
    lines = metrics_of(run_root / "runs/noisy")
    rms = values(lines, "input_noise/rms")
    check(len(rms) == BATCHES // 2, f"input_noise: every = 2 gave {len(rms)} input_noise/rms values, expected {BATCHES // 2}")
    check(all(abs(r - 0.5) < 0.05 for r in rms), f"input_noise: the added noise should have an rms near std 0.5: {rms}")
    losses = values(lines, "train/loss")
    check(len(losses) == BATCHES and len(baseline_losses) == BATCHES,
          f"input_noise: expected {BATCHES} train/loss values in both runs, got {len(losses)} and {len(baseline_losses)}")
    check(losses and baseline_losses and abs(losses[0] - baseline_losses[0]) > 1e-4,
          f"input_noise: the first batch's loss {losses[:1]} should differ from the run without noise "
          f"{baseline_losses[:1]}: the plugin did not change the batch")


def check_config_errors(prefix, run_root, plugin_dir):
    # A misspelt key: exit status 2, naming the key, the file and its line.
    config, err = train(prefix, run_root, "misspelt", plugin_dir, "max_norm = 1.0", "evry = 2", expect=2)
    text = config.read_text().splitlines()
    line = next(i + 1 for i, l in enumerate(text) if l.startswith("evry"))
    check(f"{config.name}:{line}:" in err, f"misspelt key: the error does not point at {config.name}:{line}: {err!r}")
    check("unknown key 'evry' for plugin 'grad_norm_logger'" in err, f"misspelt key: the error does not name it: {err!r}")
    check(not (run_root / "runs/misspelt/metrics.jsonl").exists(), "misspelt key: the run started anyway")

    # A value the plugin's getter rejects (a range, and what the key is for).
    config, err = train(prefix, run_root, "negative", plugin_dir, "max_norm = -1", "", expect=2)
    line = next(i + 1 for i, l in enumerate(config.read_text().splitlines()) if l.startswith("max_norm"))
    expected = "plugins.grad_clip.max_norm: expected a number > 0 (the largest global gradient norm), got integer -1"
    check(f"{config.name}:{line}:" in err and expected in err,
          f"max_norm = -1: expected '{config.name}:{line}:...{expected}': {err!r}")

    # A value of the wrong type, read by PluginConfig::get_or.
    config, err = train(prefix, run_root, "wrong_type", plugin_dir, "max_norm = 1.0", 'every = "often"', expect=2)
    check("plugins.grad_norm_logger.every: expected an integer, got string \"often\"" in err,
          f"every = \"often\": the error does not say what was expected: {err!r}")


def check_plugin_dir_variable(args, prefix, scratch):
    """find_package(baton) sets baton_PLUGIN_DIR to the installed plugin folder, whatever the packages it finds on
    the way (LibTorch's) set PACKAGE_PREFIX_DIR to."""
    project = scratch / "plugin-dir-probe"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(probe LANGUAGES CXX)\nfind_package(baton REQUIRED)\n"
        'file(WRITE "${CMAKE_BINARY_DIR}/plugin_dir.txt" "${baton_PLUGIN_DIR}")\n')
    run(["cmake", "-S", project, "-B", project / "build", f"-DCMAKE_PREFIX_PATH={prefix}",
         f"-DCMAKE_CXX_COMPILER={args.cxx}"], env=user_env())
    found = (project / "build/plugin_dir.txt").read_text()
    expected = prefix / "lib/baton/plugins"
    check(os.path.realpath(found) == os.path.realpath(expected),
          f"find_package(baton) set baton_PLUGIN_DIR to {found!r}, expected {expected}")


def docs_example_files(source_dir):
    """The stop_on_loss project of docs/plugins.md ("From an empty folder to a training run"), as its text shows it."""
    text = (source_dir / "docs/plugins.md").read_text()
    files = {}
    for name, language in (("CMakeLists.txt", "cmake"), ("stop_on_loss.cpp", "cpp")):
        match = re.search(r"^`" + re.escape(name) + r"`\n```" + language + r"\n(.*?)^```", text, re.M | re.S)
        require(match is not None, f"docs/plugins.md has no {name} block for the stop_on_loss example")
        files[name] = match.group(1)
    return files


def check_docs_example(args, prefix, scratch, run_root):
    """The documentation's example plugin builds as the text says, stops a run, and refuses every = "0ba" with a
    configuration error instead of dividing by zero."""
    project = scratch / "stop_on_loss"
    project.mkdir()
    for name, content in docs_example_files(args.source_dir).items():
        (project / name).write_text(content)
    run(["cmake", "-S", project, "-B", project / "build", f"-DCMAKE_PREFIX_PATH={prefix}",
         "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_CXX_COMPILER={args.cxx}"], env=user_env())
    run(["cmake", "--build", project / "build", "-j1"], env=user_env())
    plugin = os.path.relpath(project / "build/stop_on_loss.so", run_root)

    def train_with(name, keys, expect):
        config = run_root / f"{name}.toml"
        config.write_text(BASE_CONFIG.format(name=name) + f'\n[[plugins]]\npath = "{plugin}"\n{keys}\n')
        return run([prefix / "bin/baton", "train", config.name], cwd=run_root, env=user_env(), expect=expect)

    # Any loss is below 100: the run stops at the first check, batch 2.
    out = train_with("stop_on_loss", 'threshold = 100.0\nevery = "2ba"', 0).stdout
    check("trained to ep 0 ba 2" in out and "stopped: train/loss below 100" in out,
          f"the docs' stop_on_loss did not stop the run at batch 2: {out!r}")
    proc = train_with("stop_on_loss_zero", 'threshold = 0.5\nevery = "0ba"', None)
    status, err = proc.returncode, proc.stderr
    check(status == 2 and "plugins.stop_on_loss.every: expected a time > 0, got string \"0ba\"" in err,
          f"every = \"0ba\": expected exit 2 and a configuration error, got exit {status}: {err!r}")


def check_embedding(args, prefix, scratch):
    """examples/embed as a project of its own (docs/embedding.md shows its CMakeLists.txt word for word): built
    against the installed package, it trains a torch::nn::Sequential with the installed EMA plugin, which it loads
    by name through PluginLoader, and exits 0 only at 90 % accuracy."""
    source = args.source_dir / "examples/embed"
    cmake_text = (source / "CMakeLists.txt").read_text()
    docs = (args.source_dir / "docs/embedding.md").read_text()
    check("```cmake\n" + cmake_text + "```" in docs,
          "docs/embedding.md does not show examples/embed/CMakeLists.txt as it is")
    project = scratch / "embed"
    project.mkdir()
    for name in ("CMakeLists.txt", "embed.cpp", "two_inputs.cpp"):
        shutil.copy(source / name, project / name)
    run(["cmake", "-S", project, "-B", project / "build", f"-DCMAKE_PREFIX_PATH={prefix}",
         f"-DCMAKE_CXX_COMPILER={args.cxx}"], env=user_env())
    run(["cmake", "--build", project / "build", "-j1"], env=user_env())
    proc = run([project / "build/spirals"], cwd=scratch, env=user_env(), expect=None)
    status, out, err = proc.returncode, proc.stdout, proc.stderr
    check(status == 0, f"the embedding program exited with {status}: {out[-2000:]} {err[-2000:]}")
    loaded = next((l for l in out.splitlines() if l.startswith("loaded ema")), "")
    check(str(prefix / "lib/baton/plugins/ema.so") in loaded,
          f"the embedding program did not load the installed EMA plugin: {loaded!r}")
    check("final eval accuracy" in out, f"the embedding program did not report its accuracy: {out[-500:]!r}")
    # A model of two inputs fed from named batch fields, with the installed EMA plugin: exits 0 at its bar.
    proc = run([project / "build/two_inputs"], cwd=scratch, env=user_env(), expect=None)
    status, out, err = proc.returncode, proc.stdout, proc.stderr
    check(status == 0, f"the two-input program exited with {status}: {out[-2000:]} {err[-2000:]}")
    check(str(prefix / "lib/baton/plugins/ema.so") in out and "final eval rmse" in out,
          f"the two-input program did not load the installed EMA plugin or report its error: {out[-500:]!r}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", required=True, type=Path)
    parser.add_argument("--source-dir", required=True, type=Path)
    parser.add_argument("--cxx", required=True)
    parser.add_argument("--torch-cxx-flags", default="")
    parser.add_argument("--torch-includes", default="", help="colon-separated")
    args = parser.parse_args()
    build = args.build_dir.resolve()
    started = time.monotonic()

    scratch = build / "test-scratch/sdk_install"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    prefix = scratch / "prefix"

    # What the install copies must be built; a no-op after a full build.
    run(["cmake", "--build", build, "--target", "baton_installable"])
    run(["cmake", "--install", build, "--prefix", prefix])
    installed_plugins = check_installed_files(prefix, build)
    check_installed_binary(prefix, installed_plugins)
    check_header_is_light(args, prefix, scratch)

    # The example project, configured and built exactly as its README tells a user.
    example_build = scratch / "example-build"
    run(["cmake", "-S", args.source_dir / "examples/plugins", "-B", example_build, f"-DCMAKE_PREFIX_PATH={prefix}",
         "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_CXX_COMPILER={args.cxx}"], env=user_env())
    run(["cmake", "--build", example_build, "-j1"], env=user_env())
    for name in ("grad_clip.so", "grad_norm_logger.so", "input_noise.so"):
        require((example_build / name).exists(), f"baton_add_plugin did not produce {example_build / name}")
    if (example_build / "grad_clip_test").exists():
        run(["ctest", "--test-dir", example_build, "--output-on-failure"], env=user_env())

    run_root = scratch / "runs-root"
    run_root.mkdir()
    plugin_dir = os.path.relpath(example_build, run_root)  # paths are relative to the config file's folder
    baseline_losses = check_training(prefix, run_root, plugin_dir)
    check_input_noise(prefix, run_root, plugin_dir, baseline_losses)
    check_config_errors(prefix, run_root, plugin_dir)
    check_plugin_dir_variable(args, prefix, scratch)
    check_docs_example(args, prefix, scratch, run_root)
    check_embedding(args, prefix, scratch)

    return finish("sdk_install", started)


if __name__ == "__main__":
    sys.exit(main())
