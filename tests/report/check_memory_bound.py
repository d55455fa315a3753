#!/usr/bin/env python3
"""check_memory_bound.py MPIEXEC PIPEBENCH TOML OUTDIR

Seed 000's "activation-bound or parameter-bound" advice, from real sim runs:
the `activations` run of TOML (activations ~3/4 of the top rank's peak, the
peak above half the capacity) must be called activation-bound; the
`parameters` run, with short sequences and a small capacity (parameters,
gradients and AdamW state ~90% of the peak), parameter-bound. The `grid` run
(p 2 x d 2 x t 2 on 8 ranks, stage 0 at ~93% of 48 MiB, stage 1 at ~63%)
must name stage 0's rank by its coordinates: the advice once took ranks 0-7
for stages 0-7 ("Stage 1 took the remainder (4 layers vs 0)").
"""
import json
import os
import re
import shutil
import subprocess
import sys


def advice(mpiexec, pipebench, toml, out, run, *sets, ranks=2):
    res, rep = os.path.join(out, run), os.path.join(out, run + "_report")
    subprocess.run([mpiexec, "-np", str(ranks), "--oversubscribe", pipebench, "run", toml, "--run", run, "-o", res, *sets],
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
    grid = advice(mpiexec, pipebench, toml, out, "grid", "--set", "device.memory_capacity=48MiB", ranks=8)
    print("activations:", act)
    print("parameters:", par)
    print("grid:", grid)
    if not any("activation-bound" in a for a in act) or any("parameter-bound" in a for a in act):
        problems.append("the activations run is not called activation-bound (alone)")
    if not any("parameter-bound" in a for a in par) or any("activation-bound" in a for a in par):
        problems.append("the parameters run is not called parameter-bound (alone)")
    stage0 = r"Rank [0-3] \(stage 0, replica [01], tensor rank [01]\)"
    if not any(re.match(stage0 + r" peaks at 9\d% of capacity: ", a) for a in grid):
        problems.append("the grid run's advice does not name stage 0's fullest rank by its coordinates")
    if not any(re.match(stage0 + r" peaks at 9\d% of capacity, \d+% of it activations", a) for a in grid):
        problems.append("the grid run's activation-bound advice does not name its rank by its coordinates")
    named = {a.split(")")[0] for a in grid if re.match(stage0 + " peaks at", a)}
    if len(named) != 1:
        problems.append(f"the grid run's memory advice names different ranks for one stage: {sorted(named)}")
    # Stage 1 is below 90%: no memory advice names it. (Which rank is the
    # slowest is the cpu run's timing: that advice may name any rank.)
    if any(re.match(r"Stage \d", a) or "vs 0)" in a or ("(stage 1," in a and " peaks at " in a) for a in grid):
        problems.append("the grid run's advice takes ranks for stages, or its memory advice names stage 1 (below 90%)")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
