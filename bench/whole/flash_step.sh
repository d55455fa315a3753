#!/usr/bin/env bash
# Flash against materialized attention, whole training steps on the cpu
# backend (issue 69: "the cpu step time of both side by side"): the
# single-rank run of tests/data/parallel/flash_seq2048.toml (a small llama at
# 2,048 tokens) with model.attention = "flash" and "materialized", the two
# alternating ROUNDS times in one launch each; prints each one's median
# counted step, their ratio, and the rank's activation peak. A measurement
# on this machine as it is, not a test: nothing asserts it (a CPU saves the
# s x s memory with flash, not time: docs/cpu-backend.md).
#   bash bench/whole/flash_step.sh [OUT] [ROUNDS]     (default /tmp/flash_step, 3)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-/tmp/flash_step}
rounds=${2:-3}
rm -rf "$out" && mkdir -p "$out"
for ((i = 0; i < rounds; ++i)); do
  for attention in flash materialized; do
    "$here/build/bench/pipebench" run "$here/tests/data/parallel/flash_seq2048.toml" --run base \
      --set "model.attention=\"$attention\"" -o "$out/$attention/$i" > "$out/$attention-$i.log"
  done
done
/usr/bin/python3 - "$out" <<'PY'
import glob
import sys

import h5py
import numpy as np

steps, peak = {}, {}
for attention in ("flash", "materialized"):
    for path in sorted(glob.glob(f"{sys.argv[1]}/{attention}/*/*/*.h5")):
        r = h5py.File(path, "r")["runs/base"]
        counted = np.asarray(r["is_warmup"]) == 0
        steps.setdefault(attention, []).extend(np.asarray(r["step_time_s"])[counted])
        peak[attention] = int(np.asarray(r["peak_mem_activations_bytes"])[0])
for attention, s in steps.items():
    print(f"{attention:13s} step median {1e3 * np.median(s):8.1f} ms over {len(s)} steps; activations peak "
          f"{peak[attention] / 2**20:7.2f} MiB")
print(f"flash / materialized step: {np.median(steps['flash']) / np.median(steps['materialized']):.3f}")
PY
