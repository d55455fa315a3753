#!/usr/bin/env python3
"""Everything trended: peak memory, numerics and the bubble (issue 14).

From one real cpu results file (two runs), writes a history of three copies a
night apart, then three newest files, each with one change a code change
could make: peak memory doubled (the same workload), a loss that differs in
the 9th digit, one rank's peak memory 4 KiB higher (the maximum over ranks
unchanged), and a measured bubble 1.5 points higher. `pipebench report
--fail-on-regression` on each must flag exactly that change with its figures
(memory and numerics exit 6; the bubble is reported in points), and on an
unchanged newest copy flag nothing.

Usage: check_alerts.py PIPEBENCH CPU_RESULTS.h5 OUTDIR
"""
import os
import shutil
import sys

import h5py
import numpy as np

from nightly_report import nightly_report, run_record


def night(src, dest, day, change=None):
    shutil.copy(src, dest)
    with h5py.File(dest, "r+") as f:
        f.attrs["created_utc"] = f"2026-11-{day:02d}T03:00:00Z"
        r = f["runs"]["p2_1f1b"]
        if change == "memory":
            for name in ["peak_mem_bytes", "peak_mem_activations_bytes"]:
                data = r[name][()]
                r[name][...] = data * 2 if name == "peak_mem_bytes" else data + r["peak_mem_bytes"][()]
            r.attrs["peak_mem_max_bytes"] = np.uint64(int(r.attrs["peak_mem_max_bytes"]) * 2)
        elif change == "rank_memory":  # the smaller rank grows by 4 KiB: the max over ranks does not move
            for name in ["peak_mem_bytes", "peak_mem_activations_bytes"]:
                data = r[name][()]
                data[1] += 4096
                r[name][...] = data
        elif change == "numerics":
            loss = r["loss"][()]
            loss[2] = np.nextafter(loss[2], np.inf) * (1 + 1e-9)
            r["loss"][...] = loss
        elif change == "bubble":
            r["bubble_measured"][...] = r["bubble_measured"][()] + 0.015
            r.attrs["bubble_measured_median"] = r.attrs["bubble_measured_median"] + 0.015


def report(pipebench, newest, history, out):
    p, summary = nightly_report(pipebench, newest, [history], out)
    trend = run_record(summary, "p2_1f1b")["trend"]
    report.console = p.stdout + p.stderr
    report.markdown = open(os.path.join(out, "report.md")).read()
    return p.returncode, trend


def main():
    pipebench, src, out = sys.argv[1:4]
    shutil.rmtree(out, ignore_errors=True)
    hist = os.path.join(out, "history")
    os.makedirs(hist)
    for day in (1, 2, 3):
        night(src, os.path.join(hist, f"night{day}.h5"), day)
    problems = []
    for change in (None, "memory", "rank_memory", "numerics", "bubble"):
        name = change or "unchanged"
        newest = os.path.join(out, f"{name}.h5")
        night(src, newest, 4, change)
        rc, t = report(pipebench, newest, hist, os.path.join(out, f"report_{name}"))
        print(f"{name}: exit {rc}; alerts {t['alerts']}; bubble {t['bubble_delta_pts']:+.2f} pts; verdict {t['verdict']}")
        want_rc = 6 if change in ("memory", "rank_memory", "numerics") else 0
        if rc != want_rc:
            problems.append(f"{name}: exit {rc}, expected {want_rc}")
        if change is None and t["alerts"]:
            problems.append(f"unchanged: alerts {t['alerts']}")
        if change == "memory" and not (t["memory_increased"] and any("memory change" in a and "+100.0%" in a for a in t["alerts"])):
            problems.append(f"memory: not flagged as +100%: {t['alerts']}")
        if change == "rank_memory" and not (t["memory_increased"] and len(t["alerts"]) == 1
                                            and t["alerts"][0].startswith("memory change: rank 1 peak")
                                            and "(+4096 B, " in t["alerts"][0]):
            problems.append(f"rank_memory: rank 1's growth not flagged byte-exact: {t['alerts']}")
        # The cause on the console and beside the verdict, not only in the file (issue 33).
        if change in ("memory", "rank_memory", "numerics"):
            cause = "memory change" if change != "numerics" else "numerics changed"
            if not any(line.strip().startswith("alert:") and cause in line for line in report.console.splitlines()):
                problems.append(f"{name}: no console line with the alert: {report.console!r}")
            if "exit 6 (--fail-on-regression)" not in report.console or cause not in report.console.split("exit 6")[1]:
                problems.append(f"{name}: the exit-6 line does not give the cause: {report.console!r}")
            flag = "memory grew" if change != "numerics" else "numerics changed"
            if flag not in report.markdown.split("## Trends")[0]:
                problems.append(f"{name}: the verdict table does not say '{flag}'")
        if t["throughput_change"] != 0.0 or t["slowest_stage_change"] != 0.0:
            problems.append(f"{name}: throughput {t['throughput_change']}, slowest stage {t['slowest_stage_change']}: expected 0")
        if change == "numerics" and not (t["numerics_changed"] and any("loss at step 2" in a for a in t["alerts"])):
            problems.append(f"numerics: not flagged at step 2: {t['alerts']}")
        if change == "bubble" and abs(t["bubble_delta_pts"] - 1.5) > 1e-6:
            problems.append(f"bubble: {t['bubble_delta_pts']} points, expected 1.5")
        if change != "bubble" and abs(t["bubble_delta_pts"]) > 1e-9:
            problems.append(f"{name}: bubble moved {t['bubble_delta_pts']} points")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
