#!/usr/bin/env python3
"""fidelity.py PIPEBENCH [--write docs/fidelity.md | --check docs/fidelity.md]

The planner's predictions beside published measurements (docs/fidelity.md):
Korthikanti et al. 2022, Narayanan et al. 2021 (A100), torchtitan's FSDP
runs and Llama 3's 405B pre-training (H100);
`pipebench plan JOB --format json` for each published setup, nothing fitted
to the rows. Time rows: the plan's iteration (`simulated.iteration_s`: the
schedule simulated with the hardware time model of the job's device preset,
then the optimizer step). Memory rows: the largest rank's parameters +
gradients + optimizer state, and its activation peak.

Narayanan et al. 2021's Table 1 gives achieved teraFLOP/s per GPU, not times:
its rows' published time is the paper's own FLOP count (its Eq. 3, which
counts the recomputed forward) over the GPUs' aggregate FLOP/s.

The sensitivity table beside it: every time row's error again with one of the
device's figures 10% less favourable (the GEMM efficiency table, the streaming
bandwidth, the launch cost, the intra- and inter-node links; `--set` of the
workload's own-figure keys, docs/time-model.md "Your own figures"), and with
the accumulating GEMMs' output read overlapped (gemm_accumulate_serial = 0,
the model before 2026-12-07), to show which figure each row's error rests on.
Nothing is chosen from it.

The layer table: Korthikanti et al.'s Table 4, one transformer layer of the
22B model, forward and backward (collectives included, the backward with its
recomputation), beside the plan's `time_model.layer.forward_s` /
`backward_s`. It locates the iteration rows' error: inside the layers or
around them. Its errors are not averaged into the iteration rows'.

Without --write/--check all three are printed. --check exits 1 when the file
differs from what the planner predicts now (the test `bench.fidelity`).
"""
import json
import subprocess
import sys
import tomllib
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
# The same paper's one row with data parallelism (its §6.3): the 530B's SP +
# selective layout with 8 replicas, global batch 2240, the gradients
# all-reduced without overlap. Not one of the eight Calculon's 3.65% is
# reported on, so averaged apart from them.
KORTHIKANTI_DP = "Korthikanti et al. 2022, with data parallelism"
TIME_ROWS_DP = [
    ("530B, t 8, p 35, v 3, d 8, SP + selective", "jobs/korthikanti/gpt_530b_sim.toml", "tp8_sp_selective_dp8", 39.15,
     "§6.3 (2240 GPUs)"),
]
# Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
# Clusters Using Megatron-LM" (arXiv 2104.04473), Table 1: weak scaling on
# Selene. The table's numbers as transcribed in SotaroKaneda/MLCarbon
# (data/megatron_table.csv; its 1T row, 163 teraFLOP/s = 52% and 502 PFLOP/s,
# is the paper's abstract). The layouts (micro-batch, interleaving, DDP) are
# the paper's artifact script, NVIDIA/Megatron-LM examples/sc21/run_table_1.sh;
# each job's header says which. Every row recomputes every layer.
NARAYANAN = "Narayanan et al. 2021 (arXiv 2104.04473)"
TABLE1_ROWS = [
    # (label, job, parameters in billions as printed, GPUs, global batch, achieved teraFLOP/s per GPU)
    ("1.7B, t 1, p 1, d 32", "jobs/narayanan/gpt_1.7b_sim.toml", "1.7", 32, 512, 137),
    ("3.6B, t 2, p 1, d 32", "jobs/narayanan/gpt_3.6b_sim.toml", "3.6", 64, 512, 138),
    ("7.5B, t 4, p 1, d 32", "jobs/narayanan/gpt_7.5b_sim.toml", "7.5", 128, 512, 142),
    ("18.4B, t 8, p 1, d 32", "jobs/narayanan/gpt_18b_sim.toml", "18.4", 256, 1024, 135),
    ("39.1B, t 8, p 2, d 32", "jobs/narayanan/gpt_39b_sim.toml", "39.1", 512, 1536, 138),
    ("76.1B, t 8, p 4, v 3, d 32", "jobs/narayanan/gpt_76b_sim.toml", "76.1", 1024, 1792, 140),
    ("145.6B, t 8, p 8, v 2, d 24", "jobs/narayanan/gpt_145b_sim.toml", "145.6", 1536, 2304, 148),
    ("310.1B, t 8, p 16, v 2, d 15", "jobs/narayanan/gpt_310b_sim.toml", "310.1", 1920, 2160, 155),
    ("529.6B, t 8, p 35, v 3, d 9", "jobs/narayanan/gpt_530b_sim.toml", "529.6", 2520, 2520, 163),
    ("1008B, t 8, p 64, d 6", "jobs/narayanan/gpt_1t_sim.toml", "1008", 3072, 3072, 163),
]


def table1_model(job):
    """The job's (s, l, h, V): sequence, layers, hidden, vocabulary."""
    model = tomllib.loads((ROOT / job).read_text())["model"]
    return model["seq_len"], model["layers"], model["hidden"], model["vocab"]


def eq2_params(s, l, h, v):
    """Narayanan et al.'s Eq. 2: 12·l·h²·(1 + 13/12h + (V + s)/12lh) parameters."""
    return 12 * l * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * l * h))


def eq3_flops(batch, s, l, h, v):
    """Narayanan et al.'s Eq. 3: 96·B·s·l·h²·(1 + s/6h + V/16lh), the FLOPs of
    an iteration with full recomputation (the LM head's not recomputed)."""
    return 96 * batch * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))


def table1_time_rows():
    """Table 1's rows as time rows: the published time Eq. 3 / (GPUs × FLOP/s).
    Each job's shape must give the row's parameter count by Eq. 2 to the
    digits the table prints (a wrong hidden size or layer count fails here)."""
    rows = []
    for label, job, billions, gpus, batch, tflops in TABLE1_ROWS:
        shape = table1_model(job)
        params = eq2_params(*shape)
        if round(params / 1e9, len(billions.partition(".")[2])) != float(billions):
            sys.exit(f"{job}: {params / 1e9:.3f} billion parameters by Eq. 2, Table 1 says {billions}")
        seconds = eq3_flops(batch, *shape) / (gpus * tflops * 1e12)
        rows.append((label, job, "table1", seconds, f"Table 1: {tflops} teraFLOP/s per GPU on {gpus} GPUs, "
                     f"global batch {batch}; time by its Eq. 3", NARAYANAN))
    return rows


# Korthikanti et al. 2022, Table 4: "Time to complete the forward and backward
# pass of a single transformer layer of the 22B model" (the 22B of Table 3:
# t = 8, micro-batch 4), milliseconds.
LAYER_JOB = "jobs/korthikanti/gpt_22b_sim.toml"
LAYER_ROWS = [
    # (Table 4's experiment, run, forward ms, backward ms)
    ("Baseline no recompute", "tp8_none", 7.7, 11.9),
    ("Sequence Parallelism", "tp8_sp", 7.2, 11.8),
    ("Baseline with recompute", "tp8_full", 7.7, 19.5),
    ("Selective Recompute", "tp8_selective", 7.7, 13.2),
    ("Selective + Sequence", "tp8_sp_selective", 7.2, 13.1),
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


def plan_json(pipebench, job, overrides=(), cache={}):
    """`pipebench plan JOB --format json`, once per job and overrides."""
    key = (job, tuple(overrides))
    if key not in cache:
        sets = [a for o in overrides for a in ("--set", o)]
        out = subprocess.run([pipebench, "plan", str(ROOT / job), "--format", "json", *sets], check=True,
                             capture_output=True, text=True).stdout
        cache[key] = json.loads(out)
    return cache[key]


def plan(pipebench, job, overrides=()):
    """The job's planned runs by name."""
    return {r["name"]: r for r in plan_json(pipebench, job, overrides)["runs"]}


def plan_model(pipebench, job):
    return plan_json(pipebench, job)["model"]


# Each figure 10% less favourable, the others as planned: (column, overrides), from the figures the
# run was planned with (`time_model.device` of plan --format json).
SLOWER = 0.9


def sensitivity_variants(device):
    table = ", ".join(f"[{k:g}, {e * SLOWER:.6g}]" for k, e in device["gemm_efficiency"])
    return [
        ("GEMM e × 0.9", [f"device.gemm_efficiency=[{table}]"]),
        ("memory bandwidth × 0.9", [f"device.hbm_efficiency={device['hbm_efficiency'] * SLOWER:.6g}"]),
        ("launch cost × 1.1", [f"device.kernel_launch_us={device['kernel_launch_us'] / SLOWER:.6g}"]),
        ("NVLink × 0.9", [f"device.sim_link_gbps={device['intra_node_gbps'] * SLOWER:.6g}"]),
        ("InfiniBand × 0.9", [f"device.sim_inter_node_gbps={device['inter_node_gbps'] * SLOWER:.6g}"]),
        # Not a 10% change: the accumulating GEMMs' output read overlapped with their math,
        # as the model had it before the A100's was made serial (docs/time-model.md, "GEMMs").
        ("accumulate read overlapped", ["device.gemm_accumulate_serial=0"]),
    ]


# torchtitan's published FSDP2 runs on H100 (pytorch/torchtitan docs/performance.md,
# torchtitan 9dec370 / torch 1963fc8, 2024-12): Llama 3.1 8B, 1D FSDP, local
# batch 2 of 8192 tokens, selective checkpointing, no torch.compile or Float8
# (its Tables 1 and 3). Overlapped data parallelism: the parameters gathered
# one layer ahead inside every forward and backward, the gradients
# reduce-scattered inside the backward. Published as tokens/s per GPU: the
# step is the GPU's 16,384 tokens over it. Their H100s are 96 GB HBM2e at
# 500 W (the preset: 80 GB HBM3 at 700 W); averaged apart.
TORCHTITAN = "torchtitan docs/performance.md (2024-12)"
TOKENS_PER_GPU = 2 * 8192
TIME_ROWS_TT = [
    ("Llama 3.1 8B, FSDP over 8 H100s, b 2, selective", "jobs/torchtitan/llama3_8b_fsdp_h100.toml", "fsdp8",
     TOKENS_PER_GPU / 5762, "Table 1: 5,762 tokens/s per GPU"),
    ("Llama 3.1 8B, FSDP over 128 H100s, b 2, selective", "jobs/torchtitan/llama3_8b_fsdp_h100.toml", "fsdp128",
     TOKENS_PER_GPU / 5605, "Table 3: 5,605 tokens/s per GPU"),
]
MEMORY_ROWS_TT = [
    # Their figure is PyTorch's peak reserved memory (the caching allocator's, fragmentation included);
    # pipebench's the largest rank's planned total.
    ("Llama 3.1 8B, FSDP over 8 H100s: peak memory", "jobs/torchtitan/llama3_8b_fsdp_h100.toml", "fsdp8", "total",
     82.4, "Table 1"),
    ("Llama 3.1 8B, FSDP over 128 H100s: peak memory", "jobs/torchtitan/llama3_8b_fsdp_h100.toml", "fsdp128", "total",
     67.0, "Table 3"),
]


# Llama-3.1-405B's pre-training on H100s (Dubey et al. 2024, "The Llama 3 Herd
# of Models", arXiv 2407.21783, Table 4; the same figures on Balaji's SC'24
# slide, glennklockwood.com/garden/llama-3.1): published as TFLOP/s per GPU.
# The paper does not give its FLOP count: the published step here is
# pipebench's model FLOPs of the step over (GPUs x the published rate), so the
# error is the MFU's. Their schedule was interleaved with a degree not given;
# the jobs run 1F1B (jobs/llama3_405b_sim.toml says why), so the rows with a
# large 1F1B bubble (m 16 on p 16) read slow. Flash attention; the 128K row
# with context parallelism 16, K/V all-gathered (§3.3.2).
LLAMA3 = "Dubey et al. 2024 (Llama 3), Table 4"
TIME_ROWS_LLAMA3 = [
    ("Llama 3.1 405B, 8K tokens, t 8 x p 16 x d 64 on 8,192 H100s", "jobs/llama3_405b_sim.toml",
     "pretrain_8k_8192gpus", 430, "430 TFLOP/s per GPU"),
    ("Llama 3.1 405B, 8K tokens, t 8 x p 16 x d 128 on 16,384 H100s", "jobs/llama3_405b_sim.toml",
     "pretrain_8k_16384gpus", 400, "400 TFLOP/s per GPU"),
    ("Llama 3.1 405B, 128K tokens, t 8 x c 16 x p 16 x d 8 on 16,384 H100s", "jobs/llama3_405b_128k_sim.toml",
     "pretrain_128k_16384gpus", 380, "380 TFLOP/s per GPU"),
]


def llama3_time_rows(pipebench):
    """Table 4's rates as time rows: pipebench's model FLOPs / (GPUs x the published rate)."""
    rows = []
    for label, job, name, tflops, where in TIME_ROWS_LLAMA3:
        run = plan(pipebench, job)[name]
        rows.append((label, job, name, run["time_model"]["model_flops"] / (run["ranks"] * tflops * 1e12), where, LLAMA3))
    return rows


def all_time_rows(pipebench):
    return ([r + (PAPER,) for r in TIME_ROWS] + [r + (KORTHIKANTI_DP,) for r in TIME_ROWS_DP] + table1_time_rows() +
            [r + (TORCHTITAN,) for r in TIME_ROWS_TT] + llama3_time_rows(pipebench))


def mean(errors):
    """The average of relative errors, in percent."""
    return 100 * sum(errors) / len(errors)


def memory_gib(run, quantity):
    rows = run["memory"]
    if quantity == "state":
        return max(m["params_bytes"] + m["grads_bytes"] + m["optimizer_bytes"] for m in rows) / GIB
    if quantity == "total":
        return max(m["total_bytes"] for m in rows) / GIB
    return max(m["activations_peak_bytes"] for m in rows) / GIB


def table(pipebench):
    lines = ["| row | source | published | predicted | error |", "|---|---|---:|---:|---:|"]
    time_errors, memory_errors = {PAPER: [], KORTHIKANTI_DP: [], NARAYANAN: [], TORCHTITAN: [], LLAMA3: []}, {PAPER: [], TORCHTITAN: []}
    for label, job, name, published, where, paper in all_time_rows(pipebench):
        run = plan(pipebench, job)[name]
        predicted = run["simulated"]["iteration_s"]
        err = (predicted - published) / published
        time_errors[paper].append(abs(err))
        tm = run["time_model"]
        lines.append(f"| {label}: time per iteration (`{job.removeprefix('jobs/')}` run `{name}`; "
                     f"MFU {100 * tm['mfu']:.1f}%) | {PAPER if paper == KORTHIKANTI_DP else paper}, {where} | {published:.2f} s | {predicted:.2f} s "
                     f"| {100 * err:+.1f}% |")
    for rows, paper in ((MEMORY_ROWS, PAPER), (MEMORY_ROWS_TT, TORCHTITAN)):
        for label, job, name, quantity, published, where in rows:
            predicted = memory_gib(plan(pipebench, job)[name], quantity)
            err = (predicted - published) / published
            memory_errors[paper].append(abs(err))
            lines.append(f"| {label} (`{job.removeprefix('jobs/')}` run `{name}`) | {paper}, {where} | "
                         f"{published:.2f} GiB | {predicted:.2f} GiB | {100 * err:+.1f}% |")
    lines.append("")
    every = [e for errors in time_errors.values() for e in errors]
    lines.append(f"Average absolute error: time per iteration {mean(time_errors[PAPER]):.1f}% over Korthikanti et "
                 f"al.'s {len(time_errors[PAPER])} rows (the set Calculon's 3.65% is reported on; "
                 f"{mean(time_errors[KORTHIKANTI_DP]):.1f}% on its row with data parallelism), "
                 f"{mean(time_errors[NARAYANAN]):.1f}% over Narayanan et al.'s {len(time_errors[NARAYANAN])}, "
                 f"{mean(time_errors[TORCHTITAN]):.1f}% over torchtitan's {len(time_errors[TORCHTITAN])} (H100, FSDP), "
                 f"{mean(time_errors[LLAMA3]):.1f}% over Llama 3's {len(time_errors[LLAMA3])} (H100, 8K and 128K), "
                 f"{mean(every):.1f}% over all {len(every)}; memory {mean(memory_errors[PAPER]):.1f}% "
                 f"(Korthikanti et al.'s {len(memory_errors[PAPER])} rows), {mean(memory_errors[TORCHTITAN]):.1f}% "
                 f"(torchtitan's {len(memory_errors[TORCHTITAN])}, against PyTorch's peak reserved memory).")
    return "\n".join(lines) + "\n"


def layer_table(pipebench):
    """Table 4's rows beside the plan's one-layer forward and backward."""
    runs = plan(pipebench, LAYER_JOB)
    lines = ["| Table 4 row (run) | forward: published | predicted | error | backward: published | predicted | error "
             "| combined: published | predicted | error |", "|---|" + "---:|" * 9]
    errors = []
    for experiment, name, forward_ms, backward_ms in LAYER_ROWS:
        layer = runs[name]["time_model"]["layer"]
        cells = []
        for published, predicted in ((forward_ms, 1e3 * layer["forward_s"]), (backward_ms, 1e3 * layer["backward_s"]),
                                     (forward_ms + backward_ms, 1e3 * (layer["forward_s"] + layer["backward_s"]))):
            err = (predicted - published) / published
            errors.append(abs(err))
            cells.append(f"{published:.1f} ms | {predicted:.2f} ms | {100 * err:+.1f}%")
        lines.append(f"| {experiment} (`{name}`) | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"Average absolute error over the {len(LAYER_ROWS)} rows: forward {mean(errors[0::3]):.1f}%, backward "
                 f"{mean(errors[1::3]):.1f}%, combined {mean(errors[2::3]):.1f}%.")
    return "\n".join(lines) + "\n"


def sensitivity(pipebench):
    """Every time row's error with each figure 10% less favourable in turn."""
    columns, rows, errors = None, [], {}
    for label, job, name, published, _, paper in all_time_rows(pipebench):
        run = plan(pipebench, job)[name]
        variants = sensitivity_variants(run["time_model"]["device"])
        columns = columns or [c for c, _ in variants]
        base = (run["simulated"]["iteration_s"] - published) / published
        cells = [base]
        for column, overrides in variants:
            predicted = plan(pipebench, job, overrides)[name]["simulated"]["iteration_s"]
            cells.append((predicted - published) / published)
        for i, e in enumerate(cells):
            errors.setdefault((paper, i), []).append(abs(e))
        rows.append(f"| {label} | " + " | ".join(f"{100 * e:+.1f}%" for e in cells) + " |")
    head = "| time row | as predicted | " + " | ".join(columns) + " |"
    lines = [head, "|---|" + "---:|" * (len(columns) + 1)] + rows
    for paper, who in ((PAPER, "Korthikanti et al."), (NARAYANAN, "Narayanan et al."), (TORCHTITAN, "torchtitan"),
                       (LLAMA3, "Llama 3")):
        means = [mean(errors[(paper, i)]) for i in range(len(columns) + 1)]
        lines.append(f"| average absolute error, {who} | " + " | ".join(f"{m:.1f}%" for m in means) + " |")
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- fidelity table: begin -->\n", "<!-- fidelity table: end -->\n"
SENS_BEGIN, SENS_END = "<!-- fidelity sensitivity: begin -->\n", "<!-- fidelity sensitivity: end -->\n"
LAYER_BEGIN, LAYER_END = "<!-- fidelity layer: begin -->\n", "<!-- fidelity layer: end -->\n"


def between(doc, begin, end, text):
    if begin not in doc or end not in doc.split(begin, 1)[1]:
        sys.exit(f"the page has no {begin.strip()} ... {end.strip()} section to write the table into")
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    return head + begin + text + end + tail


def main():
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    text, layers, sens = table(args[0]), layer_table(args[0]), sensitivity(args[0])
    if len(args) == 1:
        sys.stdout.write(text + "\n" + layers + "\n" + sens)
        return 0
    mode, path = args[1], Path(args[2])
    doc = path.read_text()
    new = between(between(between(doc, BEGIN, END, text), LAYER_BEGIN, LAYER_END, layers), SENS_BEGIN, SENS_END, sens)
    if mode == "--write":
        path.write_text(new)
        return 0
    if new != doc:
        print(f"{path} is out of date: bench/fidelity/fidelity.py PIPEBENCH --write {path}\nnow:\n{text}\n{layers}\n{sens}")
        return 1
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
