#!/usr/bin/env python3
"""Whole-run nightly series with known truth (issue 14), from real sim runs.

Runs tests/data/report/regression.toml NIGHTS times under mpirun with
`device.sim_jitter` (log-normal noise on every modelled action, a new seed each
night) and a night factor `device.sim_load` = exp(NIGHT_SIGMA * z) (a fixed
sequence of z), the noise measured on the development machine. Then:

  * every night from the 4th on, reported with the nights before it as
    history, must not be a `regression` (identical nights), and most must be
    `no change` (a rule that only ever says `inconclusive` fails too);
  * one more night 10% slower (sim_load x 1.10) must be a `regression` and
    fail the nightly job (exit 6);
  * one more night 2% slower must not be a `regression` (it is inside the 5%
    threshold);
  * a probe trial night, 3x slower, given as history, changes nothing.

Prints each night's median, the verdicts and the measured within-run and
night-to-night spreads, so the figures behind the assertions are in the log.
When those spreads, or a shift between the first and second halves of the nights,
show a busy machine (more than 3x the modelled noise),
it skips (exit 77) instead of judging the rule on noise it did not model.

Usage: nightly_jitter.py MPIEXEC PIPEBENCH SRC OUTDIR [NIGHTS]
"""
import math
import os
import random
import shutil
import statistics
import subprocess
import sys

from nightly_report import nightly_report, run_record

JITTER = 0.015       # per modelled action; with ~10 actions on the critical path, a step CV near 0.5%
NIGHT_SIGMA = 0.004  # night-to-night spread of the medians measured on the 2-core machine
# Above these (3x what the model adds) the machine itself is the noise: skip.
QUIET_CV = 0.015
QUIET_SPREAD = 0.012
# The machine's speed changing mid-series (a compile starting or ending beside
# the test) moves one half of the nights against the other, which the median
# deviation above does not see: the halves' medians differ by ~0.2% from the
# modelled noise; more than this is the machine.
QUIET_SHIFT = 0.015
SKIP = 77  # ctest SKIP_RETURN_CODE
RERUNS = 3  # runs of a slower night the rule may call noisy before the test skips
# The rule's loaded-machine guard (lib/results/include/pipebench/results/regression.hpp).
CV_FACTOR = 1.5
CV_FLOOR = 0.01


def loaded_newest(trend):
    """Whether the rule's newest-run noise guard applies: that verdict says
    nothing about the rule's threshold, which is what this test measures."""
    return (trend["verdict"] == "inconclusive (noisy)"
            and trend["newest_cv"] > max(CV_FACTOR * trend["history_cv"], CV_FLOOR))


def run_night(mpiexec, pipebench, toml, dest, seed, load, extra=()):
    os.makedirs(dest)
    cmd = [mpiexec, "-np", "2", "--oversubscribe", pipebench, "run", toml, "-o", dest,
           "--set", f"device.sim_jitter={JITTER}", "--set", f"device.sim_jitter_seed={seed}",
           "--set", f"device.sim_load={load:.6f}", *extra]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def trend_of(pipebench, newest, history, out):
    p, summary = nightly_report(pipebench, newest, history, out)
    return p.returncode, run_record(summary, "pipe")


def main():
    mpiexec, pipebench, src, out = sys.argv[1:5]
    nights = int(sys.argv[5]) if len(sys.argv) > 5 else 20
    toml = os.path.join(src, "tests/data/report/regression.toml")
    shutil.rmtree(out, ignore_errors=True)
    rng = random.Random(14)
    loads = [math.exp(NIGHT_SIGMA * rng.gauss(0.0, 1.0)) for _ in range(nights + 1)]
    night_dirs = []
    for n in range(nights):
        d = os.path.join(out, f"night{n + 1:02d}")
        run_night(mpiexec, pipebench, toml, d, n + 1, loads[n])
        night_dirs.append(d)
    problems = []
    verdicts = []
    medians, cvs = [], []
    for n in range(nights):
        rc, run = trend_of(pipebench, night_dirs[n], night_dirs[:n], os.path.join(out, f"report{n + 1:02d}"))
        t = run["trend"]
        medians.append(run["step_time_median_s"])
        cvs.append(run["step_time_cv"])
        verdicts.append(t["verdict"])
        print(f"night {n + 1:2d}: load x{loads[n]:.4f}, median {run['step_time_median_s']:.5f} s, "
              f"CV {100 * run['step_time_cv']:.2f}%, exit {rc}: {t['verdict']} — {t.get('reason', '')}")
        if t["verdict"] == "regression" or rc != 0:
            problems.append(f"identical night {n + 1} flagged: exit {rc}, {t['verdict']}")
    judged = verdicts[3:]
    no_change = judged.count("no change")
    spread = statistics.median(abs(m - statistics.median(medians)) for m in medians) * 1.4826 / statistics.median(medians)
    shift = statistics.median(medians[nights // 2:]) / statistics.median(medians[:nights // 2]) - 1
    print(f"identical nights: {len(judged)} judged, {no_change} no change, "
          f"{sum(v == 'regression' for v in judged)} regression, "
          f"{sum(v.startswith('inconclusive') for v in judged)} inconclusive; "
          f"within-run CV median {100 * statistics.median(cvs):.2f}%, night-to-night spread {100 * spread:.2f}%, "
          f"second half vs first {100 * shift:+.2f}%")
    # Real step times: a machine busy with other work (a compile beside the
    # test) adds its own noise, far above the modelled one, and then nothing
    # here measures the rule. Say so and skip rather than pass or fail on it.
    if statistics.median(cvs) > QUIET_CV or spread > QUIET_SPREAD or abs(shift) > QUIET_SHIFT:
        print(f"SKIP: this machine was too busy to test the rule with real timings (within-run CV "
              f"{100 * statistics.median(cvs):.2f}% > {100 * QUIET_CV:.1f}%, night spread {100 * spread:.2f}% > "
              f"{100 * QUIET_SPREAD:.1f}% or halves apart {100 * shift:+.2f}% beyond {100 * QUIET_SHIFT:.1f}%); "
              "the rule's rates on generated nights are tested in tests/unit/test_regression.cpp")
        return SKIP
    if no_change < (2 * len(judged)) // 3:
        problems.append(f"only {no_change} of {len(judged)} identical nights are 'no change'")

    trial = os.path.join(out, "trial")
    run_night(mpiexec, pipebench, toml, trial, 900, 3.0, ["--probe-trial"])
    for name, factor, want in (("slower10", 1.10, "regression"), ("slower2", 1.02, None)):
        # The rule calls a newest run noisier than its history "inconclusive
        # (noisy) ... rerun it"; an operator reruns, and so does this test
        # (a new seed each time) before it gives up and skips.
        for attempt in range(RERUNS):
            d = os.path.join(out, f"{name}_{attempt + 1}")
            run_night(mpiexec, pipebench, toml, d, 1000 + round(100 * factor) + 10 * attempt, loads[nights] * factor)
            rc, run = trend_of(pipebench, d, night_dirs + [trial], os.path.join(out, f"report_{name}_{attempt + 1}"))
            t = run["trend"]
            print(f"{name} (run {attempt + 1}): median {run['step_time_median_s']:.5f} s, exit {rc}: {t['verdict']} — "
                  f"{t.get('reason', '')}")
            if not loaded_newest(t):
                break
        else:
            print(f"SKIP: {name} ran noisier than its history {RERUNS} times (the rule's loaded-machine guard); "
                  "the rule's rates on generated nights are tested in tests/unit/test_regression.cpp")
            return SKIP
        if t["files"] != nights + 1:
            problems.append(f"{name}: the series holds {t['files']} files, expected {nights + 1} (the trial entered it?)")
        print(f"  throughput {100 * t['throughput_change']:+.1f}%, slowest stage {100 * t['slowest_stage_change']:+.1f}%, "
              f"bubble {t['bubble_delta_pts']:+.2f} pts")
        if run["step_time_cv"] > QUIET_CV:
            print(f"SKIP: {name} ran on a busy machine (CV {100 * run['step_time_cv']:.2f}%)")
            return SKIP
        if want == "regression" and (t["verdict"] != "regression" or rc != 6):
            problems.append(f"{name}: {t['verdict']} (exit {rc}), expected a regression and exit 6")
        if want == "regression" and not (t["throughput_change"] < -0.05 and t["slowest_stage_change"] > 0.05):
            problems.append(f"{name}: throughput {t['throughput_change']}, slowest stage {t['slowest_stage_change']}: "
                            "expected both to move by more than 5%")
        if want is None and t["verdict"] == "regression":
            problems.append(f"{name}: a 2% slowdown flagged as a regression")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
