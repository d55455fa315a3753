#!/usr/bin/env python3
"""`pipebench plan JOB --format json` is one JSON document with the keys of
docs/plan.md, and its numbers agree with the closed forms they stand for."""
import json
import subprocess
import sys

pipebench, job = sys.argv[1], sys.argv[2]
proc = subprocess.run([pipebench, "plan", job, "--format", "json"], capture_output=True, text=True, check=True)
doc = json.loads(proc.stdout)
RUN_KEYS = ["name", "pipeline_size", "num_microbatches", "schedule", "layers_per_stage", "stage_params",
            "bubble_analytic", "unit", "simulated", "memory"]
MEM_KEYS = ["stage", "params_bytes", "grads_bytes", "optimizer_bytes", "activation_bytes_per_microbatch",
            "activations_peak_bytes", "comm_bytes", "total_bytes"]
assert doc["runs"], "no runs"
for run in doc["runs"]:
    for k in RUN_KEYS:
        assert k in run, f"run {run.get('name')}: missing {k}"
    for k in ["time_steps", "bubble", "peak_live_activations"]:
        assert k in run["unit"], f"unit.{k} missing"
    for k in ["makespan_s", "bubble", "peak_live_activations"]:
        assert k in run["simulated"], f"simulated.{k} missing"
    p, m = run["pipeline_size"], run["num_microbatches"]
    v = run["virtual_stages_per_rank"]
    assert len(run["layers_per_stage"]) == p * v and len(run["stage_rank"]) == p * v
    assert len(run["stage_params"]) == p and len(run["memory"]) == p
    assert sum(run["layers_per_stage"]) == doc["model"]["layers"]
    assert sum(run["stage_params"]) == doc["model"]["total_params"]
    # The closed form of each schedule (docs/schedules.md) and the unit-cost
    # steps (every action of every chunk costs 1).
    sched = run["schedule"]
    if run["mode"] == "inference":
        form, steps = (p - 1) / (m + p - 1), p + m - 1
    elif sched == "interleaved-1f1b":
        form, steps = (p - 1) / (v * m + p - 1), 2 * v * m + 2 * (p - 1)
    elif sched == "zb-h1":
        form, steps = (p - 1) / (3 * m + p - 1), 3 * m + p - 1
    elif sched == "looped-bfs":
        form, steps = ((p - 1) / (v * m + p - 1), 2 * v * m + 2 * (p - 1)) if m >= p else (None, None)
    elif sched == "interleaved-zb":
        form, steps = ((p - 1) / (3 * v * m + p - 1), 3 * v * m + p - 1) if m >= p else (None, None)
    elif sched == "dualpipev":  # m >= 2p always (checked when the workload loads)
        form, steps = (p - 1) / (6 * m + p - 1), 6 * m + p - 1
    elif sched == "zb-v":
        form, steps = ((p - 1) / (6 * m + p - 1), 6 * m + p - 1) if m >= 2 * p else (None, None)
    else:
        form, steps = (p - 1) / (m + p - 1), 2 * (m + p - 1)
    if form is None:
        assert run["bubble_analytic"] is None, run["bubble_analytic"]
    else:
        assert abs(run["bubble_analytic"] - form) < 1e-12, (sched, run["bubble_analytic"], form)
        assert abs(run["unit"]["bubble"] - run["bubble_analytic"]) < 1e-12, (sched, run["unit"]["bubble"])
        assert run["unit"]["time_steps"] == steps, (sched, run["unit"]["time_steps"], steps)
    for mem in run["memory"]:
        for k in MEM_KEYS:
            assert k in mem, f"memory.{k} missing"
        total = (mem["params_bytes"] + mem["grads_bytes"] + mem["optimizer_bytes"] + mem["activations_peak_bytes"]
                 + mem["comm_bytes"] + mem["workspace_bytes"])
        assert mem["total_bytes"] == total
    # The step as measured: the makespan (with replicas their reduction), then the longest optimizer step.
    sim = run["simulated"]
    assert len(sim["optimizer_s"]) == p
    assert sim["iteration_s"] >= sim["step_s"] >= sim["makespan_s"] - 1e-12, (sim["iteration_s"], sim["step_s"])
    if run["mode"] == "inference":
        assert sim["iteration_s"] == sim["step_s"]
    # With a device preset (docs/time-model.md): the terms are the simulation's busy time, per rank.
    if "time_model" in run:
        tm = run["time_model"]
        assert len(tm["ranks"]) == p
        for r in tm["ranks"]:
            compute = sum(r[k]["total_s"] for k in ("forward", "input_grad", "weight_grad", "recompute"))
            assert abs(compute + r["tp_comm_s"] - r["busy_s"]) <= 1e-9 * max(1.0, r["busy_s"]), (compute, r)
            assert abs(r["busy_s"] - sim["busy_s"][r["stage"]]) <= 1e-9 * max(1.0, r["busy_s"])
        assert tm["iteration_s"] == sim["iteration_s"] and 0 < tm["mfu"] < 1, tm["mfu"]
print(f"ok: {job}: {len(doc['runs'])} runs")
