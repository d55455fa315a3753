#!/usr/bin/env python3
"""A results file of tests/data/faults/two_runs.toml whose launch ended during
its second run: valid HDF5 (h5py opens it), launch_status "incomplete", run
"first" complete and ok, run "second" failed with kind "interrupted" (or KIND,
its message containing TEXT), and never judged not_feasible (nothing of it
was measured).
Usage: check_interrupted.py FILE [KIND TEXT]  (prints one line; exit 1 on a mismatch)."""
import sys

import h5py


def s(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def main(path, kind="interrupted", text=""):
    problems = []
    with h5py.File(path, "r") as f:
        if s(f.attrs.get("launch_status", "")) != "incomplete":
            problems.append(f"launch_status {s(f.attrs.get('launch_status', ''))!r}, expected 'incomplete'")
        runs = f["runs"]
        if list(runs) != ["first", "second"]:
            problems.append(f"runs {list(runs)}, expected ['first', 'second']")
        else:
            first, second = runs["first"], runs["second"]
            steps = first["step_time_s"].shape[0]
            if s(first.attrs["status"]) != "ok" or steps != int(first.attrs["warmup"]) + int(first.attrs["repeats"]):
                problems.append(f"first: status {s(first.attrs['status'])}, {steps} steps")
            if s(second.attrs["status"]) != "failed" or s(second.attrs["failure_kind"]) != kind:
                problems.append(f"second: status {s(second.attrs['status'])}, kind {s(second.attrs['failure_kind'])}")
            if text not in s(second.attrs["failure_message"]):
                problems.append(f"second: message {s(second.attrs['failure_message'])!r} lacks {text!r}")
            if s(second.attrs["decision"]) == "not_feasible":
                problems.append("second: judged not_feasible, though nothing of it was measured")
    print(("FAIL: " + "; ".join(problems)) if problems else f"file ok: first kept (ok), second {kind}, launch incomplete")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
