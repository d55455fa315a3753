#!/usr/bin/env python3
"""The lint checkers catch what they must, on planted trees.

Each case copies docs/architecture.md into a temporary tree, plants files and
runs a checker on it (check_includes.py against the real layer table,
check_function_length.py); the exit code and the offending FILE:LINE must match.
"""
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
INCLUDES = HERE / "check_includes.py"
LENGTH = HERE / "check_function_length.py"
LAYERS = ROOT / "docs" / "architecture.md"


def long_function(lines, comment=""):
    body = "".join(f"  x += {i};\n" for i in range(lines - 3))
    return f"{comment}int f(int x) {{\n{body}  return x;\n}}\n"


CASES = [
    # (checker, name, {path: text}, expected exit, substrings the output must contain)
    (INCLUDES, "clean tree passes",
     {"lib/runtime/src/runner.cpp": '#include "pipebench/runtime/runner.hpp"\n#include "pipebench/core/job.hpp"\n',
      "lib/core/include/pipebench/core/job.hpp": "#pragma once\n",
      "bench/main.cpp": '#include "pipebench/report/report.hpp"\n'},
     0, ["0 violation(s)"]),
    (INCLUDES, "backward include: core includes runtime",
     {"lib/core/src/units.cpp": '#include "pipebench/core/units.hpp"\n\n#include "pipebench/runtime/runner.hpp"\n'},
     1, ['lib/core/src/units.cpp:3: #include "pipebench/runtime/runner.hpp": core (layer 0) includes runtime (layer 4), a higher layer']),
    (INCLUDES, "sideways include: results includes backends (same layer)",
     {"lib/results/include/pipebench/results/records.hpp": '#pragma once\n#include "pipebench/backends/backend.hpp"\n'},
     1, ["records.hpp:2:", "results (layer 3) includes backends (layer 3), a module of the same layer"]),
    (INCLUDES, "a header outside any module folder",
     {"lib/runtime/src/x.cpp": '#include "pipebench/runner.hpp"\n'},
     1, ['lib/runtime/src/x.cpp:1: #include "pipebench/runner.hpp": names no module']),
    (INCLUDES, "a public header in another module's folder",
     {"lib/plan/include/pipebench/core/plan.hpp": "#pragma once\n"},
     1, ["must be under include/pipebench/plan/"]),
    (INCLUDES, "a source in no module folder",
     {"lib/misc/helper.cpp": "int x;\n"},
     1, ["lib/misc/helper.cpp:1: in no module folder"]),
    (INCLUDES, "angle-bracket includes are checked too",
     {"reports/src/r.cpp": "#include <pipebench/cli/commands.hpp>\n"},
     1, ["report (layer 5) includes cli (layer 6)"]),
    (LENGTH, "a 101-line function fails",
     {"lib/plan/src/p.cpp": "// a function\n" + long_function(101)},
     1, ["lib/plan/src/p.cpp:2: f is 101 lines (limit 100)"]),
    (LENGTH, "a 100-line function passes",
     {"lib/plan/src/p.cpp": long_function(100)},
     0, ["0 over 100 without a reason"]),
    (LENGTH, "a long function whose comment says why passes",
     {"reports/src/r.cpp": long_function(150, "// The table, row by row (long: one row per metric).\n")},
     0, ["longest 150 lines"]),
    (LENGTH, "a long member function defined in its class fails",
     {"bench/c.cpp": "struct S {\n" + long_function(120) + "};\n"},
     1, ["bench/c.cpp:2: f is 120 lines"]),
]


def run_case(checker, name, files, expected_rc, expected_text):
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "docs").mkdir()
        (root / "docs" / "architecture.md").write_text(LAYERS.read_text(encoding="utf-8"), encoding="utf-8")
        for rel, text in files.items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")
        out = subprocess.run([sys.executable, str(checker), "--root", str(root)], capture_output=True, text=True)
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
