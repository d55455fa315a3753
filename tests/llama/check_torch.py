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
import numpy as np

try:
    import torch
except ImportError:  # scripts/test.sh installs python3-torch; a bare ctest may lack it
    print("SKIP: no PyTorch (apt-get install python3-torch, or run scripts/test.sh)")
    sys.exit(77)

PIPEBENCH, MPIEXEC, REPO, OUT = sys.argv[1:5]
JOB = os.path.join(REPO, "jobs/llama_cpu.toml")
TOLERANCE = 1e-5
MASK = (1 << 64) - 1
INCREMENT = 0x9E3779B97F4A7C15
K_DATA, K_MAP, K_INIT = 0xDA7A, 0xB16A, 0x1417


# ---- pipebench's counter-based random numbers (lib/core, lib/model/src/synthetic.cpp) ----

def splitmix64(x):
    """Elementwise on numpy uint64 arrays (wrapping), or on Python ints."""
    if isinstance(x, (np.ndarray, np.generic)):
        with np.errstate(over="ignore"):
            x = x + np.uint64(INCREMENT)
            x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            return x ^ (x >> np.uint64(31))
    x = (x + INCREMENT) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def mix64(words):
    h = 0x243F6A8885A308D3
    arrays = any(isinstance(w, (np.ndarray, np.generic)) for w in words)
    if arrays:
        h = np.uint64(h)
    for w in words:
        w = w if isinstance(w, (np.ndarray, np.generic)) or not arrays else np.uint64(w)
        h = splitmix64(h ^ splitmix64(w))
    return h


def unit_uniform(bits):
    return ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0 ** -53


def init_normal(seed, piece, tensor, n):
    idx = np.arange(n, dtype=np.uint64)
    h1 = mix64([K_INIT, seed, piece, tensor, idx])
    h2 = splitmix64(h1)
    return (np.sqrt(-2.0 * np.log(unit_uniform(h1))) * np.cos(2.0 * math.pi * unit_uniform(h2))).astype(np.float32)


def synthetic_batch(seed, vocab, seq, step, mb, mbs):
    tokens = np.zeros((mbs, seq), dtype=np.int64)
    targets = np.zeros((mbs, seq), dtype=np.int64)
    for b in range(mbs):
        key = lambda pos: mix64([K_DATA, seed, step, mb, b, pos])
        tok = key(0) % vocab
        for t in range(seq + 1):
            if t < seq:
                tokens[b, t] = tok
            if t > 0:
                targets[b, t - 1] = tok
            h = key(t + 1)
            tok = (h >> 8) % vocab if h % 10 == 0 else mix64([K_MAP, seed, tok]) % vocab
    return torch.from_numpy(tokens), torch.from_numpy(targets)


# ---- the model, by hand ----------------------------------------------------------------

class Llama:
    def __init__(self, m, seed):
        h, f, L, V = m["hidden"], m["ffn_hidden"], m["layers"], m["vocab"]
        self.m, self.d = m, h // m["heads"]
        kv = m["kv_heads"] * self.d
        std, proj_std = 0.02, 0.02 / math.sqrt(2.0 * L)

        def matrix(piece, tensor, rows, cols, s):
            return torch.tensor(s * init_normal(seed, piece, tensor, rows * cols)).reshape(rows, cols)

        self.params = []  # (tensor, is_matrix) in pipebench's order
        self.wte = self.add(matrix(0, 0, V, h, std), True)
        self.blocks = []
        for i in range(L):
            p = 1 + i
            self.blocks.append(dict(
                g1=self.add(torch.ones(h), False), wqkv=self.add(matrix(p, 1, h, h + 2 * kv, std), True),
                wo=self.add(matrix(p, 2, h, h, proj_std), True), g2=self.add(torch.ones(h), False),
                w13=self.add(matrix(p, 4, h, 2 * f, std), True), w2=self.add(matrix(p, 5, f, h, proj_std), True)))
        self.gf = self.add(torch.ones(h), False)
        self.lm = self.add(matrix(L + 1, 1, h, V, std), True)
        seq, half = m["seq_len"], self.d // 2
        pos = torch.arange(seq, dtype=torch.float64)[:, None]
        inv = torch.tensor([m["rope_theta"] ** (-2.0 * i / self.d) for i in range(half)], dtype=torch.float64)[None, :]
        self.cos, self.sin = torch.cos(pos * inv).float(), torch.sin(pos * inv).float()

    def add(self, t, matrix):
        t = t.clone().requires_grad_(True)
        self.params.append((t, matrix))
        return t

    def rmsnorm(self, x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.m["norm_eps"]) * g

    def rope(self, x):  # x [B, heads, s, d]: pairs (2i, 2i+1) rotated by pos * theta^(-2i/d)
        a, b = x[..., 0::2], x[..., 1::2]
        out = torch.stack((a * self.cos - b * self.sin, a * self.sin + b * self.cos), dim=-1)
        return out.flatten(-2)

    def block(self, x, w):
        B, s, h = x.shape
        heads, kvh, d = self.m["heads"], self.m["kv_heads"], self.d
        qkv = self.rmsnorm(x, w["g1"]) @ w["wqkv"]
        q = qkv[..., :h].reshape(B, s, heads, d).transpose(1, 2)
        k = qkv[..., h:h + kvh * d].reshape(B, s, kvh, d).transpose(1, 2)
        v = qkv[..., h + kvh * d:].reshape(B, s, kvh, d).transpose(1, 2)
        q, k = self.rope(q), self.rope(k)
        group = heads // kvh
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
        attn = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
        x = x + attn.transpose(1, 2).reshape(B, s, h) @ w["wo"]
        a13 = self.rmsnorm(x, w["g2"]) @ w["w13"]
        f = self.m["ffn_hidden"]
        return x + (torch.nn.functional.silu(a13[..., :f]) * a13[..., f:]) @ w["w2"]

    def loss(self, tokens, targets):
        x = self.wte[tokens]
        for w in self.blocks:
            x = self.block(x, w)
        logits = self.rmsnorm(x, self.gf) @ self.lm
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def torch_losses(job, run, steps):
    m = dict(job["model"])
    m.setdefault("kv_heads", m["heads"])
    m.setdefault("rope_theta", 10000.0)
    m.setdefault("norm_eps", 1e-5)
    mult, multiple = m.get("ffn_dim_multiplier", 1.0), m.get("multiple_of", 256)
    f = 2 * (4 * m["hidden"]) // 3
    f = int(mult * f) if mult != 1.0 else f
    m.setdefault("ffn_hidden", multiple * ((f + multiple - 1) // multiple))
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
