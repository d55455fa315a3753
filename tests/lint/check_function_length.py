#!/usr/bin/env python3
"""No function in the library, the report generator or the CLI over 100 lines
unless the comment right above it says why (docs/architecture.md).

Function extents come from universal-ctags (`ctags --fields=+ne`), which
knows where each C++/CUDA function definition starts and ends, member
functions defined in a class included. A function may run longer when the
comment block directly above its first line contains `long:` and the reason.

Prints `FILE:LINE: NAME is N lines (limit 100)` per violation; exits 1 if any.
Usage: check_function_length.py [--root DIR] [--limit N] [FOLDER ...]
(folders relative to ROOT; default lib reports bench).
"""
import argparse
import pathlib
import shutil
import subprocess
import sys

SUFFIXES = {".hpp", ".h", ".cpp", ".cc", ".cu", ".cuh"}


def functions(root, folders):
    """(path, name, first line, last line) of every function definition."""
    files = []
    for folder in folders:
        base = root / folder
        if base.is_dir():
            files += sorted(str(p.relative_to(root)) for p in base.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
    if not files:
        return []
    cmd = ["ctags", "--languages=C++", "--map-C++=+.cu", "--map-C++=+.cuh", "--kinds-C++=f", "--fields=+ne",
           "-x", "--_xformat=%{line}\t%{end}\t%N\t%F", "-L", "-"]
    out = subprocess.run(cmd, cwd=root, input="\n".join(files), capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 4 and parts[0].isdigit() and parts[1].isdigit():
            found.append((parts[3], parts[2], int(parts[0]), int(parts[1])))
    return found


def justified(lines, first):
    """Whether the comment block right above line `first` (1-based) contains `long:`."""
    i = first - 2
    while i >= 0 and lines[i].strip().startswith("//"):
        if "long:" in lines[i]:
            return True
        i -= 1
    return False


def main():
    here = pathlib.Path(__file__).resolve()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=pathlib.Path, default=here.parents[2])
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("folders", nargs="*", default=["lib", "reports", "bench"])
    args = ap.parse_args()
    if not shutil.which("ctags"):
        print("check_function_length: ctags not found (Debian package universal-ctags; scripts/test.sh installs it)")
        return 1
    root = args.root.resolve()
    problems, longest = [], (0, "")
    found = functions(root, args.folders)
    for path, name, first, last in found:
        n = last - first + 1
        if n > longest[0]:
            longest = (n, f"{path}:{first} {name}")
        if n <= args.limit:
            continue
        lines = (root / path).read_text(encoding="utf-8", errors="replace").splitlines()
        if not justified(lines, first):
            problems.append(f"{path}:{first}: {name} is {n} lines (limit {args.limit}); split it along its seams, "
                            f"or say why in a `long:` comment right above it")
    for p in problems:
        print(p)
    print(f"check_function_length: {len(found)} functions; longest {longest[0]} lines ({longest[1]}); "
          f"{len(problems)} over {args.limit} without a reason")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
