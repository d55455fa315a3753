#!/usr/bin/env python3
"""Checks the outcome of tests/slurm/test_nightly.sh.
    check_nightly.py WORK DATE REPORT_JOB DIRECT_JOB WORKLOAD_JOB..."""
import glob
import json
import sys

import h5py

work, date, report_id, direct_id = sys.argv[1:5]
workload_ids = sys.argv[5:]
problems = []


def check(cond, what):
    if not cond:
        problems.append(what)


def s(v):
    return v.decode() if isinstance(v, bytes) else str(v)


# Job states and times recorded by the driver (scontrol show job).
jobs = {}
for line in open(f"{work}/jobs.txt"):
    fields = dict(f.split("=", 1) for f in line.split())
    jobs[fields["JobId"]] = fields
for j in workload_ids:
    check(jobs[j]["StartTime"] <= jobs[report_id]["StartTime"], f"report job started before workload job {j} started")
    check(jobs[j]["EndTime"] <= jobs[report_id]["StartTime"], f"report job started before workload job {j} ended")
check(jobs[report_id]["JobState"] == "COMPLETED", f"report job state {jobs[report_id]['JobState']}")

# Every workload wrote a file carrying its Slurm job id.
files = sorted(glob.glob(f"{work}/results/*/nightly-{date}/*.h5"))
check(len(files) == 3, f"expected 3 nightly results files, found {files}")
status = {}
for path in files:
    with h5py.File(path, "r") as f:
        jid = s(f["provenance"].attrs["slurm_job_id"])
        check(jid in workload_ids, f"{path}: slurm_job_id {jid!r} is not one of the workload jobs")
        check(path.endswith(f"-{jid}.h5"), f"{path}: not named after the Slurm job id")
        check(s(f["provenance"].attrs["slurm_job_nodelist"]) == "localhost", f"{path}: node list")
        status[s(f.attrs["job_name"])] = s(f.attrs["status"])
check(status.get("nightly_sim_pipeline") == "ok", f"sim workload status {status}")
check(status.get("nightly_cpu_pipeline") == "ok", f"cpu workload status {status}")
check(status.get("nightly_undersized") == "failed", f"failing workload status {status}")

# The report lists both healthy workloads' runs and the failed one as failed.
summary = json.load(open(f"{work}/reports/{date}/summary.json"))
runs = {(r["job"], r["run"]): r for r in summary["runs"]}
for key in [("nightly_sim_pipeline", "one_f_one_b"), ("nightly_sim_pipeline", "baseline"),
            ("nightly_cpu_pipeline", "two_stage"), ("nightly_cpu_pipeline", "baseline"),
            ("nightly_cpu_pipeline", "two_stage_dp2")]:
    check(key in runs and runs[key]["status"] == "ok", f"report lacks {key} as ok")
bad = runs.get(("nightly_undersized", "too_big"))
check(bad is not None and bad["status"] == "failed" and bad["failure_kind"] == "oom", f"failed run in report: {bad}")
check(summary["missing_jobs"] == [], f"missing jobs {summary['missing_jobs']}")
html = open(f"{work}/reports/{date}/index.html").read()
check("nightly_undersized" in html and "oom on rank" in html, "the failed workload is not shown in index.html")

# The direct sbatch with 4 tasks.
direct = glob.glob(f"{work}/direct/*/*-{direct_id}.h5")
check(len(direct) == 1, f"direct sbatch results: {direct}")
if direct:
    with h5py.File(direct[0], "r") as f:
        check(len(f["provenance"].attrs["hostnames"]) == 4, "direct job did not run 4 ranks")
        check(s(f["runs/onef1b4"].attrs["status"]) == "ok", "4-stage run on 4 Slurm tasks")
        check(s(f["runs/needs8"].attrs["status"]) == "skipped", "8-stage run is skipped on 4 tasks")

for p in problems:
    print("FAIL:", p)
print(f"{len(problems)} problems")
sys.exit(1 if problems else 0)
