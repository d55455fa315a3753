#!/usr/bin/env python3
"""`pipebench compare` with the history index (issue 67; docs/reproduce.md):
files the index knows unchanged are read without the isolated pre-read and the
hash, and compare.json is the same, byte for byte but for generated_utc, as
with --no-index in every case:

  default_none   no index beside the reference: none made, every file read
  rebuilt        after `pipebench index rebuild`: every file known ("4 ... knew unchanged, 0 read")
  replaced       a candidate rewritten in place (same inode, size and mtime)
                 with its steps 25% slower: read again, its new sha256 cited,
                 its performance not reproduced
  damaged        a candidate truncated while its row stays: skipped with the
                 reason, as without the index
  named          --index PATH where none is: made, then used
  bad_name       --index x.h5: exit 2

Usage: check_compare_index.py PIPEBENCH NIGHTLY.h5 OUTDIR
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys

import h5py

RUN = "pipe"
failures = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail and not ok else ''}")
    if not ok:
        failures.append(name)


def night(src, dest, d):
    """A copy of `src` as another measurement (its own results_id) on day d."""
    shutil.copy(src, dest)
    with h5py.File(dest, "r+") as f:
        f.attrs["created_utc"] = f"2026-11-{d:02d}T03:00:00Z"
        f.attrs["results_id"] = f"{d:016x}"
    return dest


def compare(pipebench, files, out, *extra):
    p = subprocess.run([pipebench, "compare", *files, "-o", out, *extra], capture_output=True, text=True)
    result = None
    if os.path.exists(os.path.join(out, "compare.json")):
        with open(os.path.join(out, "compare.json")) as f:
            result = json.load(f)
        result.pop("generated_utc", None)
    return p, result


def main():
    pipebench, src, out = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(out, ignore_errors=True)
    folder = os.path.join(out, "nights")
    os.makedirs(folder)
    files = [night(src, os.path.join(folder, f"night{d}.h5"), d) for d in range(1, 5)]
    index = os.path.join(folder, ".pipebench-index.sqlite")
    runs = [0]

    def same(name, expect_note, *extra):
        runs[0] += 1
        _, ref = compare(pipebench, files, os.path.join(out, f"{runs[0]}_ref"), "--no-index")
        p, got = compare(pipebench, files, os.path.join(out, f"{runs[0]}_{name}"), *extra)
        ok = p.returncode == 0 and got == ref and ref is not None and expect_note in p.stderr
        check(name, ok, f"rc {p.returncode}; same compare.json: {got == ref}; stderr: {p.stderr.strip()[-600:]}")
        return p, got

    p, _ = same("default_none", "")
    check("no index made by default", not os.path.exists(index) and "history index" not in p.stderr, p.stderr)
    r = subprocess.run([pipebench, "index", "rebuild", folder], capture_output=True, text=True)
    check("index rebuild", r.returncode == 0 and os.path.exists(index), r.stderr)
    _, got = same("rebuilt", "4 file(s) it knew unchanged, 0 read and added")
    # Copies of one file: never judged different. "reproduced" where the fixture's steps are steady;
    # "inconclusive" where the machine that made it was noisy (its per-step bubble's interval is then
    # wider than ±5% even against itself: seen in CI on a loaded machine).
    check("copies not 'not reproduced' before the change",
          got["candidates"][0]["runs"][0]["verdict"] in ("reproduced", "inconclusive"),
          json.dumps(got["candidates"][0]["runs"][0])[:400])

    # Rewritten in place: the same inode and size, its mtime put back.
    n2 = files[1]
    st = os.stat(n2)
    with h5py.File(n2, "r+") as f:
        r = f["runs"][RUN]
        r["step_time_s"][...] = r["step_time_s"][()] * 1.25
    os.utime(n2, ns=(st.st_atime_ns, st.st_mtime_ns))
    st2 = os.stat(n2)
    check("replaced keeps inode, size, mtime",
          (st2.st_ino, st2.st_size, st2.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns))
    _, got = same("replaced", "3 file(s) it knew unchanged, 1 read and added")
    with open(n2, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    cand = got["candidates"][0]
    check("replaced: its new sha256 cited", cand["sha256"] == sha, f"{cand['sha256']} vs {sha}")
    check("replaced: not reproduced", cand["runs"][0]["verdict"] == "not reproduced", json.dumps(cand["runs"][0])[:400])

    with open(files[3], "r+b") as f:
        f.truncate(2000)
    p, got = same("damaged", "3 file(s) it knew unchanged, 0 read and added")
    check("damaged candidate skipped with a reason",
          "skipped" in p.stderr and "night4.h5" in p.stderr and len(got["skipped"]) == 1, p.stderr)

    named = os.path.join(out, "named.sqlite")
    same("named_cold", "0 file(s) it knew unchanged, 3 read and added", "--index", named)
    same("named_warm", "3 file(s) it knew unchanged, 0 read and added", "--index", named)

    p = subprocess.run([pipebench, "compare", *files[:2], "-o", os.path.join(out, "bad"), "--index", "x.h5"],
                       capture_output=True, text=True)
    check("bad_name", p.returncode == 2 and not os.path.exists("x.h5"), p.stderr)

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
