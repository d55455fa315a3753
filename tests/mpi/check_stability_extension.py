#!/usr/bin/env python3
"""The stability extension (issue 66; train.max_repeats, docs/runner.md "Steps"): a training run whose
stability verdict is still open after `repeats` (30) counted steps goes on to max_repeats (50), says so
on the console, records it in the file and in its decision; one that passes at 30 stops there; and
--set train.max_repeats=30 turns the rule off. Deterministic: the sim backend's virtual clock with
seeded jitter (tests/data/runner/stability_extension.toml).
    check_stability_extension.py PIPEBENCH MPIEXEC JOB OUTDIR"""
import glob
import os
import shutil
import subprocess
import sys

import h5py

pipebench, mpiexec, job, out = sys.argv[1:5]
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
shutil.rmtree(out, ignore_errors=True)
failures = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def run(name, *sets):
    d = os.path.join(out, name)
    args = [mpiexec, "-np", "2", "--oversubscribe", pipebench, "run", job, "-o", d]
    for s in sets:
        args += ["--set", s]
    p = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    check(p.returncode == 0, f"{name}: exit {p.returncode} {p.stderr[-500:]}")
    path = glob.glob(f"{d}/*/*.h5")[0]
    rep = os.path.join(d, "report")
    subprocess.run([pipebench, "report", path, "-o", rep], capture_output=True, env=env, check=True)
    reasons = open(os.path.join(rep, "report.md")).read()
    with h5py.File(path) as f:
        g = f["runs/noisy"]
        counted = int((g["is_warmup"][:] == 0).sum())
        return p.stdout, counted, int(g.attrs["max_repeats"]), int(g.attrs["repeats_extended"]), reasons


stdout, counted, most, extended, reasons = run("open")
check(counted == 50 and most == 50 and extended == 20, f"open at 30: went on to 50 ({counted} counted, max {most}, +{extended})")
check("step time stability still open after 30 counted steps: going on to 50" in stdout, "open at 30: said on the console")
check("[noisy] step 51/51" in stdout, "open at 30: the progress counts to the extended end")
check("open after 30 counted steps, extended to 50: train.max_repeats" in reasons, "open at 30: the decision says so")

stdout, counted, most, extended, _ = run("opt_out", "train.max_repeats=30")
check(counted == 30 and most == 30 and extended == 0, f"max_repeats = repeats: no extension ({counted} counted)")
check("going on to" not in stdout, "max_repeats = repeats: nothing said")

stdout, counted, most, extended, reasons = run("decided", "device.sim_jitter_seed=3")
check(counted == 30 and most == 50 and extended == 0, f"decided at 30: stopped there ({counted} counted)")
check("stability: pass" in reasons, "decided at 30: passes")
print("FAIL" if failures else "PASS")
sys.exit(1 if failures else 0)
