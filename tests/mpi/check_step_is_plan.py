#!/usr/bin/env python3
"""check_step_is_plan.py PIPEBENCH JOB RUN RESULTS_DIR [--set KEY=VALUE ...]

A sim run on the virtual clock measures its model's timeline: its median counted step must be the
planner's `iteration_s` for that run (relative 1e-6). Issue 66: p 1 x d 3 x t 4 at 6 ranks per node
puts replica 1's tensor group across two nodes; the sim backend times it on the inter-node link, and
the plan, which priced only replica 0's group, was 0.81 s against 1.32 s simulated."""
import glob
import json
import subprocess
import sys

import h5py
import numpy as np

pipebench, job, run, results = sys.argv[1:5]
sets = sys.argv[5:]
plan = json.loads(subprocess.run([pipebench, "plan", job, "--run", run, "--format", "json", *sets], capture_output=True,
                                 text=True, check=True).stdout)
planned = plan["runs"][0]["simulated"]["iteration_s"]
with h5py.File(glob.glob(f"{results}/*/*.h5")[0]) as f:
    g = f["runs"][run]
    steps = g["step_time_s"][:][g["is_warmup"][:] == 0]
    measured = float(np.median(steps))
print(f"{run}: planned {planned:.6f} s, measured {measured:.6f} s")
ok = abs(measured - planned) <= 1e-6 * planned
print("PASS" if ok else "FAIL: the plan is not the virtual clock's step")
sys.exit(0 if ok else 1)
