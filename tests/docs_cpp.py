#!/usr/bin/env python3
"""Every C++ block of the documentation compiles (issue 41 §11), as the docs test checks every TOML block.

Writes two translation units from the ```cpp blocks of docs/*.md, the README and examples/plugins/README.md:

- fragments.cpp: each block placed as a reader would place it (statements in a function, declarations at namespace
  scope, members in a class), after every public header of baton and LibTorch's, and the reader's own types the
  docs assume (tests/support/docs_stand_ins.h: MyNet, MyImages, ...), each block with the variables it uses as
  parameters of its function;
- plugin.cpp: the blocks that are whole files of a plugin and its test (docs/plugins.md), together, as written.

A block this table does not know fails the generation, naming its file and line: a new C++ example is placed here
(with what it assumes) when it is written. The test compiles both files (the docs_cpp target).
"""
import argparse
import pathlib
import re
import sys

# How each block is placed, by the file it is in and its first line: (kind, context).
#   function: statements, in `void f(<context>) { ... }`
#   namespace: declarations, in `namespace <unique> { <context> ... }`
#   members: in `struct <unique> : <context> { ... };`
#   split: namespace-scope declarations up to the line after TORCH_MODULE(...), then statements as `function`
#   includes: its #include lines at the top, the rest as `function`
#   file: a whole source file at global scope, its #include lines at the top (fragments.cpp)
#   plugin: a whole source file of the plugin translation unit (plugin.cpp), in the order found
BLOCKS = {
    ("docs/data.md", "class Dataset {"): ("namespace", "using baton::Batch; using baton::DataSpec;"),
    ("docs/data.md", "const at::Tensor& x = batch.inputs();"): ("function", "baton::Batch& batch, at::Tensor w"),
    ("docs/diffusion.md", "baton::Model make_my_model("): ("namespace", ""),
    ("docs/distributed.md", "h = baton::run_unit("): ("function", "torch::nn::Sequential block, at::Tensor h"),
    ("docs/ema.md", "baton::ExponentialMovingAverage ema(*model, options);"): (
        "function",
        "std::shared_ptr<torch::nn::Module> model, baton::EmaOptions options, std::vector<baton::Batch> batches, "
        "torch::optim::Optimizer& optimizer, std::shared_ptr<torch::nn::Module> other_model"),
    ("docs/embedding.md", "torch::nn::Sequential net("): ("function", "at::Tensor inputs, at::Tensor targets, "
                                                                      "baton::TensorDataset eval"),
    ("docs/embedding.md", "// A forward of two tensors"): ("function", "MyNet net, baton::TrainerOptions options"),
    ("docs/embedding.md", "at::Tensor noise = at::randn("): ("function", "at::Tensor x"),
    ("docs/embedding.md", "struct GanImpl : torch::nn::Module {"): (
        "split", "baton::TensorDataset train, baton::TensorDataset eval, baton::TrainerOptions options"),
    ("docs/logging.md", '#include "baton/components.h"'): ("includes", "baton::TrainerOptions options"),
    ("docs/plugins.md", "#include <fstream>"): ("plugin", ""),
    ("docs/plugins.md", "#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN"): ("plugin", ""),
    ("docs/plugins.md", "virtual void subscribe(baton::Subscriptions& events);"): ("members", "baton::Callback"),
    ("docs/plugins.md", "void declare(baton::Declarations& run) const override {"): ("members", "baton::Callback"),
    ("docs/plugins.md", '#include "baton/components.h"'): ("file", ""),
}

HEADERS = """#include <torch/torch.h>

#include "baton/builtin_datasets.h"
#include "baton/communicator.h"
#include "baton/components.h"
#include "baton/declarations.h"
#include "baton/ema.h"
#include "baton/models.h"
#include "baton/optimizer_state.h"
#include "baton/plugin.h"
#include "baton/plugin_loader.h"
#include "baton/safetensors.h"
#include "baton/state.h"
#include "baton/text.h"
#include "baton/trainer.h"
#include "baton/unit.h"
#include "docs_stand_ins.h"
"""


def markdown_files(source):
    return sorted((source / "docs").glob("*.md")) + [source / "README.md", source / "examples/plugins/README.md"]


def cpp_blocks(source):
    """(relative file, line of the fence, text) of every ```cpp block."""
    for path in markdown_files(source):
        if not path.exists():
            continue
        text = path.read_text()
        for match in re.finditer(r"^```cpp\n(.*?)^```", text, re.S | re.M):
            yield path.relative_to(source).as_posix(), text[: match.start()].count("\n") + 1, match.group(1)


def split_includes(text):
    """The #include lines, and the text with each left blank (so #line keeps pointing at the docs' lines)."""
    lines = text.split("\n")
    includes = [line for line in lines if line.startswith("#include")]
    rest = ["" if line.startswith("#include") else line for line in lines]
    return includes, "\n".join(rest)


def place(kind, context, text, unique, file, line):
    """(lines for the top of the file, the block placed); compiler messages name the docs' file and line."""
    marker = f"// {file}:{line}\n"
    text = f'#line {line + 1} "{file}"\n' + text
    if kind == "function":
        return [], f"{marker}[[maybe_unused]] void {unique}({context}) {{\n{text}}}\n"
    if kind == "namespace":
        return [], f"{marker}namespace {unique} {{\n{context}\n{text}}}  // namespace {unique}\n"
    if kind == "members":
        return [], f"{marker}struct {unique} : {context} {{\n{text}}};\n"
    if kind == "split":
        lines = text.split("\n")
        cut = next(i for i, text_line in enumerate(lines) if text_line.startswith("TORCH_MODULE(")) + 1
        declarations = "\n".join(lines[:cut]) + "\n"
        statements = f'#line {line + cut} "{file}"\n' + "\n".join(lines[cut:])
        return [], (f"{marker}namespace {unique}_types {{\n{declarations}}}\n"
                    f"[[maybe_unused]] void {unique}({context}) {{\nusing namespace {unique}_types;\n{statements}}}\n")
    if kind == "includes":
        includes, rest = split_includes(text)
        return includes, f"{marker}[[maybe_unused]] void {unique}({context}) {{\n{rest}}}\n"
    if kind == "file":
        includes, rest = split_includes(text)
        return includes, f"{marker}{rest}\n"
    raise ValueError(kind)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source-dir", required=True, type=pathlib.Path)
    parser.add_argument("--out-dir", required=True, type=pathlib.Path)
    args = parser.parse_args()
    tops, bodies, plugin = [], [], []
    unknown, seen = [], set()
    for number, (file, line, text) in enumerate(cpp_blocks(args.source_dir)):
        first = text.lstrip("\n").split("\n", 1)[0]
        key = next(((f, start) for (f, start) in BLOCKS if f == file and first.startswith(start)), None)
        if key is None:
            unknown.append(f"{file}:{line}: a C++ block this test does not place ({first.strip()!r}): add it to "
                           f"BLOCKS in tests/docs_cpp.py, with what it assumes")
            continue
        seen.add(key)
        kind, context = BLOCKS[key]
        if kind == "plugin":
            plugin.append(f"// {file}:{line}\n#line {line + 1} \"{file}\"\n{text}")
            continue
        top, body = place(kind, context, text, f"docs_block_{number}", file, line)
        tops += [include for include in top if include not in tops]
        bodies.append(body)
    missing = [f"{f}: no C++ block starts with {start!r} any more (remove it from BLOCKS)"
               for (f, start) in BLOCKS if (f, start) not in seen]
    for problem in unknown + missing:
        print(f"docs_cpp: {problem}", file=sys.stderr)
    if unknown or missing:
        return 1
    args.out_dir.mkdir(parents=True, exist_ok=True)
    generated = "// Generated by tests/docs_cpp.py from the documentation's C++ blocks; compiled, never run.\n"
    fragments = generated + HEADERS + "\n".join(tops) + "\n\n" + "\n".join(bodies)
    (args.out_dir / "fragments.cpp").write_text(fragments)
    (args.out_dir / "plugin.cpp").write_text(generated + "\n".join(plugin))
    print(f"docs_cpp: {len(bodies)} blocks in fragments.cpp, {len(plugin)} in plugin.cpp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
