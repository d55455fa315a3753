#!/usr/bin/env python3
"""Runs `pipebench plan` on an invalid workload and checks the rejection.

The workload's first line is `# expect: TEXT`; TEXT (which names file, line
and key) must appear in stderr, the exit code must be 3 (invalid workload),
and nothing may be written to stdout.
"""
import subprocess
import sys

pipebench, workload = sys.argv[1], sys.argv[2]
with open(workload, encoding="utf-8") as f:
    first = f.readline()
assert first.startswith("# expect: "), f"{workload}: first line must be '# expect: ...'"
expected = first[len("# expect: "):].strip()

proc = subprocess.run([pipebench, "plan", workload], capture_output=True, text=True)
problems = []
if proc.returncode != 3:
    problems.append(f"exit code {proc.returncode}, expected 3")
if expected not in proc.stderr:
    problems.append(f"stderr lacks {expected!r}")
if proc.stdout:
    problems.append("stdout is not empty")
if problems:
    print(f"{workload}: " + "; ".join(problems))
    print("--- stderr ---\n" + proc.stderr + "--- stdout ---\n" + proc.stdout)
    sys.exit(1)
print(f"ok: {proc.stderr.strip()}")
