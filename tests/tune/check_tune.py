#!/usr/bin/env python3
"""`pipebench tune` against real trials (label: tune, mpi):
  - tune writes a workload that `pipebench plan` accepts unchanged;
  - --confirm finds the predicted limit of the chosen run in at most 3 trials;
  - the planner's largest micro-batch of the written 2-stage run equals what
    `pipebench probe` finds by bisection over [1, 256].
    check_tune.py PIPEBENCH MPIEXEC JOB OUTDIR [--set k=v ...]"""
import json
import os
import re
import shutil
import subprocess
import sys

pipebench, mpiexec, job, out = sys.argv[1:5]
sets = sys.argv[5:]
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
shutil.rmtree(out, ignore_errors=True)
os.makedirs(out)
launcher = f"{mpiexec} -np {{ranks}} --oversubscribe"
workload = f"{out}/tuned.toml"

tune = subprocess.run([pipebench, "tune", job, "--ranks", "2", "--num-microbatches", "4", "--format", "json", "-o", workload,
                       "--confirm", "--launcher", launcher, "--results", f"{out}/results"] + sets,
                      capture_output=True, text=True, env=env)
print(tune.stderr)
assert tune.returncode == 0, f"tune exited {tune.returncode}"
answer = json.loads(tune.stdout)
best = answer["best"]
print("answer:", answer["answer"])
assert answer["answer"].startswith("smallest fitting p = "), answer["answer"]

# --confirm: the predicted limit, in at most 3 trials.
m = re.search(r"confirm: max_micro_batch = (\d+) after (\d+) trial\(s\)", tune.stderr)
assert m, tune.stderr
found, trials = int(m.group(1)), int(m.group(2))
# A sharded layout is probed as one replica, its optimizer state whole: the planner's limit for that.
predicted = best["replica_max_micro_batch"] if best.get("optimizer_sharding", "none") != "none" else best["max_micro_batch"]
print(f"confirm: predicted {predicted}, found {found} in {trials} trials")
assert found == predicted, "the planner's prediction was not confirmed"
assert trials <= 3, trials

# The written workload is a workload.
plan = subprocess.run([pipebench, "plan", workload, "--format", "json"], capture_output=True, text=True)
assert plan.returncode == 0, plan.stderr
runs = {r["name"]: r for r in json.loads(plan.stdout)["runs"]}
assert set(runs) == set(answer["workload"]["runs"]), (runs.keys(), answer["workload"])

# The 2-stage run: tune's predicted limit against a full bisection.
two = [c for c in [best] + answer["runners_up"] if c["pipeline_size"] == 2]
assert two, "no 2-stage run was written"
name = next(n for n in answer["workload"]["runs"] if runs[n]["pipeline_size"] == 2)
assert runs[name]["num_microbatches"] == two[0]["num_microbatches"]
probe = subprocess.run([pipebench, "probe", workload, "--run", name, "--steps", "1", "--hi", "256", "--launcher", launcher,
                        "-o", f"{out}/results"], capture_output=True, text=True, env=env)
print(probe.stdout[-3000:], probe.stderr[-2000:])
assert probe.returncode == 0, probe.returncode
bisected = int(re.search(r"max_micro_batch = (\d+)", probe.stdout).group(1))
print(f"2-stage run {name}: tune predicts {two[0]['max_micro_batch']}, the probe's bisection finds {bisected}")
assert bisected == two[0]["max_micro_batch"]
print("PASS")
