#!/usr/bin/env python3
"""The llama block on the cpu backend against a PyTorch re-implementation (issue 35).

Usage: check_torch.py PIPEBENCH MPIEXEC REPO OUT [--steps N]

Runs jobs/llama_cpu.toml with pipebench on 1 rank (the baseline) and on 2 ranks (baseline and
2-stage pipeline), then trains the same model in PyTorch, written here by hand from
docs/model.md ("llama"): RMSNorm, rotary positions on q and k (Meta's pairing of elements 2i and
2i+1), causal grouped-query attention, SwiGLU, untied embedding and LM head, no biases; the same
initial weights (pipebench's counter-based normal draws, reproduced in numpy), the same
synthetic batches, micro-batches accumulated, global-norm clipping and pipebench's AdamW (betas
0.9/0.95, eps 1e-8, decoupled weight decay 0.01 on matrices). Every step's loss (warm-up
included) must agree within 1e-5 relative. Prints the agreement table.
"""
import glob
import math
import os
import subprocess
import sys
import tomllib

import h5py

try:
    import torch
except ImportError:  # scripts/test.sh installs python3-torch; a bare ctest may lack it
    print("SKIP: no PyTorch (apt-get install python3-torch, or run scripts/test.sh)")
    sys.exit(77)

PIPEBENCH, MPIEXEC, REPO, OUT = sys.argv[1:5]
JOB = os.path.join(REPO, "jobs/llama_cpu.toml")
TOLERANCE = 1e-5
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from torch_llama import Llama, llama_ffn_hidden, synthetic_batch  # noqa: E402


def torch_losses(job, run, steps):
    m = dict(job["model"])
    m.setdefault("kv_heads", m["heads"])
    m.setdefault("rope_theta", 10000.0)
    m.setdefault("norm_eps", 1e-5)
    m.setdefault("ffn_hidden", llama_ffn_hidden(m["hidden"], m.get("ffn_dim_multiplier", 1.0), m.get("multiple_of", 256)))
    seed = m.get("seed", 1234)
    t = job["train"]
    lr, clip = t["learning_rate"], t["grad_clip"]
    model = Llama(m, seed)
    state = [(torch.zeros_like(p), torch.zeros_like(p)) for p, _ in model.params]
    losses = []
    mbs, nmb = run["micro_batch_size"], run["num_microbatches"]
    for step in range(steps):
        total = 0.0
        for mb in range(nmb):
            tokens, targets = synthetic_batch(seed, m["vocab"], m["seq_len"], step, mb, mbs)
            loss = model.loss(tokens, targets)
            total += loss.item()
            (loss / nmb).backward()
        losses.append(total / nmb)
        with torch.no_grad():
            norm = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p, _ in model.params))
            scale = clip / norm if clip > 0 and norm > clip else 1.0
            c1, c2 = 1 - 0.9 ** (step + 1), 1 - 0.95 ** (step + 1)
            for (p, matrix), (mt, vt) in zip(model.params, state):
                g = p.grad * scale
                mt.mul_(0.9).add_(0.1 * g)
                vt.mul_(0.95).add_(0.05 * g * g)
                upd = (mt / c1) / (torch.sqrt(vt / c2) + 1e-8)
                p.sub_(lr * ((0.01 if matrix else 0.0) * p + upd))
                p.grad = None
    return losses


def pipebench_losses(np_, runs):
    out = os.path.join(OUT, f"np{np_}")
    args = [MPIEXEC, "-np", str(np_), "--oversubscribe", PIPEBENCH, "run", JOB, "-o", out]
    for r in runs:
        args += ["--run", r]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0:
        print(p.stdout[-2000:], p.stderr[-2000:])
        sys.exit(f"pipebench run on {np_} rank(s): exit {p.returncode}")
    (path,) = glob.glob(os.path.join(out, "**", "*.h5"), recursive=True)
    with h5py.File(path) as f:
        return {r: list(f["runs"][r]["loss"][:]) for r in runs}


def main():
    torch.set_num_threads(1)
    job = tomllib.load(open(JOB, "rb"))
    runs = {r["name"]: r for r in job["run"]}
    measured = {("1 rank", "single_stage_baseline"): pipebench_losses(1, ["single_stage_baseline"])["single_stage_baseline"]}
    for name, losses in pipebench_losses(2, list(runs)).items():
        measured[("2 ranks", name)] = losses
    steps = len(next(iter(measured.values())))
    reference = torch_losses(job, runs["single_stage_baseline"], steps)
    worst_all = 0.0
    print(f"{'launch':<8} {'run':<24} {'steps':>5} {'worst relative deviation from PyTorch':>40}")
    for (launch, name), losses in measured.items():
        assert len(losses) == steps, (launch, name, len(losses))
        worst = max(abs(a - b) / abs(b) for a, b in zip(losses, reference))
        worst_all = max(worst_all, worst)
        print(f"{launch:<8} {name:<24} {steps:>5} {worst:>40.3e}")
    print("torch " + torch.__version__ + "; losses per step (pipebench, PyTorch): " +
          ", ".join(f"{a:.6f}/{b:.6f}" for a, b in zip(measured[("1 rank", "single_stage_baseline")], reference)))
    if worst_all > TOLERANCE:
        sys.exit(f"FAIL: worst relative deviation {worst_all:.3e} > {TOLERANCE}")
    print(f"PASS: every step within {TOLERANCE} relative")


if __name__ == "__main__":
    main()
