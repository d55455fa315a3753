#!/usr/bin/env python3
"""A trend verdict belongs to the file it is shown for (issue 33, defects 2-4).

From one real nightly results file, writes nights a day apart (copies with
their creation time set, some 30% slower) and reports them as a nightly job
would. Each case must hold:

  older_slow     re-reporting an older slow night with later normal nights in
                 --history judges the slow file against the nights before it:
                 regression, 6 earlier files, the later ones not its history
  same_second    a normal night created in the same second as a slow one: the
                 slow one is not its history (order unknown): no change
  clock_skew     a slow file from a node whose clock runs an hour ahead (its
                 creation time after tonight's): not tonight's history
  newer_partial  the same with a newer .h5.partial (a killed launch) in history
  history_only   tonight's workload changed (a new series) while the old series'
                 newest night is slow: exit 0, any_regression false, the old
                 series listed as history only; also for another job's history
  same_file      tonight through a symlinked folder, a `..` path and a byte copy
                 in --history: counted once (3 earlier files, not 4 or 5)

Usage: check_trend_identity.py PIPEBENCH NIGHTLY.h5 OUTDIR
"""
import os
import shutil
import sys

import h5py

from nightly_report import nightly_report

RUN = "pipe"


def night(src, dest, stamp, slow=1.0, fingerprint=None, job=None):
    shutil.copy(src, dest)
    with h5py.File(dest, "r+") as f:
        f.attrs["created_utc"] = stamp
        if job:
            f.attrs["job_name"] = job
        r = f["runs"][RUN]
        r["step_time_s"][...] = r["step_time_s"][()] * slow
        for k in ("step_time_median_s", "step_time_min_s", "step_time_max_s", "step_time_p90_s"):
            r.attrs[k] = r.attrs[k] * slow
        if fingerprint:
            r.attrs["workload_fingerprint"] = fingerprint
    return dest


def day(d, hh="03:00:00"):
    return f"2026-11-{d:02d}T{hh}Z"


def report(pipebench, newest, history, out):
    p, summary = nightly_report(pipebench, newest, history, out)
    trends = [r["trend"] for r in summary["runs"] if r["run"] == RUN and "trend" in r]
    return p.returncode, trends, summary


def main():
    pipebench, src, out = sys.argv[1:4]
    shutil.rmtree(out, ignore_errors=True)
    problems = []

    def expect(case, cond, what):
        print(f"{case}: {'ok' if cond else 'FAIL'}: {what}")
        if not cond:
            problems.append(f"{case}: {what}")

    # older_slow: nights 1-6 normal, 7 slow, 8 normal, all in one history folder.
    h = os.path.join(out, "history")
    os.makedirs(h)
    for d in range(1, 7):
        night(src, os.path.join(h, f"n{d}.h5"), day(d))
    slow = night(src, os.path.join(h, "n7.h5"), day(7), slow=1.3)
    night(src, os.path.join(h, "n8.h5"), day(8))
    rc, t, _ = report(pipebench, slow, [h], os.path.join(out, "older_slow"))
    expect("older_slow", len(t) == 1 and t[0]["verdict"] == "regression" and t[0]["history_files"] == 6
           and t[0].get("later_files") == 1 and t[0].get("judged_file") == slow and rc == 6,
           f"exit {rc}, trend {[(x['verdict'], x['history_files'], x.get('later_files')) for x in t]}")

    # same_second: tonight (normal) shares its second with the slow night 7.
    h2 = os.path.join(out, "history_same_second")
    os.makedirs(h2)
    for d in range(1, 7):
        night(src, os.path.join(h2, f"n{d}.h5"), day(d))
    night(src, os.path.join(h2, "a_slow.h5"), day(7), slow=1.3)
    tonight = night(src, os.path.join(h2, "b_tonight.h5"), day(7))
    rc, t, _ = report(pipebench, tonight, [h2], os.path.join(out, "same_second"))
    expect("same_second", len(t) == 1 and t[0]["verdict"] == "no change" and t[0].get("same_second_files") == 1
           and t[0]["history_files"] == 6 and rc == 0,
           f"exit {rc}, trend {[(x['verdict'], x['history_files'], x.get('same_second_files')) for x in t]}")

    # clock_skew and newer_partial: a slow file stamped after tonight.
    for case, name in (("clock_skew", "skewed.h5"), ("newer_partial", "killed.h5.partial")):
        hs = os.path.join(out, "history_" + case)
        os.makedirs(hs)
        for d in range(1, 7):
            night(src, os.path.join(hs, f"n{d}.h5"), day(d))
        night(src, os.path.join(hs, name), day(7, "04:00:00"), slow=1.3)
        tonight = night(src, os.path.join(out, case + "_tonight.h5"), day(7, "03:00:00"))
        rc, t, _ = report(pipebench, tonight, [hs], os.path.join(out, case))
        expect(case, len(t) == 1 and t[0]["verdict"] == "no change" and t[0].get("later_files") == 1 and rc == 0,
               f"exit {rc}, trend {[(x['verdict'], x['history_files'], x.get('later_files')) for x in t]}")

    # history_only: the old series (its newest night slow) exists only in history.
    for case, kw in (("history_only_series", {"fingerprint": "0123456789abcdef"}), ("history_only_job", {"job": "other"})):
        ho = os.path.join(out, "history_" + case)
        os.makedirs(ho)
        for d in range(1, 5):
            night(src, os.path.join(ho, f"n{d}.h5"), day(d), **kw)
        night(src, os.path.join(ho, "n5.h5"), day(5), slow=1.3, **kw)
        tonight = night(src, os.path.join(out, case + "_tonight.h5"), day(6))
        rc, t, summary = report(pipebench, tonight, [ho], os.path.join(out, case))
        listed = [s["run"] for s in summary.get("history_only_series", [])]
        expect(case, rc == 0 and summary["any_regression"] is False and listed == [RUN]
               and [x["verdict"] for x in t] == ["insufficient history" if "job" in case else "new series"],
               f"exit {rc}, any_regression {summary['any_regression']}, history only {listed}, "
               f"tonight {[x['verdict'] for x in t]}")

    # same_file: tonight reaches the report four ways; it counts once.
    sf = os.path.join(out, "same_file")
    nights = os.path.join(sf, "nights")
    os.makedirs(nights)
    for d in range(1, 4):
        night(src, os.path.join(nights, f"n{d}.h5"), day(d))
    tonight = night(src, os.path.join(nights, "tonight.h5"), day(4))
    os.symlink(nights, os.path.join(sf, "link"))
    os.makedirs(os.path.join(sf, "copies"))
    shutil.copy(tonight, os.path.join(sf, "copies", "tonight-copy.h5"))
    rc, t, _ = report(pipebench, tonight,
                      [os.path.join(sf, "link"), os.path.join(nights, "..", "nights"), os.path.join(sf, "copies")],
                      os.path.join(out, "same_file_report"))
    expect("same_file", len(t) == 1 and t[0]["files"] == 4 and t[0]["history_files"] == 3 and rc == 0,
           f"exit {rc}, trend {[(x['verdict'], x['files'], x['history_files']) for x in t]}")

    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
