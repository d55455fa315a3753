#!/usr/bin/env python3
"""check_virtual_clock.py PIPEBENCH JOB.toml [--set KEY=VALUE ...] RESULTS.h5

A sim run on the virtual clock (device.sim_clock = "virtual") measures the
model's timeline itself, however many ranks share a core. For every run in
RESULTS.h5, against `pipebench plan JOB --format json` (same --set
overrides), the planner's cost-weighted simulation:

  * measured bubble (median over counted steps) within 0.001 of the planned;
  * each rank's forward + backward time per step equal to the plan's busy
    time of that rank (relative 1e-6; event times are rounded to 2^-30 s);
  * the step time the planned makespan plus at most the longest optimizer
    step (the only part of a step the schedule simulation leaves out), and
    equal to the plan's `iteration_s` (relative 1e-6: step_s, then, after
    the global gradient norm, the longest optimizer step and all-gather);
  * every counted step the same (relative 1e-9): nothing on a virtual clock
    depends on the machine;
  * the recorded bubble_simulated (the verdict's reference) within 0.001 of
    the planned bubble, with replicas over the step with the synchronisation;
  * with data-parallel replicas, the step is the plan's `step_s` (the
    makespan and the exposed gradient all-reduce; sharded, the parameter
    all-gather after the optimizer too, or the first forwards' waits for
    the gathers inside them) instead of the makespan,
    every rank (stage s, replica r) has stage s's busy time, and each rank's
    all-reduce time and its exposed part equal the plan's for its stage
    (relative 1e-3), and the plan's reductions end where the closed form
    max_k (t_k + sum_{j>=k} s_j) says (launch t_k, ring time s_k alone);
    the recorded `node` of each rank puts a stage's data group on more than
    one node exactly where the plan reduces it over the inter-node link;
  * with tensor ranks, every rank (stage s, tensor rank i) has stage s's
    busy time, and its time in tensor-parallel collectives per step is the
    plan's per micro-batch (`tensor_comm`) times the micro-batches.
"""
import json
import subprocess
import sys

import h5py
import numpy as np

BUBBLE_TOLERANCE = 1e-3


def closed_form(name, planned):
    """The synchronisation's closed form (docs/parallel.md): the reductions of one rank, in launch
    order k with launch t_k and ring time s_k alone, end at max_k (t_k + sum_{j>=k} s_j); overlap
    hides at most what is launched before the rank's last action. The planner's chain must be it."""
    problems = []
    hidden = []
    for s, g in enumerate(planned):
        # grad_sync = "overlap": each reduce-grad action's buckets, launched inside its action.
        # Sharded parameters gathered inside the first forwards: launched at the step's start, first on the link.
        gathers = [dict(x, launch_s=0.0) for x in g.get("param_gathers", [])]
        red = gathers + [b for x in g["reduce_grad"] for b in x.get("buckets", [x])]
        end = max(red[k]["launch_s"] + sum(x["ring_s"] for x in red[k:]) for k in range(len(red)))
        if abs(end - g["end_s"]) > 1e-9 * max(1.0, g["end_s"]):
            problems.append(f"{name}: stage {s}: the chain ends at {g['end_s']}, the closed form at {end}")
        for k, x in enumerate(gathers):
            want = sum(y["ring_s"] for y in gathers[:k + 1])
            if abs(x["end_s"] - want) > 1e-9 * max(1.0, want):
                problems.append(f"{name}: stage {s}: gather {k} ends at {x['end_s']}, its chain at {want}")
        reduced = red[len(gathers):]
        hidden.append(sum(x["ring_s"] for x in reduced) - (g["exposed_s"] - g["gather_s"] - g.get("gather_wait_s", 0.0)))
    print(f"{name:16s} closed form: the reductions end as max_k(t_k + sum s_j); hidden in the cool-down "
          f"{min(hidden):.6f}..{max(hidden):.6f} s per rank")
    return problems


def check_grad_sync(name, r, counted, stage, planned):
    """Each rank's all-reduce and its exposed part, every counted step, against its stage's plan."""
    problems = closed_form(name, planned)
    for key, plan_key in (("grad_sync_s", "sync_s"), ("grad_sync_exposed_s", "exposed_s")):
        got = np.asarray(r[key])[counted]
        want = np.asarray([planned[s][plan_key] for s in stage])
        print(f"{name:16s} {key}: measured {got[0].min():.6f}..{got[0].max():.6f} s, "
              f"planned {want.min():.6f}..{want.max():.6f} s")
        if not np.allclose(got, np.broadcast_to(want, got.shape), rtol=1e-3, atol=1e-9):
            problems.append(f"{name}: {key} per rank {got[0].tolist()} != planned {want.tolist()}")
    return problems


def check_nodes(name, r, stage, planned):
    """The recorded node of each rank (the modelled machine's, on sim): a stage's data group spans
    nodes exactly where the plan reduced it over the inter-node link."""
    if "node" not in r:
        return [f"{name}: no per-rank node dataset"]
    node = np.asarray(r["node"])
    problems = []
    for s, g in enumerate(planned):
        spans = len(set(node[stage == s].tolist())) > 1
        if spans != bool(g["inter_node"]):
            problems.append(f"{name}: stage {s}'s ranks are on nodes {sorted(set(node[stage == s].tolist()))} but "
                            f"the plan says inter_node {g['inter_node']}")
    print(f"{name:16s} nodes: {node.tolist()}")
    return problems


def check_tensor_comm(name, r, counted, stage, run):
    """Each rank's time in tensor-parallel collectives per step: its stage's planned per micro-batch
    forward and backward (a full recomputation runs the forward's twice), times the micro-batches."""
    m = run["num_microbatches"]
    per = {t["stage"]: t for t in run["tensor_comm"]}
    again = 2.0 if run["recompute"] == "full" else 1.0
    want = np.asarray([m * (again * per[s]["forward_s"] + per[s]["backward_s"]) for s in stage])
    got = np.asarray(r["tensor_comm_s"])[counted]
    print(f"{name:16s} tensor_comm_s: measured {got[0].min():.6f}..{got[0].max():.6f} s, "
          f"planned {want.min():.6f}..{want.max():.6f} s")
    if not np.allclose(got, np.broadcast_to(want, got.shape), rtol=1e-6, atol=1e-9):
        return [f"{name}: tensor_comm_s per rank {got[0].tolist()} != planned {want.tolist()}"]
    return []


def main():
    pipebench, job, *overrides, path = sys.argv[1:]
    plan = json.loads(subprocess.run([pipebench, "plan", job, "--format", "json", *overrides], check=True,
                                     capture_output=True, text=True).stdout)
    planned = {r["name"]: r["simulated"] for r in plan["runs"]}
    # The ranks a stage's gradients are reduced over: its replicas' context ranks.
    replicas = {r["name"]: r.get("data_parallel", 1) * r.get("context_parallel", 1) for r in plan["runs"]}
    tensor = {r["name"]: r for r in plan["runs"] if r.get("tensor_parallel", 1) > 1}
    problems = []
    with h5py.File(path, "r") as f:
        if f.attrs["evidence_level"] != "simulated":
            problems.append(f"evidence_level is {f.attrs['evidence_level']!r}, not 'simulated'")
        names = list(f["runs"])
        if not names:
            problems.append("no runs in the file")
        for name in names:
            r = f["runs"][name]
            if r.attrs["status"] != "ok":
                problems.append(f"{name}: status {r.attrs['status']}")
                continue
            sim = planned[name]
            counted = np.asarray(r["is_warmup"]) == 0
            step = np.asarray(r["step_time_s"])[counted]
            work = (np.asarray(r["forward_s"]) + np.asarray(r["backward_s"]))[counted]
            opt = np.asarray(r["optimizer_s"])[counted]
            bm = float(r.attrs["bubble_measured_median"])
            d = replicas[name]
            stage = np.asarray(r["pipeline_rank"]) if "pipeline_rank" in r else np.arange(len(sim["busy_s"]))
            busy = np.asarray(sim["busy_s"])[stage]  # per rank: its stage's
            # The planned bubble over the step the plan predicts (with replicas
            # the exposed all-reduce idles every rank too, and ZeRO-1's all-gather),
            # the optimizer steps busy, as the measured bubble counts them.
            gather = max((g["gather_s"] for g in sim.get("grad_sync", [])), default=0.0)
            planned_opt = np.asarray(sim["optimizer_s"])[stage]
            planned_bubble = 1.0 - (busy.sum() + planned_opt.sum()) / (len(busy) * sim["iteration_s"])
            print(f"{name:16s} bubble measured {bm:.6f} planned {planned_bubble:.6f}; step {step[0]:.6f} s, "
                  f"planned {sim['step_s']:.6f} s (makespan {sim['makespan_s']:.6f} s), optimizer <= {opt.max():.6f} s")
            # The schedule's own bubble from the measured medians (the verdict's
            # reference): with replicas over the step with the exposed
            # synchronisation, as measured (it once left that out, and the
            # verdict blamed the executor for the planned all-reduce).
            bs = float(r.attrs["bubble_simulated"])
            if abs(bs - planned_bubble) > BUBBLE_TOLERANCE:
                problems.append(f"{name}: bubble_simulated {bs:.6f} is {abs(bs - planned_bubble):.6f} from the "
                                f"planned {planned_bubble:.6f}")
            if abs(bm - planned_bubble) > BUBBLE_TOLERANCE:
                problems.append(f"{name}: measured bubble {bm:.6f} is {abs(bm - planned_bubble):.6f} from the "
                                f"planned {planned_bubble:.6f}")
            if not np.allclose(work, np.broadcast_to(busy, work.shape), rtol=1e-6, atol=1e-8):
                problems.append(f"{name}: forward+backward per rank {work[0].tolist()} != planned {busy.tolist()}")
            extra = step - sim["step_s"]
            # ZeRO-1's parameter all-gather follows the optimizer, as it does in the plan.
            if np.any(extra < -1e-8) or np.any(extra > opt.max(axis=1) + gather + 1e-8):
                problems.append(f"{name}: step times {step.tolist()} vs the planned {sim['step_s']} + optimizer "
                                f"{opt.max(axis=1).tolist()}")
            if np.any(np.abs(step - sim["iteration_s"]) > 1e-6 * sim["iteration_s"]):
                problems.append(f"{name}: step times {step.tolist()} != the planned iteration {sim['iteration_s']}")
            if d > 1:
                problems += check_grad_sync(name, r, counted, stage, sim["grad_sync"])
                problems += check_nodes(name, r, stage, sim["grad_sync"])
            if name in tensor:
                problems += check_tensor_comm(name, r, counted, stage, tensor[name])
            if np.ptp(step) > 1e-9 * step.max():
                problems.append(f"{name}: counted steps differ on a virtual clock: {step.tolist()}")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
