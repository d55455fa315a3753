#!/usr/bin/env python3
"""fidelity.py PIPEBENCH [--write docs/fidelity.md | --check docs/fidelity.md]

The planner's predictions beside published measurements (docs/fidelity.md):
`pipebench plan JOB --format json` for each published setup, nothing fitted
to the rows. Time rows: the plan's iteration (`simulated.iteration_s`: the
schedule simulated with the hardware time model of the job's device preset,
then the optimizer step). Memory rows: the largest rank's parameters +
gradients + optimizer state, and its activation peak.

Without --write/--check the table is printed. --check exits 1 when the file
differs from what the planner predicts now (the test `bench.fidelity`).
"""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GIB = 1024.0 ** 3

# Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
# Transformer Models" (arXiv 2205.05198): Table 5 (time per iteration on
# Selene, A100 80 GB) and Figure 1 (memory per GPU).
PAPER = "Korthikanti et al. 2022 (arXiv 2205.05198)"
TIME_ROWS = [
    # (label, job, run, published seconds, where)
    ("22B, t 8, p 1, full recomputation", "jobs/korthikanti/gpt_22b_sim.toml", "tp8_full", 1.42, "Table 5"),
    ("22B, t 8, p 1, SP + selective", "jobs/korthikanti/gpt_22b_sim.toml", "tp8_sp_selective", 1.10, "Table 5"),
    ("175B, t 8, p 8, v 3, full recomputation", "jobs/korthikanti/gpt_175b_sim.toml", "tp8_full", 18.13, "Table 5"),
    ("175B, t 8, p 8, v 3, SP + selective", "jobs/korthikanti/gpt_175b_sim.toml", "tp8_sp_selective", 13.75, "Table 5"),
    # The paper's larger two models. Their layouts (one replica, micro-batch 1,
    # as many micro-batches as GPUs; 530B interleaved v = 3, 1T plain 1F1B) are
    # those of Calculon's validation configurations (calculon-ai/calculon,
    # validation/530B_*.json and 1T_*.json), which quote the same Table 5 times.
    ("530B, t 8, p 35, v 3, full recomputation", "jobs/korthikanti/gpt_530b_sim.toml", "tp8_full", 49.05,
     "Table 5; layout as Calculon's validation"),
    ("530B, t 8, p 35, v 3, SP + selective", "jobs/korthikanti/gpt_530b_sim.toml", "tp8_sp_selective", 37.83,
     "Table 5; layout as Calculon's validation"),
    ("1T, t 8, p 64, full recomputation", "jobs/korthikanti/gpt_1t_sim.toml", "tp8_pp64_full", 94.42,
     "Table 5; layout as Calculon's validation"),
    ("1T, t 8, p 64, SP + selective", "jobs/korthikanti/gpt_1t_sim.toml", "tp8_pp64_sp_selective", 71.49,
     "Table 5; layout as Calculon's validation"),
]
MEMORY_ROWS = [
    # (label, job, run, quantity, published GiB, where)
    ("22B parameters + optimizer", "jobs/korthikanti/gpt_22b_sim.toml", "tp8_none", "state", 45.56, "Figure 1"),
    ("22B activations, no recomputation", "jobs/korthikanti/gpt_22b_sim.toml", "tp8_none", "activations", 59.25, "Figure 1"),
    ("22B activations, SP + selective", "jobs/korthikanti/gpt_22b_sim.toml", "tp8_sp_selective", "activations", 9.56,
     "Figure 1"),
    ("175B parameters + optimizer", "jobs/korthikanti/gpt_175b_sim.toml", "tp8_none", "state", 45.56, "Figure 1"),
    ("175B activations, no recomputation", "jobs/korthikanti/gpt_175b_sim.toml", "tp8_none", "activations", 66.84,
     "Figure 1"),
    ("175B activations, SP + selective", "jobs/korthikanti/gpt_175b_sim.toml", "tp8_sp_selective", "activations", 12.35,
     "Figure 1"),
]


def plan(pipebench, job, cache={}):
    if job not in cache:
        out = subprocess.run([pipebench, "plan", str(ROOT / job), "--format", "json"], check=True,
                             capture_output=True, text=True).stdout
        cache[job] = {r["name"]: r for r in json.loads(out)["runs"]}
    return cache[job]


def memory_gib(run, quantity):
    rows = run["memory"]
    if quantity == "state":
        return max(m["params_bytes"] + m["grads_bytes"] + m["optimizer_bytes"] for m in rows) / GIB
    return max(m["activations_peak_bytes"] for m in rows) / GIB


def table(pipebench):
    lines = ["| row | source | published | predicted | error |", "|---|---|---:|---:|---:|"]
    time_errors, memory_errors = [], []
    for label, job, name, published, where in TIME_ROWS:
        run = plan(pipebench, job)[name]
        predicted = run["simulated"]["iteration_s"]
        err = (predicted - published) / published
        time_errors.append(abs(err))
        tm = run["time_model"]
        lines.append(f"| {label}: time per iteration (`{Path(job).name}` run `{name}`; MFU {100 * tm['mfu']:.1f}%) "
                     f"| {PAPER}, {where} | {published:.2f} s | {predicted:.2f} s | {100 * err:+.1f}% |")
    for label, job, name, quantity, published, where in MEMORY_ROWS:
        predicted = memory_gib(plan(pipebench, job)[name], quantity)
        err = (predicted - published) / published
        memory_errors.append(abs(err))
        lines.append(f"| {label} (`{Path(job).name}` run `{name}`) | {PAPER}, {where} | {published:.2f} GiB "
                     f"| {predicted:.2f} GiB | {100 * err:+.1f}% |")
    mean = lambda xs: 100 * sum(xs) / len(xs)
    lines.append("")
    lines.append(f"Average absolute error: time per iteration {mean(time_errors):.1f}% ({len(time_errors)} rows), "
                 f"memory {mean(memory_errors):.1f}% ({len(memory_errors)} rows).")
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- fidelity table: begin -->\n", "<!-- fidelity table: end -->\n"


def main():
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    text = table(args[0])
    if len(args) == 1:
        sys.stdout.write(text)
        return 0
    mode, path = args[1], Path(args[2])
    doc = path.read_text()
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = head + BEGIN + text + END + tail
    if mode == "--write":
        path.write_text(new)
        return 0
    if new != doc:
        print(f"{path} is out of date: bench/fidelity/fidelity.py PIPEBENCH --write {path}\nnow:\n{text}")
        return 1
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
