#!/usr/bin/env python3
"""The guard behind kvgate::RemoveTree: no C++ source in the tree calls remove_all.

On the GPU host, libtorch's pip wheel exports its own copy of std::filesystem::remove_all, our
binaries bind to it, and it crashes (filesystem/README.md). This walks ROOT, prints FILE:LINE: TEXT
for every remove_all call (or using-declaration) in a C++ source or header and exits 1; 0 when
there is none. Skipped: top-level build*/ folders, hidden folders, node_modules/, the folders given
with --skip-dir (the build tree when it lies inside ROOT) and RemoveTree's own header and source.

Usage: no_remove_all_test.py ROOT [--skip-dir DIR ...]
"""

import argparse
import os
import re
import sys

SOURCE_SUFFIXES = (".cc", ".cpp", ".cxx", ".h", ".hpp", ".hh", ".cu", ".cuh", ".inl", ".ipp")
CALL = re.compile(r"\bremove_all\s*\(|\busing\s+[\w:]*::remove_all\b")
# RemoveTree's own files name the function they replace.
ALLOWED = {
    os.path.join("filesystem", "include", "kvgate", "filesystem", "remove_tree.h"),
    os.path.join("filesystem", "src", "remove_tree.cc"),
}


def skipped_dir(name, parent, root, skip_dirs):
    if name.startswith(".") or name == "node_modules":
        return True
    if parent == root and name.startswith("build"):
        return True
    return os.path.realpath(os.path.join(parent, name)) in skip_dirs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root")
    parser.add_argument("--skip-dir", action="append", default=[])
    args = parser.parse_args()
    root = os.path.realpath(args.root)
    skip_dirs = {os.path.realpath(d) for d in args.skip_dir}

    scanned = 0
    hits = []
    for parent, dirs, files in os.walk(root):  # does not follow links to folders
        dirs[:] = sorted(d for d in dirs if not skipped_dir(d, parent, root, skip_dirs))
        for name in sorted(files):
            path = os.path.join(parent, name)
            relative = os.path.relpath(path, root)
            if not name.endswith(SOURCE_SUFFIXES) or relative in ALLOWED or os.path.islink(path):
                continue
            scanned += 1
            with open(path, encoding="utf-8", errors="replace") as source:
                for number, line in enumerate(source, start=1):
                    if CALL.search(line):
                        hits.append(f"{relative}:{number}: {line.strip()}")

    if not scanned:
        print(f"FAIL: no C++ source found under {root}")
        return 1
    if hits:
        print("\n".join(hits))
        print(f"FAIL: {len(hits)} remove_all call(s) in {scanned} C++ files under {root}; use "
              "kvgate::RemoveTree (filesystem/include/kvgate/filesystem/remove_tree.h): libtorch's "
              "wheel exports a copy of std::filesystem::remove_all that crashes our binaries")
        return 1
    print(f"ok: no remove_all call in {scanned} C++ files under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
