#!/usr/bin/env python3
"""check_trend.py REPORT_DIR RUN VERDICT [--changes TEXT] [--files N]

summary.json's trend of RUN: its verdict must be VERDICT; with --changes, the
series' `changes` must contain TEXT; with --files, the series must hold N files.
"""
import argparse
import json
import sys

ap = argparse.ArgumentParser()
ap.add_argument("report")
ap.add_argument("run")
ap.add_argument("verdict")
ap.add_argument("--changes")
ap.add_argument("--files", type=int)
a = ap.parse_args()
summary = json.load(open(a.report + "/summary.json"))
trends = [r["trend"] for r in summary["runs"] if r["run"] == a.run and "trend" in r]
print(f"{a.run}: {trends}")
ok = [t["verdict"] for t in trends] == [a.verdict]
if ok and a.changes is not None:
    ok = a.changes in trends[0]["changes"]
if ok and a.files is not None:
    ok = trends[0]["files"] == a.files
sys.exit(0 if ok else 1)
