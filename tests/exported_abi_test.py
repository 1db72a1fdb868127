#!/usr/bin/env python3
"""The exported ABI is exactly the public headers.

1. No header outside the public include folders (core/sdk/include: the plugin SDK; core/include: the embedding API
   and the libraries; events/include) marks anything BATON_API (the private headers of the
   components are libbaton's own business).
2. Every baton:: symbol that libbaton.so exports (its dynamic symbol table, demangled) belongs to a name declared
   in a public header: the first name after `baton::` (a class, a function, a nested namespace) must appear in the
   code, comments stripped, of a public header.
Exit 0 when both hold; otherwise each offender is listed and the exit status is 1.
"""
import argparse
import pathlib
import re
import subprocess
import sys


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--library", required=True)
    parser.add_argument("--source-dir", required=True)
    args = parser.parse_args()
    source = pathlib.Path(args.source_dir)
    public_dirs = [source / "core" / "sdk" / "include", source / "core" / "include", source / "events" / "include"]

    failures = []
    for header in sorted((source / "core").rglob("*.h")):
        if any(d in header.parents for d in public_dirs):
            continue
        if re.search(r"\bBATON_API\b", strip_comments(header.read_text())):
            failures.append(f"{header.relative_to(source)}: a private header exports with BATON_API")

    public_words = set()
    for d in public_dirs:
        for header in d.rglob("*.h"):
            public_words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", strip_comments(header.read_text())))

    nm = subprocess.run(["nm", "-D", "--defined-only", "-C", args.library], capture_output=True, text=True)
    if nm.returncode != 0:
        print(f"nm failed on {args.library}: {nm.stderr.strip()}", file=sys.stderr)
        return 1
    exported = 0
    seen = set()
    for line in nm.stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) < 3:
            continue
        match = re.search(r"(?<![A-Za-z0-9_:])baton::([A-Za-z_][A-Za-z0-9_]*)", parts[2])
        if not match:
            continue
        exported += 1
        name = match.group(1)
        if name not in public_words and name not in seen:
            seen.add(name)
            failures.append(f"exported but in no public header: baton::{name} (e.g. {parts[2][:160]})")

    if exported == 0:
        failures.append(f"{args.library} exports no baton:: symbol at all (is it the library?)")
    for f in failures:
        print(f, file=sys.stderr)
    print(f"{exported} exported baton:: symbols checked against the public headers; {len(failures)} problem(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
