#!/usr/bin/env python3
"""tools/gpu_check_summary.py on fixed step logs, no GPU needed: a lent GPU's
run is scarce, so the summary it writes is checked here. The `model` lines are
written with the format string read from bench_cuda_gemm.cpp itself, so a
change to the program's output that the summary no longer reads fails here.
The logs go to a temporary folder, not the build tree: report.summary_schema
validates every summary.json under build/tests as a report's, and these are not.

Usage: check_gpu_check_summary.py SRC
"""
import json
import os
import re
import subprocess
import sys
import tempfile


def line_format(src, word):
    code = open(os.path.join(src, "bench/micro/bench_cuda_gemm.cpp")).read()
    m = re.search(r'std::printf\("(' + word + r' [^"]*)\\n"', code)
    if not m:
        sys.exit(f"FAIL: no `{word}` line format in bench_cuda_gemm.cpp")
    return m.group(1)


def model_format(src):
    return line_format(src, "model")


def main():
    with tempfile.TemporaryDirectory(prefix="gpu_check_summary.") as out:
        return check(sys.argv[1], out)


def check(src, out):
    os.makedirs(os.path.join(out, "report"))
    fmt = model_format(src)

    def write(name, text):
        with open(os.path.join(out, name), "w") as f:
            f.write(text)

    table = ("GEMM TFLOP/s on NVIDIA H200 (cublasGemmEx, fp32 accumulation, median of 20)\n"
             "     M      N      K       fp32       bf16       fp16    bf16/fp32    fp16/fp32\n")
    write("gemm.log", table + "  4096   3072   1024       50.0      600.0      610.0        12.00        12.20\n"
          "time model: h200-141gb, 132 SMs (this GPU: 132)\n"
          "      dtype      M      N      K  measured_ms   model_ms model/meas    side     e(K)    e(K) here  bandwidth\n"
          + fmt % ("bf16", 4096, 3072, 1024, 0.0429, 0.0400, 0.932, "compute", 0.830, "0.773", "-") + "\n")
    write("gemm-k-sweep.log", table
          + fmt % ("bf16", 8192, 8192, 32, 0.0400, 0.0331, 0.828, "memory", 0.400, "-", "0.700") + "\n"
          + fmt % ("bf16", 8192, 8192, 4096, 0.6000, 0.6830, 1.138, "compute", 0.850, "0.967", "-") + "\n"
          + fmt % ("fp16", 8192, 8192, 4096, 0.6100, 0.6830, 1.120, "compute", 0.850, "0.951", "-") + "\n"
          + fmt % ("fp32", 8192, 8192, 4096, 9.0000, 8.5000, 0.944, "compute", 0.850, "0.803", "-") + "\n")
    acc = line_format(src, "accumulate")
    write("gemm-accumulate.log", "bf16 GEMM into fp32 on NVIDIA H200, written (beta 0) and accumulated (beta 1)\n"
          + acc % (8192, 8192, 2048, 0.50, 0.56, 0.05, "1.200") + "\n"
          + acc % (8192, 8192, 8192, 1.90, 1.92, 0.05, "0.400") + "\n"
          + acc % (20480, 10240, 2048, 2.40, 2.49, 0.10, "0.950") + "\n")
    write("torch-gemm.log", 'noise\n{"gemm_tflops": [{"fp32": 40.0, "bf16": 500.0, "fp16": 0}]}\n')
    write("torch-gpt.log", '{"gpt_step_time_median_s": 0.2}\n')
    write("gpu.txt", "NVIDIA H200, 570.00, 143771 MiB, 9.0\n")
    write("steps.txt", "gemm PASS 12 exit 0\nbaseline-1gpu PASS 40 exit 0\nsanitizer FAIL 30 exit 9\n")
    prediction = {"basis": "the hardware time model of h200-141gb (docs/time-model.md)",
                  "rows": [{"metric": "step time (median)", "unit": "s", "planned": 0.25, "measured": 0.2}]}
    write("report/summary.json", json.dumps({"runs": [{"run": "baseline", "status": "ok", "step_time_median_s": 0.25,
                                                      "prediction": prediction}]}))
    p = subprocess.run([sys.executable, os.path.join(src, "tools/gpu_check_summary.py"), out],
                       capture_output=True, text=True)
    print(p.stdout, p.stderr)
    problems = []
    if p.returncode != 0:
        problems.append(f"exit {p.returncode}")
    s = json.load(open(os.path.join(out, "summary.json")))
    expect = {
        "passed": False,  # the sanitizer step failed
        "gemm_efficiency_measured": {"4096": 0.967},  # bf16 compute-side points only (JSON keys are strings)
        "gemm_efficiency_toml": "gemm_efficiency = [[4096, 0.967]]",  # pasted under [device], it replaces the table
        "gemm_accumulate_serial_toml": "gemm_accumulate_serial = 0.950",  # the median of the three
        "baseline_vs_torch_step_ratio": 1.25,
        "time_model_step_error": 0.25,
    }
    for key, want in expect.items():
        got = s.get(key)
        if isinstance(want, float) and isinstance(got, float):
            ok = abs(got - want) < 1e-9
        else:
            ok = got == want
        if not ok:
            problems.append(f"{key}: {got!r}, expected {want!r}")
    if [g["M"] for g in s["gemm_tflops"]] != [4096.0] or s["gemm_tflops"][0].get("ratio_bf16") != 1.2:
        problems.append(f"gemm_tflops: {s['gemm_tflops']}")
    if s["gemm_tflops"][0].get("ratio_fp16") is not None:
        problems.append("a zero torch figure must give no ratio")
    sweep = s["gemm_k_sweep_model"]
    if [(r["dtype"], r["K"], r["side"]) for r in sweep] != [("bf16", 32.0, "memory"), ("bf16", 4096.0, "compute"),
                                                          ("fp16", 4096.0, "compute"), ("fp32", 4096.0, "compute")]:
        problems.append(f"gemm_k_sweep_model: {sweep}")
    elif sweep[0]["measured_e"] is not None or sweep[0]["bandwidth_fraction"] != 0.7 or sweep[1]["measured_e"] != 0.967:
        problems.append(f"gemm_k_sweep_model's figures: {sweep[:2]}")
    if [(a["M"], a["K"], a["serial"]) for a in s["gemm_accumulate"]] != [(8192.0, 2048.0, 1.2), (8192.0, 8192.0, 0.4),
                                                                      (20480.0, 2048.0, 0.95)]:
        problems.append(f"gemm_accumulate: {s['gemm_accumulate']}")
    if len(s["gemm_model"]) != 1 or s["gemm_model"][0]["model_over_measured"] != 0.932:
        problems.append(f"gemm_model: {s['gemm_model']}")
    for p_ in problems:
        print("FAIL:", p_)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
