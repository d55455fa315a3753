#!/usr/bin/env python3
"""check_includes.py catches what it must: planted trees, checked against the real layer table.

Each case copies docs/architecture.md into a temporary tree, plants files and
runs the checker on it; the exit code and the offending FILE:LINE must match.
"""
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CHECKER = HERE / "check_includes.py"
LAYERS = ROOT / "docs" / "architecture.md"

CASES = [
    # (name, {path: text}, expected exit, substrings the output must contain)
    ("clean tree passes",
     {"lib/runtime/src/runner.cpp": '#include "pipebench/runtime/runner.hpp"\n#include "pipebench/core/job.hpp"\n',
      "lib/core/include/pipebench/core/job.hpp": "#pragma once\n",
      "bench/main.cpp": '#include "pipebench/report/report.hpp"\n'},
     0, ["0 violation(s)"]),
    ("backward include: core includes runtime",
     {"lib/core/src/units.cpp": '#include "pipebench/core/units.hpp"\n\n#include "pipebench/runtime/runner.hpp"\n'},
     1, ['lib/core/src/units.cpp:3: #include "pipebench/runtime/runner.hpp": core (layer 0) includes runtime (layer 4), a higher layer']),
    ("sideways include: results includes backends (same layer)",
     {"lib/results/include/pipebench/results/records.hpp": '#pragma once\n#include "pipebench/backends/backend.hpp"\n'},
     1, ["records.hpp:2:", "results (layer 3) includes backends (layer 3), a module of the same layer"]),
    ("a header outside any module folder",
     {"lib/runtime/src/x.cpp": '#include "pipebench/runner.hpp"\n'},
     1, ['lib/runtime/src/x.cpp:1: #include "pipebench/runner.hpp": names no module']),
    ("a public header in another module's folder",
     {"lib/plan/include/pipebench/core/plan.hpp": "#pragma once\n"},
     1, ["must be under include/pipebench/plan/"]),
    ("a source in no module folder",
     {"lib/misc/helper.cpp": "int x;\n"},
     1, ["lib/misc/helper.cpp:1: in no module folder"]),
    ("angle-bracket includes are checked too",
     {"reports/src/r.cpp": "#include <pipebench/cli/commands.hpp>\n"},
     1, ["report (layer 5) includes cli (layer 6)"]),
]


def run_case(name, files, expected_rc, expected_text):
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "docs").mkdir()
        (root / "docs" / "architecture.md").write_text(LAYERS.read_text(encoding="utf-8"), encoding="utf-8")
        for rel, text in files.items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")
        out = subprocess.run([sys.executable, str(CHECKER), "--root", str(root)], capture_output=True, text=True)
        text = out.stdout + out.stderr
        ok = out.returncode == expected_rc and all(s in text for s in expected_text)
        print(f"{'ok  ' if ok else 'FAIL'} {name} (exit {out.returncode}, expected {expected_rc})")
        if not ok:
            print("  expected:", expected_text)
            print("  output:\n    " + text.replace("\n", "\n    "))
        return ok


def main():
    results = [run_case(*case) for case in CASES]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
