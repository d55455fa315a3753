#!/usr/bin/env bash
# Does launching gradient buckets inside the backward steal the compute?
# (issue 68: "the compute of an action that launches buckets runs within 3%
# of the same action without them".) bench/whole/bucket_overlap.toml on 2
# ranks: per rank and counted step, the duration of the last backward (the
# action that launches the buckets with grad_sync = "overlap", and launches
# nothing inside with "after_chunk"), the runs alternating; prints the median
# of each mode and their ratio, and the exposed synchronisation of each.
# A measurement on this machine as it is, not a test: nothing asserts it.
#   bash bench/whole/bucket_overlap.sh [OUT]     (default /tmp/bucket_overlap)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-/tmp/bucket_overlap}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$out" && mkdir -p "$out"
mpirun -np 2 --bind-to core "$here/build/bench/pipebench" run "$here/bench/whole/bucket_overlap.toml" -o "$out" > "$out/run.log"
file=$(find "$out" -name '*.h5' | head -1)
/usr/bin/python3 - "$file" <<'PY'
import sys
import h5py
import numpy as np

KIND_B = 1
f = h5py.File(sys.argv[1], "r")
last_b, exposed = {}, {}
for name in f["runs"]:
    r = f["runs"][name]
    ev = r["events"][()]
    counted = np.nonzero(~np.asarray(r["is_warmup"]).astype(bool))[0]
    mode = name.rsplit("_", 1)[0]
    for step in counted:
        b = ev[(ev["step"] == step) & (ev["kind"] == KIND_B)]
        last = b[np.argmax(b["end_s"])]
        last_b.setdefault(mode, []).append(last["end_s"] - last["start_s"])
    exposed.setdefault(mode, []).extend(np.asarray(r["grad_sync_exposed_s"])[counted].ravel())
for mode in ("after_chunk", "overlap"):
    print(f"{mode:12s} last backward median {1e3 * np.median(last_b[mode]):8.3f} ms over {len(last_b[mode])} steps; "
          f"exposed synchronisation median {1e3 * np.median(exposed[mode]):7.3f} ms")
print(f"last backward with the buckets launched inside / without: "
      f"{np.median(last_b['overlap']) / np.median(last_b['after_chunk']):.4f}")
PY
