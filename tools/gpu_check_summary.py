#!/usr/bin/env python3
"""The summary of a tools/gpu-check.sh run: reads the step logs in OUT and
writes OUT/summary.json (docs/cuda-backend.md lists its fields), then prints
its verdict line. Run by gpu-check.sh; tests/bundle/check_gpu_check_summary.py
runs it on fixed logs.

Usage: gpu_check_summary.py OUT
"""
import json, os, re, sys
out = sys.argv[1]
def text(name):
    p = os.path.join(out, name)
    return open(p, errors="replace").read() if os.path.exists(p) else ""
def last_json(name):
    for line in reversed(text(name).splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None
steps = []
for line in text("steps.txt").splitlines():
    name, verdict, seconds, *rest = line.split(" ", 3) + [""]
    steps.append({"step": name, "verdict": verdict, "seconds": int(seconds), "note": " ".join(rest).strip()})
gemm = [dict(zip(("M", "N", "K", "fp32", "bf16", "fp16"), map(float, m.groups())))
        for m in re.finditer(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s", text("gemm.log"), re.M)]
torch_gemm = (last_json("torch-gemm.log") or {}).get("gemm_tflops", [])
for g, t in zip(gemm, torch_gemm):
    for k in ("fp32", "bf16", "fp16"):
        g[f"torch_{k}"] = t.get(k)
        g[f"ratio_{k}"] = g[k] / t[k] if t.get(k) else None
def model_lines(name):  # bench_cuda_gemm's `model` lines: each GEMM beside the time model
    num = lambda x: None if x == "-" else float(x)
    keys = ("dtype", "M", "N", "K", "measured_ms", "model_ms", "model_over_measured", "side", "table_e",
            "measured_e", "bandwidth_fraction")
    return [dict(zip(keys, (f[0], *map(float, f[1:7]), f[7], float(f[8]), num(f[9]), num(f[10]))))
            for f in (line.split()[1:] for line in text(name).splitlines() if line.startswith("model "))
            if len(f) == len(keys)]
k_sweep = model_lines("gemm-k-sweep.log")
# bench_cuda_gemm --accumulate's lines: a weight gradient's output read, measured (docs/time-model.md, "GEMMs").
accumulate = [dict(zip(("M", "N", "K", "written_ms", "accumulated_ms", "read_ms", "serial"),
                       (*map(float, f[:6]), None if f[6] == "-" else float(f[6]))))
              for f in (line.split()[1:] for line in text("gemm-accumulate.log").splitlines()
                        if line.startswith("accumulate ")) if len(f) == 7]
serial = [a["serial"] for a in accumulate if a["serial"] is not None]
runs = {}
summary = os.path.join(out, "report", "summary.json")
if os.path.exists(summary):
    for r in json.load(open(summary))["runs"]:
        runs[r["run"]] = {k: r.get(k) for k in ("status", "failure_kind", "step_time_median_s", "bubble_measured",
                                               "peak_mem_max_bytes", "decision", "prediction")}
torch_gpt = last_json("torch-gpt.log") or {}
base = runs.get("baseline", {}).get("step_time_median_s")
peer = torch_gpt.get("gpt_step_time_median_s")
measured_e = {int(r["K"]): r["measured_e"] for r in k_sweep if r["dtype"] == "bf16" and r["side"] == "compute"}
result = {
    "gpu": text("gpu.txt").strip(), "version": text("version.txt").strip().splitlines()[:1],
    "steps": steps, "passed": all(s["verdict"] == "PASS" for s in steps),
    "cross_check": [l for l in text("gpu-tests.log").splitlines() if re.search(r"loss|norm|passed|failed|SKIP", l)][-20:],
    "gemm_tflops": gemm, "runs": runs,
    # The time model beside each GEMM (bench_cuda_gemm's preset), and the K sweep's bf16 e(K):
    # the efficiency table measured where the model's compute side applies (docs/time-model.md).
    "gemm_model": model_lines("gemm.log"), "gemm_k_sweep_model": k_sweep,
    "gemm_efficiency_measured": measured_e,
    # The same points as the [device] key that puts them in place of the preset's table
    # (docs/time-model.md, "Your own figures"); null when the sweep had none.
    "gemm_efficiency_toml": ("gemm_efficiency = [" + ", ".join(f"[{k}, {min(e, 1.0):.3f}]" for k, e in sorted(measured_e.items()))
                             + "]") if measured_e else None,
    # The accumulating GEMMs' share of the output read not hidden behind the math, and the
    # [device] key that puts their median in place of the preset's (null without measurements).
    "gemm_accumulate": accumulate,
    "gemm_accumulate_serial_toml": (f"gemm_accumulate_serial = {min(max(sorted(serial)[len(serial) // 2], 0.0), 1.0):.3f}"
                                    if serial else None),
    "torch_gpt_step_time_median_s": peer,
    "baseline_vs_torch_step_ratio": base / peer if base and peer else None,
    # The time model's step over the measured one, minus 1 (with the GPU's preset; null without).
    "time_model_step_error": next((row["planned"] / row["measured"] - 1
                                   for row in ((runs.get("baseline") or {}).get("prediction") or {}).get("rows", [])
                                   if row["metric"] == "step time (median)" and row["measured"]
                                   and "time model" in runs["baseline"]["prediction"]["basis"]), None),
    # compute-sanitizer's verdict lines, per sanitizer step of the first part (tools/gpu-check.sh).
    "sanitizer": {step: [l for l in text(f"{step}.log").splitlines() if "ERROR SUMMARY" in l or "error" in l.lower()][-5:]
                  for step in ("memcheck-run", "initcheck", "racecheck", "memcheck-schedules")},
}
json.dump(result, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(json.dumps({k: result[k] for k in ("passed", "baseline_vs_torch_step_ratio", "time_model_step_error")}))
