#!/usr/bin/env python3
"""Checks that wtx's layers only point down (docs/architecture.md, "Layers").

  check_layering.py includes ROOT
      Parses every quoted #include of every C/C++/CUDA file under the checked folders of ROOT
      (src/, journal/, kernels/, include/, python/, tools/) and fails, naming the file, the line
      and both layers, for each include of a header in a layer above the file's own (the order
      is tests/layering/layers.json), of a file that belongs to no layer, or of a header that
      does not exist.
  check_layering.py self-test
      Runs the check on small trees it writes, one clean and one with each kind of violation,
      and fails unless it passes the first and reports exactly the violations of the second.
  check_layering.py binaries --installed-cli FILE LIBRARY...
      Fails if a production library (static or shared) defines or references a test-only symbol
      (fault injection, crash points, the in-process cluster, the daemons' test hooks), or if the
      installed CLI offers the daemons' --test-hooks flag or links their hooks.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SOURCE_EXT = (".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh", ".inc")


def load_layers(path=os.path.join(HERE, "layers.json")):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class Layers:
    def __init__(self, table):
        self.order = table["order"]
        self.rank = {name: i for i, name in enumerate(self.order)}
        # The production layers: every layer below the test-only ones.
        self.production = set(self.order[:self.order.index("testing")])
        # Longest folder first: "src/util" before "src".
        self.folders = sorted(table["folders"].items(), key=lambda kv: -len(kv[0]))
        self.public = table["public_headers"]
        self.checked = table["checked_folders"]

    def layer_of(self, rel):
        """The layer of repository path `rel`, or None."""
        if rel.startswith("include/wtx/"):
            return self.public.get(rel[len("include/wtx/"):])
        for folder, layer in self.folders:
            if rel == folder or rel.startswith(folder + "/"):
                return layer
        return None

    def may_include(self, src, dst):
        if src == dst:
            return True
        if src == "python":  # the Python module: production layers only
            return dst in self.production
        if dst == "python" or src not in self.rank or dst not in self.rank:
            return False
        return self.rank[dst] <= self.rank[src]


def resolve(root, including, name):
    """The repository path an #include "name" in file `including` names, or None."""
    candidates = [name, os.path.join("include", name),
                  os.path.normpath(os.path.join(os.path.dirname(including), name))]
    for c in candidates:
        if os.path.isfile(os.path.join(root, c)):
            return c
    return None


def check_includes(root, layers):
    """Violations as 'FILE:LINE: message' strings, in file order."""
    problems = []
    files = []
    for top in layers.checked:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and
                                 d not in ("build", "__pycache__"))
            for fn in sorted(filenames):
                if fn.endswith(SOURCE_EXT):
                    files.append(os.path.relpath(os.path.join(dirpath, fn), root))
    for rel in files:
        src_layer = layers.layer_of(rel)
        if src_layer is None:
            problems.append(f"{rel}:1: belongs to no layer (add its folder or public header to "
                            f"tests/layering/layers.json and docs/architecture.md)")
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                target = resolve(root, rel, m.group(1))
                if target is None:
                    problems.append(f"{rel}:{lineno}: includes \"{m.group(1)}\", which is no file "
                                    f"of the repository")
                    continue
                dst_layer = layers.layer_of(target)
                if dst_layer is None:
                    problems.append(f"{rel}:{lineno}: includes {target}, which belongs to no layer")
                elif not layers.may_include(src_layer, dst_layer):
                    problems.append(f"{rel}:{lineno}: includes {target}: layer '{src_layer}' may "
                                    f"not include layer '{dst_layer}' (above it, or test-only)")
    return problems, len(files)


def cmd_includes(root):
    layers = Layers(load_layers())
    problems, n = check_includes(root, layers)
    for p in problems:
        print(p)
    if problems:
        print(f"layering: {len(problems)} include(s) break the layer order "
              f"({' -> '.join(layers.order)}); see docs/architecture.md")
        return 1
    print(f"layering: {n} files, every include points down ({' -> '.join(layers.order)})")
    return 0


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def cmd_self_test():
    layers = Layers(load_layers())
    failures = []
    with tempfile.TemporaryDirectory() as clean:
        write(clean, "include/wtx/status.h", "#pragma once\n")
        write(clean, "include/wtx/participant.h", '#include "wtx/status.h"\n')
        write(clean, "src/util/a.h", '#include "wtx/status.h"\n')
        write(clean, "src/txn/b.cc", '#include "src/util/a.h"\n#include "wtx/participant.h"\n')
        write(clean, "python/src/m.cc", '#include "src/txn/b.cc"\n#include "m.h"\n')
        write(clean, "python/src/m.h", "#pragma once\n")
        write(clean, "tools/t.cc", '#include "src/testing/f.h"\n')
        write(clean, "src/testing/f.h", '#include "src/txn/b.cc"\n')
        problems, _ = check_includes(clean, layers)
        if problems:
            failures.append(f"a clean tree was refused: {problems}")
    with tempfile.TemporaryDirectory() as bad:
        write(bad, "include/wtx/status.h", "#pragma once\n")
        write(bad, "include/wtx/participant.h", "#pragma once\n")
        write(bad, "src/txn/b.h", "#pragma once\n")
        write(bad, "src/util/a.cc", '// x\n#include "src/txn/b.h"\n')           # upward
        write(bad, "journal/j.cc", '#include "wtx/participant.h"\n')              # upward public
        write(bad, "src/net/n.cc", '#include "src/testing/f.h"\n')                # test-only
        write(bad, "src/testing/f.h", "#pragma once\n")
        write(bad, "python/src/m.cc", '#include "src/conformance/s.h"\n')         # python
        write(bad, "src/conformance/s.h", "#pragma once\n")
        write(bad, "src/newfolder/x.cc", "#pragma once\n")                        # no layer
        write(bad, "src/memory/m.cc", '#include "src/memory/missing.h"\n')        # no file
        problems, _ = check_includes(bad, layers)
        expected = [
            ("journal/j.cc:1:", "layer 'journal' may not include layer 'txn'"),
            ("python/src/m.cc:1:", "layer 'python' may not include layer 'conformance'"),
            ("src/memory/m.cc:1:", "no file of the repository"),
            ("src/net/n.cc:1:", "layer 'net' may not include layer 'testing'"),
            ("src/newfolder/x.cc:1:", "belongs to no layer"),
            ("src/util/a.cc:2:", "layer 'util' may not include layer 'txn'"),
        ]
        if len(problems) != len(expected):
            failures.append(f"expected {len(expected)} violations, got {problems}")
        for where, what in expected:
            if not any(p.startswith(where) and what in p for p in problems):
                failures.append(f"missed: {where} {what} (got {problems})")
    for f in failures:
        print("layering self-test:", f)
    if failures:
        return 1
    print("layering self-test: a clean tree passes; 6 of 6 planted violations are named")
    return 0


def symbols(path):
    out = subprocess.run(["nm", "-C", path], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"nm {path}: {out.stderr.strip()}")
    return out.stdout


def cmd_binaries(args):
    table = load_layers()
    if len(args) < 2 or args[0] != "--installed-cli":
        print("usage: check_layering.py binaries --installed-cli FILE LIBRARY...")
        return 2
    cli, libs = args[1], args[2:]
    failures = []
    for lib in libs:
        text = symbols(lib)
        for sym in table["test_only_symbols"]:
            if sym in text:
                failures.append(f"{lib}: production library mentions test-only symbol {sym}")
    if "ProcessTestHooks" in symbols(cli):
        failures.append(f"{cli}: the installed CLI links the daemons' test hooks")
    for sub in ("rank", "coordinator"):
        out = subprocess.run([cli, sub, "--help"], capture_output=True, text=True)
        if "--test-hooks" in out.stdout + out.stderr or "--sync-delay-ms" in out.stdout:
            failures.append(f"{cli} {sub} --help offers a test-only flag")
    for f in failures:
        print("layering:", f)
    if failures:
        return 1
    print(f"layering: {len(libs)} production libraries link no test hook; the installed CLI "
          f"offers none")
    return 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "includes":
        return cmd_includes(argv[2])
    if len(argv) == 2 and argv[1] == "self-test":
        return cmd_self_test()
    if len(argv) >= 2 and argv[1] == "binaries":
        return cmd_binaries(argv[2:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
