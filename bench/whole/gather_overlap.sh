#!/usr/bin/env bash
# Do ZeRO-1's parameter all-gathers inside the first forward steal its
# compute? (issue 68: "the compute of an action that launches buckets runs
# within 3% of the same action without them".) bench/whole/gather_overlap.toml
# on 2 ranks: per rank and counted step, the compute of the step's first
# forward (its event, which starts after the forward's waits for the
# gathers: docs/parallel.md, "Parameter gathers inside the forward") with
# the gathers in flight (grad_sync = "overlap") and without (after_chunk:
# gathered after the optimizer), the runs alternating; prints the median of
# each mode, their ratio, the forwards' waits and the exposed all-gather of
# the after-optimizer mode. A measurement on this machine as it is, not a
# test: nothing asserts it.
#   bash bench/whole/gather_overlap.sh [OUT]     (default /tmp/gather_overlap)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-/tmp/gather_overlap}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$out" && mkdir -p "$out"
mpirun -np 2 --bind-to core "$here/build/bench/pipebench" run "$here/bench/whole/gather_overlap.toml" -o "$out" > "$out/run.log"
file=$(find "$out" -name '*.h5' | head -1)
/usr/bin/python3 - "$file" <<'PY'
import sys
import h5py
import numpy as np

KIND_F, GATHER = 0, 2
f = h5py.File(sys.argv[1], "r")
first_f, waited = {}, {}
for name in f["runs"]:
    r = f["runs"][name]
    ev = r["events"][()]
    g = r["grad_buckets"]
    kind, step_of, exposed = np.asarray(g["kind"]), np.asarray(g["step"]), np.asarray(g["exposed_s"])
    counted = np.nonzero(~np.asarray(r["is_warmup"]).astype(bool))[0]
    mode = name.rsplit("_", 1)[0]
    for step in counted:
        fw = ev[(ev["step"] == step) & (ev["kind"] == KIND_F)]
        first = fw[np.argmin(fw["start_s"])]
        first_f.setdefault(mode, []).append(first["end_s"] - first["start_s"])
        # The all-gathers' exposed time per step, over both ranks' rows (overlap: the forwards' waits).
        waited.setdefault(mode, []).append(exposed[(step_of == step) & (kind == GATHER)].sum() / 2)
for mode in ("after_chunk", "overlap"):
    print(f"{mode:12s} first forward's compute median {1e3 * np.median(first_f[mode]):8.3f} ms over "
          f"{len(first_f[mode])} steps; all-gather exposed per rank median {1e3 * np.median(waited[mode]):7.3f} ms")
print(f"first forward with the gathers in flight / without: "
      f"{np.median(first_f['overlap']) / np.median(first_f['after_chunk']):.4f}")
PY
