#!/usr/bin/env python3
"""Runs `pipebench probe` on a real backend and checks that its answer is
exact and recorded:
  - the /probe group of the HDF5 file holds every trial and the result;
  - at most ceil(log2(hi)) + 1 trials;
  - a run at max_micro_batch succeeds and one at max + 1 fails with OOM;
  - the planner's estimate fits at the maximum and exceeds capacity at max + 1.
    check_probe.py PIPEBENCH MPIEXEC JOB RUN OUTDIR [--set k=v ...]"""
import glob
import json
import math
import os
import shutil
import subprocess
import sys

import h5py

pipebench, mpiexec, job, run, out = sys.argv[1:6]
sets = sys.argv[6:]
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
shutil.rmtree(out, ignore_errors=True)
launcher = f"{mpiexec} -np {{ranks}} --oversubscribe"
hi = 256
probe = subprocess.run([pipebench, "probe", job, "--run", run, "--steps", "1", "--hi", str(hi), "--launcher", launcher,
                        "-o", out] + sets, capture_output=True, text=True, env=env)
print(probe.stdout, probe.stderr)
assert probe.returncode == 0, f"probe exited {probe.returncode}"
files = [f for f in glob.glob(f"{out}/**/probe/*.h5", recursive=True)]
assert len(files) == 1, files
with h5py.File(files[0], "r") as f:
    g = f["probe"]
    mx, rec = int(g.attrs["max_micro_batch"]), int(g.attrs["recommended_micro_batch"])
    trials = list(zip(g["micro_batch_size"][:], [o.decode() if isinstance(o, bytes) else o for o in g["outcome"][:]]))
    assert g["peak_mem_bytes"].shape == (len(trials), int(g.attrs["ranks"]))
print(f"max {mx}, recommended {rec}, trials {trials}")
assert 1 <= mx < hi, mx
assert rec == max(1, int(0.8 * mx)), rec
assert len(trials) <= math.ceil(math.log2(hi)) + 1, len(trials)
assert (mx, "ok") in trials and (mx + 1, "oom") in trials, "the probe itself saw the limit"

def run_at(b):
    return subprocess.run([mpiexec, "-np", "2", "--oversubscribe", pipebench, "run", job, "--run", run, "--set",
                           f"run.{run}.micro_batch_size={b}", "--set", "train.warmup=0", "--set", "train.repeats=1",
                           "-o", f"{out}/check"] + sets, capture_output=True, text=True, env=env)

at, above = run_at(mx), run_at(mx + 1)
assert at.returncode == 0, f"run at {mx} exited {at.returncode}:\n{at.stdout[-2000:]}"
assert above.returncode == 5 and "out of memory" in above.stdout, f"run at {mx + 1}:\n{above.stdout[-2000:]}"

def planned_fraction(b):
    p = subprocess.run([pipebench, "plan", job, "--run", run, "--format", "json", "--set",
                        f"run.{run}.micro_batch_size={b}"] + sets, capture_output=True, text=True, check=True)
    return max(m["capacity_fraction"] for m in json.loads(p.stdout)["runs"][0]["memory"])

fa, fb = planned_fraction(mx), planned_fraction(mx + 1)
print(f"planner: {fa:.4f} of capacity at {mx}, {fb:.4f} at {mx + 1}")
assert fa <= 1.0 < fb, "the planner predicts a different limit"
# `pipebench report` shows the probe.
rep = subprocess.run([pipebench, "report", files[0], "-o", f"{out}/report"], capture_output=True, text=True)
assert rep.returncode == 0, rep.stderr
md = open(f"{out}/report/report.md").read()
assert "### Micro-batch probe" in md and f"max_micro_batch = {mx}, recommended_micro_batch = {rec}" in md, md[:2000]
print("PASS")
