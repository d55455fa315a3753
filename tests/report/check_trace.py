#!/usr/bin/env python3
"""`pipebench trace` of a 4-rank 1F1B sim run (jobs/four_stage.toml): the JSON
is Trace Event Format (what Perfetto and chrome://tracing load: traceEvents
of ph X/M/i with pid, tid, ts, dur in microseconds), and every measured event
of the HDF5 file is one compute slice with its name, step, micro-batch,
chunk and times, laid out step after step; the simulated timeline is a
second process group with one step of the schedule; every recorded receive
wait (events.wait_s, summing to comm_wait_s per step and rank) is one "recv"
slice on the communication thread ending where its action starts; --step N
keeps step N.
    check_trace.py PIPEBENCH MPIEXEC JOB OUTDIR"""
import collections
import glob
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy

pipebench, mpiexec, job, out = sys.argv[1:5]
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
shutil.rmtree(out, ignore_errors=True)
run = subprocess.run([mpiexec, "-np", "4", "--oversubscribe", pipebench, "run", job, "--run", "one_f_one_b", "--set",
                      "train.warmup=1", "--set", "train.repeats=2", "-o", out], capture_output=True, text=True, env=env)
assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
h5 = glob.glob(f"{out}/**/*.h5", recursive=True)
assert len(h5) == 1, h5


def trace(*extra):
    path = f"{out}/trace{len(extra)}.json"
    p = subprocess.run([pipebench, "trace", h5[0], "-o", path] + list(extra), capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return json.load(open(path))


KINDS = {0: "F", 1: "B", 2: "W"}
with h5py.File(h5[0], "r") as f:
    g = f["runs/one_f_one_b"]
    ev = g["events"][:]
    step_times = list(g["step_time_s"][:])
    comm_wait = g["comm_wait_s"][:]
    P = int(g.attrs["pipeline_size"])
assert P == 4

doc = trace()
events = doc["traceEvents"]
assert doc["displayTimeUnit"] == "ms"
for e in events:
    assert e["ph"] in ("X", "M", "i"), e
    assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
    if e["ph"] == "X":
        assert e["ts"] >= 0 and e["dur"] >= 0, e
names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
for r in range(P):
    assert names[1 + r] == f"one_f_one_b rank {r} (measured)", names
    assert names[1 + 1024 + r].startswith(f"one_f_one_b rank {r} (simulated: 1f1b"), names

offset = [sum(step_times[:k]) for k in range(len(step_times))]
compute = [e for e in events if e["ph"] == "X" and e["tid"] == 1 and e["pid"] <= P and e["cat"] in ("forward", "backward", "weight")]
assert len(compute) == len(ev), (len(compute), len(ev))
index = {(e["pid"] - 1, e["args"]["step"] - 1, e["args"]["kind"], e["args"]["microbatch"], e["args"]["chunk"]): e for e in compute}
for row in ev:
    step, rank, kind, mb, chunk, start, end = (int(row["step"]), int(row["rank"]), KINDS[int(row["kind"])],
                                                int(row["microbatch"]), int(row["chunk"]), float(row["start_s"]), float(row["end_s"]))
    e = index[(rank, step, kind, mb, chunk)]
    assert e["name"] == f"{kind}{mb}" or e["name"].startswith(f"{kind}{mb}"), e
    assert abs(e["ts"] - (offset[step] + start) * 1e6) < 1e-3 and abs(e["dur"] - (end - start) * 1e6) < 1e-3, (e, row)
# Receive waits: F on rank 0, B on the last rank and W receive nothing (0
# exactly); every other action waited > 0; per step and rank they sum to
# comm_wait_s; each is a slice on thread 2 ending at its action's start.
recv = {(e["pid"] - 1, e["args"]["step"] - 1, e["args"]["for"]): e for e in events
        if e["ph"] == "X" and e["tid"] == 2 and e["pid"] <= P and e["cat"] == "comm_wait"}
wait_sum = collections.defaultdict(float)
wait_count = collections.defaultdict(int)  # stored event times are rounded to 2^-30 s
prev_end = {}
for row in sorted(ev, key=lambda r: (int(r["step"]), int(r["rank"]), float(r["start_s"]))):
    step, rank, kind, mb = int(row["step"]), int(row["rank"]), KINDS[int(row["kind"])], int(row["microbatch"])
    wait, start = float(row["wait_s"]), float(row["start_s"])
    receives = (kind == "F" and rank > 0) or (kind == "B" and rank < P - 1)
    assert (wait > 0) if receives else (wait == 0), (kind, rank, wait)
    assert wait <= start + 1e-9, (row, wait)
    wait_sum[(step, rank)] += wait
    wait_count[(step, rank)] += 1
    if receives:
        e = recv[(rank, step, f"{kind}{mb}")]
        assert abs(e["ts"] + e["dur"] - (offset[step] + start) * 1e6) < 1e-3, (e, row)
        assert abs(e["dur"] - min(wait, start - prev_end.get((step, rank), 0.0)) * 1e6) < 1e-3, (e, row)
    prev_end[(step, rank)] = float(row["end_s"])
assert len(recv) == sum(1 for r in ev if float(r["wait_s"]) > 0), len(recv)
for (step, rank), total in wait_sum.items():
    tol = 1e-9 * max(1.0, total) + wait_count[(step, rank)] * 2.0**-31
    assert abs(total - comm_wait[step][rank]) <= tol, (step, rank, total, comm_wait[step][rank])
steps = [e for e in events if e["ph"] == "i" and e["pid"] == 1]
assert [s["args"]["step"] for s in steps] == [1, 2, 3] and steps[0]["args"]["warmup"] and not steps[1]["args"]["warmup"]
simulated = [e for e in events if e["ph"] == "X" and e["pid"] > 1024]
per_step = collections.Counter(int(r["step"]) for r in ev)
assert len(simulated) == per_step[0], (len(simulated), per_step)
assert {e["pid"] - 1025 for e in simulated} == set(range(P))

one = trace("--step", "2", "--no-simulated")
kept = [e for e in one["traceEvents"] if e["ph"] == "X" and e["cat"] in ("forward", "backward")]
assert len(kept) == per_step[1] and all(e["args"]["step"] == 2 for e in kept)
assert not [e for e in one["traceEvents"] if e["ph"] == "X" and e["pid"] > 1024]
bad = subprocess.run([pipebench, "trace", h5[0], "-o", f"{out}/x.json", "--run", "nope"], capture_output=True, text=True)
assert bad.returncode != 0 and "no run named" in bad.stderr, bad.stderr
# `pipebench report` writes the same timeline beside index.html and links it.
rep = subprocess.run([pipebench, "report", h5[0], "-o", f"{out}/report"], capture_output=True, text=True)
assert rep.returncode == 0, rep.stderr
assert 'href="trace-0.json"' in open(f"{out}/report/index.html").read()
linked = json.load(open(f"{out}/report/trace-0.json"))["traceEvents"]
assert len(linked) == len(events), (len(linked), len(events))
# A file written before events had wait_s reads (NaN: not recorded): the gap
# before an action is one "between actions" slice, and report still works.
old_file = f"{out}/before-wait_s.h5"
shutil.copy(h5[0], old_file)
with h5py.File(old_file, "r+") as f:
    for name in f["runs"]:
        g = f["runs"][name]
        rows = g["events"][:]
        keep = [n for n in rows.dtype.names if n != "wait_s"]
        older = numpy.empty(len(rows), dtype=[(n, rows.dtype[n]) for n in keep])
        for n in keep:
            older[n] = rows[n]
        del g["events"]
        g.create_dataset("events", data=older)
p = subprocess.run([pipebench, "trace", old_file, "-o", f"{out}/old.json", "--no-simulated"], capture_output=True, text=True)
assert p.returncode == 0, p.stderr
old_events = json.load(open(f"{out}/old.json"))["traceEvents"]
assert any(e.get("name") == "between actions" for e in old_events)
assert not any(e.get("cat") == "comm_wait" for e in old_events)
rep = subprocess.run([pipebench, "report", old_file, "-o", f"{out}/old-report"], capture_output=True, text=True)
assert rep.returncode == 0, rep.stderr
# A trace that cannot be written is an error that names the file and the
# reason (here a full device, through a link of our own: what pipebench may
# remove is the link, never /dev/full), and only a regular file is removed.
full_link = f"{out}/full.json"
os.symlink("/dev/full", full_link)
full = subprocess.run([pipebench, "trace", h5[0], "-o", full_link], capture_output=True, text=True)
assert full.returncode == 2 and f"cannot write {full_link}: " in full.stderr and "No space left" in full.stderr, \
    (full.returncode, full.stderr)
assert os.path.islink(full_link), "the output link was removed"

# Events are streamed from the file in blocks of 65 536, whole (step, rank)
# groups at a time: with 4 x 2 x 3000 = 24 000 events per step, step 3
# (events 48 000 to 71 999) straddles the first block's end inside rank 2's
# group. Its slices are the file's events of step 3, each once; the simulated
# step (from medians over every streamed block) has 24 000 slices too.
big_out = f"{out}/big"
run = subprocess.run([mpiexec, "-np", "4", "--oversubscribe", pipebench, "run", job, "--run", "one_f_one_b", "--set",
                      "train.warmup=1", "--set", "train.repeats=3", "--set", "device.sim_clock=virtual", "--set",
                      "run.one_f_one_b.num_microbatches=3000", "-o", big_out], capture_output=True, text=True, env=env)
assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
big_h5 = glob.glob(f"{big_out}/**/*.h5", recursive=True)[0]
p = subprocess.run([pipebench, "trace", big_h5, "-o", f"{big_out}/step3.json", "--step", "3"], capture_output=True, text=True)
assert p.returncode == 0, p.stderr
big_events = json.load(open(f"{big_out}/step3.json"))["traceEvents"]
with h5py.File(big_h5, "r") as f:
    rows = f["runs/one_f_one_b"]["events"][:]
assert len(rows) == 4 * 24000, len(rows)
want = sorted((int(r["rank"]), KINDS[int(r["kind"])], int(r["microbatch"]), round(float(r["start_s"]) * 1e6, 3))
              for r in rows if int(r["step"]) == 2)
got = sorted((e["pid"] - 1, e["args"]["kind"], e["args"]["microbatch"], round(e["ts"], 3)) for e in big_events
             if e["ph"] == "X" and e["pid"] <= P and e["cat"] in ("forward", "backward"))
assert len(got) == 24000 and got == want, (len(got), len(want))
assert sum(1 for e in big_events if e["ph"] == "X" and e["pid"] > 1024) == 24000
# Each rank's step is one group: one "step end" per rank (a group split at the
# block's end would end twice).
assert sorted(e["pid"] - 1 for e in big_events if e.get("cat") == "step_end") == list(range(P))

print(f"{len(events)} trace events; {len(compute)} compute slices = {len(ev)} HDF5 events; {len(recv)} receive waits; "
      f"{len(simulated)} simulated; a 96 000-event file's step 3 whole across blocks")
print("PASS")
