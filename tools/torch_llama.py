#!/usr/bin/env python3
"""pipebench's llama model in PyTorch, written by hand from docs/model.md ("llama"): RMSNorm,
rotary positions on q and k (Meta's pairing of elements 2i and 2i+1 of a head), causal
grouped-query attention, SwiGLU, untied embedding and LM head, no biases; with pipebench's
initial weights (its counter-based normal draws, reproduced in numpy: lib/core's SplitMix64,
lib/model/src/synthetic.cpp) and its synthetic batches. Used by tests/llama/check_torch.py
(loss agreement) and bench/whole/torch_llama_step.py (the step time)."""
import math

import numpy as np
import torch

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
    """Micro-batch mb of size mbs: samples mb*mbs .. mb*mbs+mbs-1 of the step's batch
    (model/synthetic.hpp: a token is keyed by (seed, step, sample, position))."""
    tokens = np.zeros((mbs, seq), dtype=np.int64)
    targets = np.zeros((mbs, seq), dtype=np.int64)
    for b in range(mbs):
        sample = mb * mbs + b
        key = lambda pos: mix64([K_DATA, seed, step, sample, pos])
        tok = key(0) % vocab
        for t in range(seq + 1):
            if t < seq:
                tokens[b, t] = tok
            if t > 0:
                targets[b, t - 1] = tok
            h = key(t + 1)
            tok = (h >> 8) % vocab if h % 10 == 0 else mix64([K_MAP, seed, tok]) % vocab
    return torch.from_numpy(tokens), torch.from_numpy(targets)


def llama_ffn_hidden(hidden, multiplier, multiple_of):
    """Llama's SwiGLU width (core/job.hpp llama_ffn_hidden)."""
    f = 2 * (4 * hidden) // 3
    f = int(multiplier * f) if multiplier != 1.0 else f
    return multiple_of * ((f + multiple_of - 1) // multiple_of)


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


