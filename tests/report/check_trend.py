#!/usr/bin/env python3
"""check_trend.py REPORT_DIR RUN VERDICT: summary.json's trend verdict of RUN."""
import json
import sys

summary = json.load(open(sys.argv[1] + "/summary.json"))
verdicts = [r["trend"]["verdict"] for r in summary["runs"] if r["run"] == sys.argv[2] and "trend" in r]
print(f"{sys.argv[2]}: {verdicts}")
sys.exit(0 if verdicts == [sys.argv[3]] else 1)
