#!/usr/bin/env python3
"""check_bucket_launch.py RESULTS.h5 RUN [RUN...]

grad_sync = "overlap" on a backend that reports its layers (cpu): each named
run's first gradient bucket is launched inside the last gradient action (B, or
W with a split backward) of the chunk the rank finishes first, not after it —
on every rank (replica 0's; the events are theirs) and counted step the
recorded grad_sync_start_s lies within that action. After the action, as
after_chunk launches, is a failure.
"""
import sys

import h5py
import numpy as np

KIND_B, KIND_W = 1, 2  # results-format.md: events.kind 0 F, 1 B, 2 W


def main():
    path, runs = sys.argv[1], sys.argv[2:]
    problems = []
    with h5py.File(path, "r") as f:
        for name in runs:
            r = f["runs"][name]
            ev = r["events"][()]  # replica 0's, `rank` its stage
            start = np.asarray(r["grad_sync_start_s"])  # [step, run rank]
            stage, replica = np.asarray(r["pipeline_rank"]), np.asarray(r["data_rank"])
            warm = np.asarray(r["is_warmup"]).astype(bool)
            kinds = {KIND_W} if (ev["kind"] == KIND_W).any() else {KIND_B}
            inside = 0
            for step in np.nonzero(~warm)[0]:
                for rank in np.nonzero(replica == 0)[0]:
                    mine = ev[(ev["step"] == step) & (ev["rank"] == stage[rank]) & np.isin(ev["kind"], list(kinds))]
                    # Each chunk's last gradient action; the one that ends first.
                    lasts = [c[np.argmax(c["end_s"])] for c in (mine[mine["chunk"] == k] for k in np.unique(mine["chunk"]))]
                    last = min(lasts, key=lambda e: e["end_s"])
                    t = start[step, rank]
                    if last["start_s"] <= t < last["end_s"]:
                        inside += 1
                    else:
                        problems.append(f"{name}: step {step} rank {rank}: first bucket at {t:.6f} s, the first "
                                        f"finished chunk's last gradient action ran {last['start_s']:.6f}.."
                                        f"{last['end_s']:.6f} s")
            print(f"{name}: the first bucket launched inside the last gradient action on {inside} rank-steps")
    for p in problems[:20]:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
