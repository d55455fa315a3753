#!/usr/bin/env python3
"""`pipebench tune --verify`: the written workload runs under the launcher for
--steps counted steps, its report is written, every run has a decision
(a 2-stage run's says it rests on fewer than 30 steps) and its plan beside
its measurement (the memory exact on the cpu backend).
    check_verify.py PIPEBENCH MPIEXEC JOB OUTDIR"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

pipebench, mpiexec, job, out = sys.argv[1:5]
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
shutil.rmtree(out, ignore_errors=True)
os.makedirs(out)
p = subprocess.run([pipebench, "tune", os.path.abspath(job), "--ranks", "2", "--num-microbatches", "4", "-o", "tuned.toml",
                    "--verify", "--steps", "4", "--launcher", f"{mpiexec} -np {{ranks}} --oversubscribe", "--results", "results"],
                   cwd=out, capture_output=True, text=True, env=env)
print(p.stdout[-4000:], p.stderr[-2000:])
assert p.returncode == 0, p.returncode
assert "verify: decisions (4 counted steps)" in p.stdout
summaries = glob.glob(f"{out}/reports/tune/*/tune-verify-*/summary.json")
assert len(summaries) == 1, summaries
runs = json.load(open(summaries[0]))["runs"]
names = {r["run"] for r in runs}
written = [l.split('"')[1] for l in open(f"{out}/tuned.toml") if l.startswith("name = ") and "_tuned" not in l]
assert names == set(written), (names, written)
for r in runs:
    assert r["status"] == "ok" and r["decision"] in ("feasible", "not_feasible", "inconclusive", "not_applicable"), r
    assert r["metrics"]["counted_steps"] == 4 and r["metrics"]["short_run"], r["metrics"]
    if r["workload"]["pipeline_size"] > 1:
        assert any(w.startswith("steps: 4 counted step(s)") for w in r["decision_reasons"]), r["decision_reasons"]
    # How right the prediction was: each run's plan beside its measurement,
    # in the report and on the console. On the cpu backend the planner's
    # memory is the tracker's to the byte; its step rests on a modelled speed.
    pred = r["prediction"]
    rows = {row["metric"]: row for row in pred["rows"]}
    mem = rows["peak memory, largest rank"]
    assert mem["planned"] == mem["measured"] == r["metrics"]["peak_mem_bytes"]["max"], (mem, r["metrics"]["peak_mem_bytes"])
    assert rows["step time (median)"]["measured"] == r["metrics"]["step_time_s"]["median"], rows
    assert "not this machine's" in pred["basis"], pred["basis"]
    assert re.search(rf"^  {re.escape(r['run'])} +step time \(median\) ", p.stdout, re.M), r["run"]
assert p.stdout.count("verify: the plan beside the measurement (the step predicted from") == 1, p.stdout
print("PASS")
