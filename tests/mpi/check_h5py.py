#!/usr/bin/env python3
"""Reads a results file with h5py (Debian python3-h5py) and checks that every
name SPEC §7 requires exists, with the documented shapes."""
import sys

import h5py

ROOT_ATTRS = ["schema_version", "tool_version", "git_sha", "created_utc", "job_name", "job_toml", "overrides",
              "command_line", "evidence_level", "status"]
PROV_ATTRS = ["hostnames", "pids", "cpu_model", "gpu_names", "gpu_uuids", "driver_version", "cuda_version",
              "nccl_version", "mpi_library_version", "compiler", "compiler_flags", "blas", "slurm_job_id",
              "slurm_job_nodelist", "environment"]
RUN_ATTRS = ["status", "failure_kind", "failure_message", "pipeline_size", "micro_batch_size", "num_microbatches",
             "schedule", "layers_per_stage", "backend", "dtype", "warmup", "repeats", "baseline", "bubble_analytic",
             "bubble_simulated", "step_time_median_s", "slowest_stage_median_s", "bubble_measured_median",
             "peak_mem_max_bytes", "loss_max_rel_dev", "decision", "decision_reasons"]
STEP = ["step_time_s", "is_warmup", "loss", "slowest_stage_s", "bubble_measured", "grad_norm", "clipped"]
STEP_RANK = ["busy_s", "comm_wait_s", "comm_transfer_s", "idle_s", "forward_s", "backward_s", "optimizer_s"]
RANK = ["peak_mem_bytes", "memory_capacity_bytes", "stage_params", "peak_live_activations"] + [
    f"peak_mem_{c}_bytes" for c in ["params", "grads", "optimizer", "activations", "workspace", "comm"]]
EVENT_FIELDS = ["step", "rank", "kind", "microbatch", "chunk", "start_s", "end_s", "wait_s"]

path = sys.argv[1]
missing = []
with h5py.File(path, "r") as f:
    missing += [f"/@{a}" for a in ROOT_ATTRS if a not in f.attrs]
    assert f.attrs["schema_version"] == 1
    missing += [f"/provenance@{a}" for a in PROV_ATTRS if a not in f["provenance"].attrs]
    for name, g in f["runs"].items():
        missing += [f"/runs/{name}@{a}" for a in RUN_ATTRS if a not in g.attrs]
        missing += [f"/runs/{name}/{d}" for d in STEP + STEP_RANK + RANK + ["events", "stage_layers"] if d not in g]
        if missing:
            continue
        steps = g["step_time_s"].shape[0]
        ranks = g["peak_mem_bytes"].shape[0]
        for d in STEP:
            assert g[d].shape == (steps,), (name, d, g[d].shape)
        for d in STEP_RANK:
            assert g[d].shape == (steps, ranks), (name, d, g[d].shape)
        for d in RANK:
            assert g[d].shape == (ranks,), (name, d, g[d].shape)
        assert g["stage_layers"].shape == (ranks, 2)
        assert list(g["events"].dtype.names) == EVENT_FIELDS, g["events"].dtype.names
        status = g.attrs["status"]
        status = status.decode() if isinstance(status, bytes) else status
        if status == "ok":
            assert steps == g.attrs["warmup"] + g.attrs["repeats"], (name, steps)
            assert len(g["events"]) > 0
            # The driver's device memory: -1 on sim (no device), one per rank.
            for d in ("device_mem_used_before_bytes", "device_mem_used_peak_bytes"):
                assert g[d].shape == (ranks,) and all(int(x) == -1 for x in g[d][:]), (name, d, g[d][:])
            # Each action's receive wait; per step and rank they sum to comm_wait_s.
            ev, cw = g["events"][:], g["comm_wait_s"][:]
            # Stored event times are rounded to 2^-30 s: each wait is within 2^-31 s.
            sums, counts = {}, {}
            for e in ev:
                assert e["wait_s"] >= 0, (name, e)
                key = (int(e["step"]), int(e["rank"]))
                sums[key] = sums.get(key, 0.0) + float(e["wait_s"])
                counts[key] = counts.get(key, 0) + 1
            for (step, rank), total in sums.items():
                tol = 1e-9 * max(1.0, total) + counts[(step, rank)] * 2.0**-31
                assert abs(total - cw[step][rank]) <= tol, (name, step, rank, total, cw[step][rank])
if missing:
    print("missing: " + ", ".join(missing))
    sys.exit(1)
print(f"h5py: {path}: all required names present")
