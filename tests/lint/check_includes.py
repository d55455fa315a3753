#!/usr/bin/env python3
"""The include direction of pipebench's modules (docs/architecture.md, "Layers").

Reads the layer table between the `layers:begin` / `layers:end` markers of
docs/architecture.md (the one written copy of the order) and checks every
source and header under the module folders it names:

- `#include "pipebench/<module>/..."` must name a module of the table, and
  either the file's own module or one in a strictly lower layer;
- a module's public headers live under `include/pipebench/<its own name>/`;
- every source file under lib/ belongs to a module folder of the table.

Prints one line per violation, `FILE:LINE: message`, and exits 1 if there is
any, 0 otherwise. Usage: check_includes.py [--root DIR] [--layers FILE]
(--root defaults to the repository, --layers to ROOT/docs/architecture.md).
"""
import argparse
import pathlib
import re
import sys

SOURCE_SUFFIXES = {".hpp", ".h", ".cpp", ".cc", ".cu", ".cuh", ".in"}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](pipebench/[^">]+)[">]')
ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*([a-z_]+)\s*\|\s*`([^`]+)`\s*\|")


class Module:
    def __init__(self, name, layer, folder):
        self.name, self.layer, self.folder = name, layer, folder.rstrip("/")


def read_layers(path):
    """Module rows of the table between the markers, in file order."""
    text = path.read_text(encoding="utf-8")
    m = re.search(r"<!-- layers:begin.*?-->(.*?)<!-- layers:end -->", text, re.S)
    if not m:
        raise SystemExit(f"{path}: no layer table between <!-- layers:begin --> and <!-- layers:end -->")
    modules = []
    for line in m.group(1).splitlines():
        row = ROW.match(line.strip())
        if row:
            modules.append(Module(row.group(2), int(row.group(1)), row.group(3)))
    if not modules:
        raise SystemExit(f"{path}: the layer table has no rows")
    names = [mod.name for mod in modules]
    if len(set(names)) != len(names):
        raise SystemExit(f"{path}: a module is listed twice in the layer table")
    return modules


def module_of(relpath, modules):
    """The module whose folder holds `relpath` (longest folder wins)."""
    best = None
    for mod in modules:
        if relpath == mod.folder or relpath.startswith(mod.folder + "/"):
            if best is None or len(mod.folder) > len(best.folder):
                best = mod
    return best


def check(root, modules):
    by_name = {mod.name: mod for mod in modules}
    problems = []
    files = []
    for mod in modules:
        folder = root / mod.folder
        if folder.is_dir():
            files += [p for p in folder.rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES]
    lib = root / "lib"
    if lib.is_dir():
        for p in lib.rglob("*"):
            rel = p.relative_to(root).as_posix()
            if p.is_file() and p.suffix in SOURCE_SUFFIXES and module_of(rel, modules) is None:
                problems.append(f"{rel}:1: in no module folder of the layer table (docs/architecture.md)")

    for path in sorted(set(files)):
        rel = path.relative_to(root).as_posix()
        own = module_of(rel, modules)
        header_dir = re.search(r"/include/pipebench/([^/]+)/", "/" + rel)
        if header_dir and header_dir.group(1) != own.name:
            problems.append(f"{rel}:1: a public header of module {own.name} must be under "
                            f"include/pipebench/{own.name}/, not include/pipebench/{header_dir.group(1)}/")
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            inc = INCLUDE.match(line)
            if not inc:
                continue
            parts = inc.group(1).split("/")
            target = by_name.get(parts[1]) if len(parts) > 2 else None
            if target is None:
                problems.append(f"{rel}:{number}: {line.strip()}: names no module of the layer table "
                                f"(headers are \"pipebench/<module>/<name>\")")
            elif target.name != own.name and target.layer >= own.layer:
                way = "a module of the same layer" if target.layer == own.layer else "a higher layer"
                problems.append(f"{rel}:{number}: {line.strip()}: {own.name} (layer {own.layer}) includes "
                                f"{target.name} (layer {target.layer}), {way}; a module may include only its "
                                f"own headers and those of lower layers (docs/architecture.md)")
    return problems, len(files)


def main():
    here = pathlib.Path(__file__).resolve()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=pathlib.Path, default=here.parents[2], help="the tree to check")
    ap.add_argument("--layers", type=pathlib.Path, help="the layer table (default ROOT/docs/architecture.md)")
    args = ap.parse_args()
    modules = read_layers(args.layers or args.root / "docs" / "architecture.md")
    problems, count = check(args.root.resolve(), modules)
    for p in problems:
        print(p)
    order = ", ".join(f"{m.name}:{m.layer}" for m in modules)
    print(f"check_includes: {count} files in {len(modules)} modules ({order}); {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
