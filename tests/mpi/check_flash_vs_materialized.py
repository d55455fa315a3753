#!/usr/bin/env python3
"""Flash attention against the materialized attention on the cpu backend
(issue 69): the same job run with model.attention = "flash" (FLASH.h5) and
"materialized" (MATERIALIZED.h5). Every run's loss agrees within TOL
(default 1e-5, relative) at every step, and where a run keeps the
probabilities (recompute none) each rank's activation peak is lower with
flash by exactly peak_live x layers x b x heads/t x (s² − s) x 4 bytes: the
fp32 s x s probabilities of its heads, less the log-sum-exp per row flash
keeps instead (docs/model.md "Attention").
    check_flash_vs_materialized.py FLASH.h5 MATERIALIZED.h5 [TOL]"""
import sys

import h5py
import numpy as np


def workload(run):
    return dict(line.split(" = ", 1) for line in run.attrs["workload"].splitlines())


flash, plain = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-5
failed, checked = [], 0
for name, f in flash["runs"].items():
    m = plain["runs"][name]
    if f.attrs["status"] != "ok" or m.attrs["status"] != "ok":
        failed.append(f"{name}: status {f.attrs['status']} / {m.attrs['status']}")
        continue
    wf, wm = workload(f), workload(m)
    if wf.get("model.attention") != "flash" or wm.get("model.attention", "materialized") != "materialized":
        failed.append(f"{name}: attention {wf.get('model.attention')} / {wm.get('model.attention')}")
    lf, lm = f["loss"][:], m["loss"][:]
    dev = float(np.max(np.abs(lf - lm) / np.abs(lm)))
    print(f"{name}: losses within {dev:.3g} over {len(lf)} steps")
    if not dev <= tol:
        failed.append(f"{name}: losses differ by {dev:.3g} (limit {tol:g})")
    checked += 1
    if wf.get("run.recompute", "none") != "none":
        continue
    s, heads, b = int(wf["model.seq_len"]), int(wf["model.heads"]), int(f.attrs["micro_batch_size"])
    t = int(f.attrs.get("tensor_parallel", 1))
    for rank, (first, last) in enumerate(f["stage_layers"][:]):
        blocks = int(last) - int(first) + 1  # the rank's blocks, first..last (one stage a rank here)
        live = int(f["peak_live_activations"][rank])
        want = live * blocks * b * (heads // t) * (s * s - s) * 4
        got = int(m["peak_mem_activations_bytes"][rank]) - int(f["peak_mem_activations_bytes"][rank])
        print(f"{name} rank {rank}: activations {m['peak_mem_activations_bytes'][rank]} -> "
              f"{f['peak_mem_activations_bytes'][rank]} bytes, {got} less (expected {want})")
        if got != want:
            failed.append(f"{name} rank {rank}: activations {got} bytes less with flash, expected {want}")
for problem in failed:
    print("FAIL:", problem)
if not checked:
    failed.append("no run compared")
sys.exit(1 if failed else 0)
