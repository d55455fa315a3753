#!/usr/bin/env python3
"""check_bucket_launch.py RESULTS.h5 RUN [RUN...]

grad_sync = "overlap" on a backend that reports its layers (cpu): each named
run's first gradient bucket is launched inside the last gradient action (B, or
W with a split backward) of the chunk the rank finishes first, not after it —
on every rank (replica 0's; the events are theirs) and counted step the
first reduction's recorded launch (grad_buckets/) lies within that action. After the action, as
after_chunk launches, is a failure.

And the per-bucket records (grad_buckets/, results-format.md) agree with the
per-step figures on every rank and counted step: the reductions' bytes sum to
grad_sync_bytes, the first launch (a sharded run's parameter gathers' where
they run inside the forwards) is grad_sync_start_s, the exposed parts sum
to grad_sync_exposed_s (real clocks: within 0.2 ms, one poll), and a chunk
holds several buckets (the runs named use small grad_bucket_bytes or are
after_chunk ones, recorded as one per chunk: at least one).
"""
import sys

import h5py
import numpy as np

KIND_B, KIND_W = 1, 2  # results-format.md: events.kind 0 F, 1 B, 2 W


def check_records(name, r, counted):
    problems = []
    if "grad_buckets" not in r:
        return [f"{name}: no grad_buckets"]
    g = {k: np.asarray(r["grad_buckets"][k]) for k in r["grad_buckets"]}
    start, exposed = np.asarray(r["grad_sync_start_s"]), np.asarray(r["grad_sync_exposed_s"])
    nbytes = np.asarray(r["grad_sync_bytes"])
    rows = 0
    for step in counted:
        for rank in range(start.shape[1]):
            m = (g["step"] == step) & (g["rank"] == rank)
            red = m & (g["kind"] != 2)  # 2: a sharded run's parameter all-gather
            rows += int(m.sum())
            where = f"{name}: step {step} rank {rank}"
            if int(g["bytes"][red].sum()) != int(nbytes[rank]):
                problems.append(f"{where}: buckets hold {int(g['bytes'][red].sum())} bytes, grad_sync_bytes {nbytes[rank]}")
            # The first launch: the step's parameter gathers' where they run inside the forwards.
            if abs(g["launch_s"][m].min() - start[step, rank]) > 2e-4:
                problems.append(f"{where}: first bucket at {g['launch_s'][m].min()}, grad_sync_start_s {start[step, rank]}")
            if abs(g["exposed_s"][m].sum() - exposed[step, rank]) > 2e-4:
                problems.append(f"{where}: exposed parts sum to {g['exposed_s'][m].sum()}, grad_sync_exposed_s "
                                f"{exposed[step, rank]}")
            if (g["end_s"][m] < g["launch_s"][m]).any():
                problems.append(f"{where}: a bucket ends before its launch")
    print(f"{name}: {rows} bucket records on the counted steps agree with the per-step figures"
          if not problems else f"{name}: bucket records disagree")
    return problems


def main():
    path, runs = sys.argv[1], sys.argv[2:]
    problems = []
    with h5py.File(path, "r") as f:
        for name in runs:
            r = f["runs"][name]
            ev = r["events"][()]  # replica 0's, `rank` its stage
            g = {k: np.asarray(r["grad_buckets"][k]) for k in ("step", "rank", "kind", "launch_s")}
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
                    # The first gradient bucket (not a parameter all-gather: kind 2).
                    t = g["launch_s"][(g["step"] == step) & (g["rank"] == rank) & (g["kind"] != 2)].min()
                    if last["start_s"] <= t < last["end_s"]:
                        inside += 1
                    else:
                        problems.append(f"{name}: step {step} rank {rank}: first bucket at {t:.6f} s, the first "
                                        f"finished chunk's last gradient action ran {last['start_s']:.6f}.."
                                        f"{last['end_s']:.6f} s")
            print(f"{name}: the first bucket launched inside the last gradient action on {inside} rank-steps")
            problems += check_records(name, r, counted=np.nonzero(~warm)[0])
    for p in problems[:20]:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
