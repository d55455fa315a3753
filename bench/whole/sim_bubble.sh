#!/usr/bin/env bash
# Measures, on the sim backend:
#  1. the median measured bubble of 1F1B on 4 balanced stages with >= 2 ms
#     actions, m = 4, 8, 16, against the analytic (p-1)/(m+p-1), with the
#     job's link model (5 us + 100 Gbit/s) and with a free link (the
#     executor's own error; the analytic formula has no transfers);
#  2. the executor's overhead per action: the same runs with zero-duration
#     actions and a free link (300 counted steps each), median step time /
#     actions per rank; beside it the machine's floor for one hand-off between
#     NP processes (build/bench/handoff_floor --pin: a token passed round a
#     ring, yielding), and their ratio, measured in the same run. With
#     zero-cost actions a 1F1B step is 2m + 2(p-1) hand-offs in a row (the
#     critical path), so "per hop" = step / (2m + 2(p-1)) is the cost of one,
#     comparable across m; "per action" also carries the step's fixed costs
#     (start barrier, fill and drain, the gradient-norm reduction), which m = 4
#     spreads over 8 actions. The marginal cost of an action, free of them, is
#     the slope of the step between m = 8 and m = 16: (step16 - step8) / 16.
# Ranks are pinned round-robin to the cores (mpirun --map-by core --bind-to
# core, overloaded when they outnumber the cores), as benchmarks launch them:
# unpinned, where the kernel puts 4 ranks on 2 cores changes from launch to
# launch and with it the step time (up to 1.5x in a median of 300 steps).
# Usage: bench/whole/sim_bubble.sh [NP] [RUNS]   (stages = ranks, default 4; needs a build in build/)
# NP must divide the 8 layers (1, 2, 4, 8) for the stages to stay balanced.
# RUNS > 1 (default 1) measures it all RUNS times, one table each, then the
# medians over the runs of the per-action and marginal figures.
set -euo pipefail
cd "$(dirname "$0")/../.."
np=${1:-4}
runs=${2:-1}
if ((runs > 1)); then
  tables=$(mktemp)
  for ((i = 1; i <= runs; ++i)); do echo "== run $i of $runs"; "$0" "$np" 1; done | tee "$tables"
  /usr/bin/python3 - "$runs" "$tables" <<'PY'
import re, statistics, sys
text = open(sys.argv[2]).read()
per_action = {}
for m, a in re.findall(r"^\s*(\d+)\s.*\|\s*[\d.]+ us\s+([\d.]+) us", text, re.M):
    per_action.setdefault(int(m), []).append(float(a))
marginal = [float(x) for x in re.findall(r"marginal cost per action .*?: ([\d.-]+) us", text)]
print(f"medians over {sys.argv[1]} runs: " + ", ".join(f"per action m = {m}: {statistics.median(v):.1f} us"
      for m, v in sorted(per_action.items())) + (f", marginal {statistics.median(marginal):.1f} us" if marginal else ""))
PY
  rm -f "$tables"
  exit 0
fi
out=$(mktemp -d)
stages=()
for r in m4 m8 m16; do stages+=(--set "run.$r.pipeline_size=$np"); done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
launch=(mpirun -np "$np" --map-by core:OVERSUBSCRIBE --bind-to core:overload-allowed)
"${launch[@]}" build/bench/pipebench run bench/whole/sim_bubble.toml -o "$out/timed" "${stages[@]}" > "$out/timed.log"
free_link=(--set device.sim_link_latency_us=0 --set device.sim_link_gbps=1e12)
"${launch[@]}" build/bench/pipebench run bench/whole/sim_bubble.toml -o "$out/free" "${stages[@]}" \
  "${free_link[@]}" > "$out/free.log"
"${launch[@]}" build/bench/pipebench run bench/whole/sim_bubble.toml -o "$out/zero" "${stages[@]}" \
  "${free_link[@]}" --set device.sim_flops_per_s=1e30 --set train.repeats=300 > "$out/zero.log"
floor_us=$(build/bench/handoff_floor "$(( np > 1 ? np : 2 ))" --pin | awk '{print $(NF-3)}')
/usr/bin/python3 - "$out" "$np" "$floor_us" <<'PY'
import glob, sys
import h5py, numpy as np
out, np_, floor_us = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
print(f"sim backend, {np_} ranks on {open('/proc/cpuinfo').read().count('processor')} cores")
print(f"{'m':>3} {'analytic':>9} | {'link model':>10} {'diff':>8} | {'free link':>10} {'diff':>8} {'simulated':>9} | "
      f"{'zero-cost step':>14} {'per action':>11} {'per hop':>8} {'/ floor':>7}")
files = {k: h5py.File(glob.glob(f"{out}/{k}/*/*.h5")[0]) for k in ("timed", "free", "zero")}
zero_step = {}
for name in files["timed"]["runs"]:
    t, f, z = (files[k]["runs"][name] for k in ("timed", "free", "zero"))
    m = int(t.attrs["num_microbatches"])
    a = t.attrs["bubble_analytic"]
    bt, bf = t.attrs["bubble_measured_median"], f.attrs["bubble_measured_median"]
    step0 = z.attrs["step_time_median_s"]
    zero_step[m] = step0
    print(f"{m:3d} {a:9.4f} | {bt:10.4f} {bt - a:+8.4f} | {bf:10.4f} {bf - a:+8.4f} {f.attrs['bubble_simulated']:9.4f} | "
          f"{step0 * 1e6:11.1f} us {step0 / (2 * m) * 1e6:8.1f} us {step0 / (2 * m + 2 * (np_ - 1)) * 1e6:5.1f} us "
          f"{step0 / (2 * m + 2 * (np_ - 1)) * 1e6 / floor_us:7.1f}")
if 8 in zero_step and 16 in zero_step:
    marginal = (zero_step[16] - zero_step[8]) / 16
    print(f"marginal cost per action (zero-cost step, m = 8 -> 16): {marginal * 1e6:.1f} us "
          f"({marginal * 1e6 / floor_us:.1f} x the floor); fixed per step: {(zero_step[8] - 16 * marginal) * 1e6:.1f} us")
print(f"hand-off floor: {floor_us:.2f} us per hop between {max(np_, 2)} pinned processes (build/bench/handoff_floor --pin)")
PY
rm -rf "$out"
