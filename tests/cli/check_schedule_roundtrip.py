#!/usr/bin/env python3
"""check_schedule_roundtrip.py PIPEBENCH JOB.toml OUTDIR

For every training run of JOB and both CSV forms: `plan --run R
--export-schedule csv` (compute only) or `csv-comms` (PyTorch's compute_comms:
sends, receives and, with replicas, REDUCE_GRAD) writes its schedule; the
same run planned with `--set run.R.schedule=file:CSV` (and its
virtual_stages_per_rank) must have the identical per-rank action lists
(`schedule_text` of `plan --format json`), the same unit-cost simulation and
the same cost-weighted one (`simulated`: with replicas the gradient
synchronisation, placed by the file's REDUCE_GRAD cells in the csv-comms
form), and the results must not depend on where the CSV came from.
"""
import json
import os
import subprocess
import sys


def plan_json(pipebench, job, *args):
    out = subprocess.run([pipebench, "plan", job, "--format", "json", *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main():
    pipebench, job, out = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    problems = []
    runs = [r for r in plan_json(pipebench, job)["runs"] if r["mode"] == "train"]
    for r in runs:
        name = r["name"]
        for form in ("csv", "csv-comms"):
            csv = os.path.join(out, f"{name}.{form}.csv")
            text = subprocess.run([pipebench, "plan", job, "--run", name, "--export-schedule", form], check=True,
                                  capture_output=True, text=True).stdout
            with open(csv, "w") as f:
                f.write(text)
            back = plan_json(pipebench, job, "--run", name, "--set", f"run.{name}.schedule=file:{csv}",
                             "--set", f"run.{name}.virtual_stages_per_rank={r['virtual_stages_per_rank']}")["runs"][0]
            same = (back["schedule_text"] == r["schedule_text"] and back["unit"] == r["unit"]
                    and back["simulated"] == r["simulated"])
            comms = sum(c.count("SEND") + c.count("RECV") + c.count("REDUCE_GRAD") for c in text.split(","))
            print(f"{name}: {r['schedule']} -> {form}, {len(text.splitlines())} lines, {comms} transfer/gradient cells "
                  f"-> {back['schedule']}: {'identical' if same else 'DIFFERENT'}")
            if form == "csv-comms" and r["pipeline_size"] > 1 and comms == 0:
                problems.append(f"{name}: the csv-comms form has no transfers")
            if not same:
                problems.append(f"{name} ({form})")
    if len(runs) < 2:
        problems.append(f"only {len(runs)} training runs in {job}")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
