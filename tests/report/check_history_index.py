#!/usr/bin/env python3
"""The history index is a cache: every verdict with it is the verdict without it
(issue 67; docs/reports.md, "History index").

From one real nightly results file, writes eight nights a day apart (the last
one 30% slower) and reports the last against the others, with --no-index as
the reference. summary.json must be identical to the reference's, byte for
byte but for generated_utc, in every case:

  cold, warm        no index, then the index the first report made (the second
                    report reads no history file: "7 history file(s) from it, 0 read")
  replaced          a night rewritten in place (same name, same inode, same size,
                    its mtime put back) with other step times: read again, its
                    new figures used (the stale row never trusted)
  touched           a night's mtime changed, bytes the same: taken from the
                    index after its sha256 matched
  damaged_night     a night truncated: skipped with the reason, as without index
  vanished          a night deleted: gone from the trends and from the index
  moved             the folder copied elsewhere with its index (another
                    machine's paths): "made for the folder ...: rebuilt"
  corrupt           the index overwritten with garbage, and truncated: rebuilt
  old_schema        schema_version 0 in meta: rebuilt
  foreign           --index naming somebody else's SQLite database: left as it is
  concurrent        four reports at once on one cold index: all finish, all right
  read_only         the folder (history and index) mounted read-only: read from
                    the index, nothing written; and with no index there
  rebuild           `pipebench index rebuild DIR`: the next report reads nothing
  bad_name          --index x.h5: exit 2, nothing touched

Usage: check_history_index.py PIPEBENCH NIGHTLY.h5 OUTDIR
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys

import h5py

RUN = "pipe"
INDEX = ".pipebench-index.sqlite"
failures = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail and not ok else ''}")
    if not ok:
        failures.append(name)


def night(src, dest, stamp, slow=1.0):
    shutil.copy(src, dest)
    with h5py.File(dest, "r+") as f:
        f.attrs["created_utc"] = stamp
        r = f["runs"][RUN]
        r["step_time_s"][...] = r["step_time_s"][()] * slow
        for k in ("step_time_median_s", "step_time_min_s", "step_time_max_s", "step_time_p90_s"):
            r.attrs[k] = r.attrs[k] * slow
    return dest


def report(pipebench, newest, history, out, *extra):
    p = subprocess.run([pipebench, "report", newest, "--history", history, "-o", out, *extra],
                       capture_output=True, text=True)
    summary = None
    if os.path.exists(os.path.join(out, "summary.json")):
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        summary.pop("generated_utc", None)
    return p, summary


def make_history(src, folder, nights=7):
    os.makedirs(folder)
    for d in range(1, nights + 1):
        night(src, os.path.join(folder, f"night{d}.h5"), f"2026-11-{d:02d}T03:00:00Z")


def main():
    pipebench, src, out = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    hist = os.path.join(out, "hist")
    make_history(src, os.path.join(hist, "nightly"))
    newest = night(src, os.path.join(out, "tonight.h5"), "2026-11-20T03:00:00Z", slow=1.3)
    index = os.path.join(hist, INDEX)

    def reference(name):
        p, s = report(pipebench, newest, hist, os.path.join(out, name + "_ref"), "--no-index")
        assert p.returncode == 0, p.stderr
        return s

    def same(name, *extra, history=hist, expect_note=None, expect_rc=0):
        ref = reference(name) if history == hist else report(pipebench, newest, history, os.path.join(out, name + "_ref"),
                                                              "--no-index")[1]
        p, s = report(pipebench, newest, history, os.path.join(out, name), *extra)
        ok = p.returncode == expect_rc and s == ref
        if expect_note is not None:
            ok = ok and expect_note in p.stderr
        check(name, ok, f"rc {p.returncode}; stderr: {p.stderr.strip()[-600:]}; same summary: {s == ref}")
        return p

    check("no index with --no-index", not os.path.exists(index) and reference("none") is not None)
    same("cold", expect_note="0 history file(s) from it, 7 read")
    check("cold made the index", os.path.exists(index))
    verdicts = [r["trend"]["verdict"] for r in reference("verdict")["runs"] if r["run"] == RUN and "trend" in r]
    check("the slow night is a regression", verdicts == ["regression"], str(verdicts))
    same("warm", expect_note="7 history file(s) from it, 0 read")

    # Rewritten in place: same inode and size, mtime put back.
    n3 = os.path.join(hist, "nightly", "night3.h5")
    st = os.stat(n3)
    with h5py.File(n3, "r+") as f:
        f["runs"][RUN]["step_time_s"][...] = f["runs"][RUN]["step_time_s"][()] * 1.25
    os.utime(n3, ns=(st.st_atime_ns, st.st_mtime_ns))
    st2 = os.stat(n3)
    check("replaced keeps inode, size, mtime", (st2.st_ino, st2.st_size, st2.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns))
    same("replaced", expect_note="6 history file(s) from it, 1 read")

    n4 = os.path.join(hist, "nightly", "night4.h5")
    os.utime(n4, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    same("touched", expect_note="7 history file(s) from it, 0 read")

    n5 = os.path.join(hist, "nightly", "night5.h5")
    with open(n5, "r+b") as f:
        f.truncate(2000)
    p = same("damaged_night", expect_note="6 history file(s) from it, 0 read")
    check("damaged night skipped with a reason", "skipped" in p.stderr and "night5.h5" in p.stderr, p.stderr)
    os.remove(n5)
    same("vanished", expect_note="6 history file(s) from it, 0 read")
    rows = [r[0] for r in sqlite3.connect(index).execute("SELECT path FROM files")]
    check("vanished night gone from the index", not any(r.endswith("night5.h5") for r in rows), str(rows))

    moved = os.path.join(out, "moved")
    shutil.copytree(hist, moved)
    same("moved", history=moved, expect_note="made for the folder")

    with open(index, "wb") as f:
        f.write(b"this is not a database" * 100)
    same("corrupt", expect_note="damaged")
    same("corrupt_rebuilt", expect_note="6 history file(s) from it, 0 read")
    size = os.path.getsize(index)
    with open(index, "r+b") as f:
        f.seek(size // 2)
        f.write(b"\xff" * (size // 4))
    p = same("corrupt_middle")
    con = sqlite3.connect(index)
    con.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    same("old_schema", expect_note="schema version 0")

    foreign = os.path.join(out, "foreign.sqlite")
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE files(x)")
    con.execute("INSERT INTO files VALUES (42)")
    con.commit()
    con.close()
    same("foreign", "--index", foreign, expect_note="not a pipebench history index")
    check("foreign database untouched", [r[0] for r in sqlite3.connect(foreign).execute("SELECT x FROM files")] == [42])

    os.remove(index)
    ref = reference("concurrent")
    procs = [subprocess.Popen([pipebench, "report", newest, "--history", hist, "-o", os.path.join(out, f"conc{i}")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    sums = []
    for i in range(4):
        with open(os.path.join(out, f"conc{i}", "summary.json")) as f:
            s = json.load(f)
        s.pop("generated_utc", None)
        sums.append(s)
    check("concurrent", all(rc == 0 for rc, _ in results) and all(s == ref for s in sums), str(results))
    same("after_concurrent", expect_note="6 history file(s) from it, 0 read")

    # A read-only folder, with the index and without: the folder mounted
    # read-only over itself (the index is the folder's: same path).
    def read_only(name, note):
        if subprocess.run(["mount", "--bind", hist, hist], capture_output=True).returncode != 0:
            print(f"skip {name}: cannot bind-mount here")
            return
        try:
            if subprocess.run(["mount", "-o", "remount,ro,bind", hist], capture_output=True).returncode != 0:
                print(f"skip {name}: cannot remount read-only here")
                return
            same(name, expect_note=note)
        finally:
            subprocess.run(["umount", hist])

    read_only("read_only", "6 history file(s) from it, 0 read")
    os.remove(index)
    read_only("read_only_no_index", "cannot create it")
    check("read-only left no index", not os.path.exists(index))

    p = subprocess.run([pipebench, "index", "rebuild", hist], capture_output=True, text=True)
    check("rebuild", p.returncode == 0 and "6 file(s)" in p.stdout, p.stdout + p.stderr)
    same("after_rebuild", expect_note="6 history file(s) from it, 0 read")

    before = open(newest, "rb").read()
    p = subprocess.run([pipebench, "report", newest, "--history", hist, "--index", newest, "-o", os.path.join(out, "bad")],
                       capture_output=True, text=True)
    check("bad_name", p.returncode == 2 and ".sqlite" in p.stderr and open(newest, "rb").read() == before, p.stderr)

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
