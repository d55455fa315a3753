#!/usr/bin/env python3
"""check_schedule_bubbles.py MPIEXEC PIPEBENCH JOB.toml OUTDIR

Runs JOB (jobs/schedules.toml: every training schedule on 4 ranks, sim, ~10 ms
actions) under mpirun on the wall clock (device.sim_clock = "wall": the
durations slept, the executor's own overhead included) and checks what
issue 15 asks of the sim backend:

  * each pipelined run's measured bubble (median over counted steps) is
    within 0.03 of the bubble its schedule simulates with its own measured
    per-action medians (bubble_simulated);
  * the runs rank by step time as the planner's cost-weighted simulation
    predicts, for every pair the prediction separates by more than 2%.

Real (slept) durations: on a machine too busy for them (a run's step-time CV
above 3%) it skips (exit 77) and says why.
"""
import json
import os
import shutil
import subprocess
import sys

import h5py

TOLERANCE = 0.03
SEPARATED = 0.02
BUSY_CV = 0.03
SKIP = 77


def main():
    mpiexec, pipebench, job, out = sys.argv[1:5]
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([mpiexec, "-np", "4", "--oversubscribe", pipebench, "run", job, "-o", out,
                    "--set", "device.sim_clock=wall"], check=True, stdout=subprocess.DEVNULL)
    plan = json.loads(subprocess.run([pipebench, "plan", job, "--format", "json"], check=True, capture_output=True,
                                     text=True).stdout)
    predicted = {r["name"]: r["simulated"]["makespan_s"] for r in plan["runs"] if r["pipeline_size"] > 1}
    path = next(os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs if f.endswith(".h5"))
    problems, measured = [], {}
    with h5py.File(path, "r") as f:
        for name in predicted:
            r = f["runs"][name]
            measured[name] = float(r.attrs["step_time_median_s"])
            cv = float(r.attrs["step_time_cv"])
            bm, bs = float(r.attrs["bubble_measured_median"]), float(r.attrs["bubble_simulated"])
            print(f"{name:12s} {r.attrs['schedule']:18s} step {1e3 * measured[name]:8.2f} ms (predicted "
                  f"{1e3 * predicted[name]:8.2f}), CV {100 * cv:.2f}%, bubble measured {bm:.4f} simulated {bs:.4f}")
            if cv > BUSY_CV:
                print(f"SKIP: {name}'s step time varies {100 * cv:.1f}% (> {100 * BUSY_CV:.0f}%): the machine is busy")
                return SKIP
            if abs(bm - bs) > TOLERANCE:
                problems.append(f"{name}: measured bubble {bm:.4f} is {abs(bm - bs):.4f} from the simulated {bs:.4f}")
    names = sorted(predicted, key=predicted.get)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if predicted[b] > (1 + SEPARATED) * predicted[a] and not measured[a] < measured[b]:
                problems.append(f"predicted {a} faster than {b}, measured {measured[a]:.4f} s vs {measured[b]:.4f} s")
    print("predicted order:", " < ".join(names))
    print("measured order: ", " < ".join(sorted(measured, key=measured.get)))
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
