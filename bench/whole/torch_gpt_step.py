#!/usr/bin/env python3
"""torch_gpt_step.py HIDDEN LAYERS HEADS FFN SEQ VOCAB MBS M WARMUP STEPS

The training step of pipebench's cpu backend in PyTorch, for
bench/whole/cpu_vs_torch.sh: the same GPT (docs/cpu-backend.md: token +
position embedding; pre-LN blocks of LayerNorm -> QKV -> causal multi-head
attention -> projection -> residual -> LayerNorm -> fc1 -> GELU (tanh) -> fc2 ->
residual; final LayerNorm -> LM head without bias -> cross-entropy), fp32, M
micro-batches of MBS sequences accumulated, global-norm clipping at 1.0, AdamW
(0.9, 0.95, eps 1e-8, weight decay 0.01 on weight matrices), one thread.
Prints the median step time over STEPS steps after WARMUP, in seconds.
"""
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, heads, ffn):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, ffn), nn.Linear(ffn, h)

    def forward(self, x, mask):
        B, s, h = x.shape
        d = h // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        q, k, v = (t.view(B, s, self.heads, d).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        att = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, s, h)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, h, layers, heads, ffn, seq, vocab):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, h), nn.Embedding(seq, h)
        self.blocks = nn.ModuleList(Block(h, heads, ffn) for _ in range(layers))
        self.ln_f = nn.LayerNorm(h)
        self.head = nn.Linear(h, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1))

    def forward(self, tokens, targets):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
        for b in self.blocks:
            x = b(x, self.mask)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    h, layers, heads, ffn, seq, vocab, mbs, m, warmup, steps = map(int, sys.argv[1:11])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = GPT(h, layers, heads, ffn, seq, vocab)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    rest = [p for n, p in model.named_parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    data = [torch.randint(0, vocab, (mbs, seq + 1)) for _ in range(m)]
    times = []
    for step in range(warmup + steps):
        t0 = time.perf_counter()
        for batch in data:
            loss = model(batch[:, :-1], batch[:, 1:]) / m
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=False)
        if step >= warmup:
            times.append(time.perf_counter() - t0)
    print(f"{statistics.median(times):.6f}")


if __name__ == "__main__":
    main()
