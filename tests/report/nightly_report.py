"""The nightly report as the trend tests run it, shared by them:
`pipebench report NEWEST --history H... -o OUT --fail-on-regression`."""
import json
import os
import subprocess


def nightly_report(pipebench, newest, history, out):
    """Returns the finished process (output captured) and its summary.json."""
    cmd = [pipebench, "report", newest, "-o", out, "--fail-on-regression"]
    for h in history:
        cmd += ["--history", h]
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p, json.load(open(os.path.join(out, "summary.json")))


def run_record(summary, run):
    """summary.json's record of run RUN (the first file's)."""
    return next(r for r in summary["runs"] if r["run"] == run)
