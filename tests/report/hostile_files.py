#!/usr/bin/env python3
"""`pipebench report` on damaged and hostile results files (issue 13's list).

From one good results file, writes variants that once crashed the report or
made it run for minutes: an attribute stored as an array, wrong types, short
per-rank and per-category arrays, events with rank -1 or beyond the run,
num_microbatches = 2^31-1, huge declared sizes, a truncated file, bit flips.
Each variant alone must be *skipped with a reason* (exit 1: no readable file)
within the time limit and without a signal; a folder of all variants plus the
good file must give a report of the good file (exit 0) that lists every
variant as skipped.

Usage: hostile_files.py PIPEBENCH GOOD.h5 OUTDIR
"""
import json
import os
import random
import shutil
import subprocess
import sys

import h5py
import numpy as np

TIMEOUT_S = 60


def variants(good, out):
    """(name, path) of every hostile variant of `good`, written under `out`."""
    made = []

    def copy(name):
        path = os.path.join(out, name + ".h5")
        shutil.copy(good, path)
        made.append((name, path))
        return h5py.File(path, "r+")

    def first_run(f):
        return f["runs"][list(f["runs"])[0]]

    def replace_attr(obj, key, value):
        del obj.attrs[key]
        obj.attrs[key] = value

    with copy("root_status_as_array") as f:
        replace_attr(f, "status", np.array([b"ok"] * 1000, dtype=h5py.string_dtype()))
    with copy("run_status_as_array") as f:
        replace_attr(first_run(f), "status", np.array([b"ok"] * 64, dtype=h5py.string_dtype()))
    with copy("pipeline_size_as_array") as f:
        replace_attr(first_run(f), "pipeline_size", np.arange(4096, dtype=np.int64))
    with copy("string_where_number") as f:
        replace_attr(first_run(f), "num_microbatches", "four")
    with copy("number_where_string") as f:
        replace_attr(first_run(f), "schedule", 7)
    with copy("string_not_utf8") as f:  # a bit flip once left "schedule" as 0xff bytes: invalid summary.json
        r = first_run(f)
        del r.attrs["schedule"]
        r.attrs.create("schedule", b"\xff\xff\xffy", dtype=h5py.string_dtype("utf-8"))
    with copy("run_name_with_escape") as f:  # a group name is printed: no ESC may reach the terminal
        f["runs"].move(list(f["runs"])[0], "a\x1b[31mred")
    with copy("num_microbatches_2pow31") as f:
        replace_attr(first_run(f), "num_microbatches", np.int64(2**31 - 1))
    with copy("pipeline_size_negative") as f:
        replace_attr(first_run(f), "pipeline_size", np.int64(-3))
    for ds in ["memory_capacity_bytes", "peak_mem_activations_bytes", "stage_layers", "peak_live_activations"]:
        with copy(f"short_{ds}") as f:
            r = first_run(f)
            data = r[ds][()]
            del r[ds]
            r[ds] = data[:0]
    with copy("busy_s_wrong_shape") as f:
        r = first_run(f)
        del r["busy_s"]
        r["busy_s"] = np.zeros((3,), dtype=np.float64)
    with copy("step_time_as_strings") as f:
        r = first_run(f)
        del r["step_time_s"]
        r["step_time_s"] = np.array([b"x", b"y"], dtype=h5py.string_dtype())
    for field, value in [("rank", -1), ("rank", 1 << 20), ("microbatch", 1 << 30), ("step", -5)]:
        with copy(f"event_{field}_{value}") as f:
            ev = first_run(f)["events"]
            rows = ev[()]
            if len(rows):
                rows[field][0] = value
                ev[...] = rows
    with copy("huge_declared_dataset") as f:
        r = first_run(f)
        del r["loss"]
        r.create_dataset("loss", shape=(1 << 40,), dtype=np.float64, chunks=(1024,))  # sparse: nothing written
    # Truncated and bit-flipped copies of the raw bytes.
    raw = open(good, "rb").read()
    path = os.path.join(out, "truncated.h5")
    open(path, "wb").write(raw[: len(raw) // 2])
    made.append(("truncated", path))
    rng = random.Random(13)
    for i in range(20):
        b = bytearray(raw)
        for _ in range(8):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        path = os.path.join(out, f"bitflip_{i}.h5")
        open(path, "wb").write(bytes(b))
        made.append((f"bitflip_{i}", path))
    return made


def report(pipebench, inputs, out):
    try:
        p = subprocess.run([pipebench, "report", *inputs, "-o", out], capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return "hang", ""
    return p.returncode, p.stdout + p.stderr


def main():
    pipebench, good, out = sys.argv[1:4]
    shutil.rmtree(out, ignore_errors=True)
    folder = os.path.join(out, "files")
    os.makedirs(folder)
    made = variants(good, folder)
    problems, skipped_alone, read_alone = [], 0, 0
    for name, path in made:
        rc, text = report(pipebench, [path], os.path.join(out, "alone", name))
        if rc == "hang" or rc < 0 or rc >= 128:
            problems.append(f"{name}: report {'hung' if rc == 'hang' else f'died (exit {rc})'}: {text[-300:]}")
        elif rc == 0:
            read_alone += 1  # a bit flip in padding may leave the file valid: fine, it was read
        elif rc == 1 and "skipped" in text.lower() or "no readable" in text.lower():
            skipped_alone += 1
        else:
            problems.append(f"{name}: exit {rc} without a reason: {text[-300:]}")
    shutil.copy(good, os.path.join(folder, "good.h5"))
    rc, text = report(pipebench, [folder], os.path.join(out, "all"))
    if rc != 0:
        problems.append(f"folder of all files: exit {rc}: {text[-500:]}")
    else:
        summary = json.load(open(os.path.join(out, "all", "summary.json")))
        if not any(r["file"].endswith("good.h5") for r in summary["runs"]):
            problems.append("folder of all files: the good file's runs are missing from summary.json")
        listed = {os.path.basename(s["path"]) for s in summary["skipped"]}
        for name, path in made:
            if name.startswith("bitflip_"):
                continue  # may or may not still be readable
            if os.path.basename(path) not in listed:
                problems.append(f"folder of all files: {name} is not listed as skipped")
    for p in problems:
        print("FAIL:", p)
    print(f"hostile files: {len(made)} variants; {skipped_alone} skipped with a reason, {read_alone} still readable, "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
