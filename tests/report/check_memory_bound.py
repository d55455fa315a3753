#!/usr/bin/env python3
"""check_memory_bound.py MPIEXEC PIPEBENCH TOML OUTDIR

Seed 000's "activation-bound or parameter-bound" advice, from real sim runs:
the `activations` run of TOML (activations ~3/4 of the top rank's peak, the
peak above half the capacity) must be called activation-bound; the
`parameters` run, with short sequences and a small capacity (parameters,
gradients and AdamW state ~90% of the peak), parameter-bound.
"""
import json
import os
import shutil
import subprocess
import sys


def advice(mpiexec, pipebench, toml, out, run, *sets):
    res, rep = os.path.join(out, run), os.path.join(out, run + "_report")
    subprocess.run([mpiexec, "-np", "2", "--oversubscribe", pipebench, "run", toml, "--run", run, "-o", res, *sets],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run([pipebench, "report", res, "-o", rep], check=True, stdout=subprocess.DEVNULL)
    summary = json.load(open(os.path.join(rep, "summary.json")))
    return next(r["advice"] for r in summary["runs"] if r["run"] == run)


def main():
    mpiexec, pipebench, toml, out = sys.argv[1:5]
    shutil.rmtree(out, ignore_errors=True)
    problems = []
    act = advice(mpiexec, pipebench, toml, out, "activations")
    par = advice(mpiexec, pipebench, toml, out, "parameters", "--set", "model.seq_len=32",
                 "--set", "device.memory_capacity=48MiB")
    print("activations:", act)
    print("parameters:", par)
    if not any("activation-bound" in a for a in act) or any("parameter-bound" in a for a in act):
        problems.append("the activations run is not called activation-bound (alone)")
    if not any("parameter-bound" in a for a in par) or any("activation-bound" in a for a in par):
        problems.append("the parameters run is not called parameter-bound (alone)")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
