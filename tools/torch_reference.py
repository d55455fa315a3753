#!/usr/bin/env python3
"""PyTorch references for the GPU check (tools/gpu-check.sh), measured on the
same GPU in the same call as pipebench's figures:

  torch_reference.py gemm M N K [M N K]...
      matmul TFLOP/s of C[M,N] = A[M,K] B[K,N] in fp32 (no TF32), bf16 and
      fp16 on uniform random inputs in [-1, 1): median of 20 CUDA-event-timed
      products after 3 warm-ups (bench_cuda_gemm's protocol)
  torch_reference.py gpt --hidden H --layers L --heads A --ffn F --seq S
                         --vocab V --mbs B --m M [--dtype bf16] [--steps 7] [--warmup 2]
      one training step of pipebench's GPT (docs/cpu-backend.md: token +
      position embedding, pre-LN blocks with causal attention and tanh GELU,
      final LayerNorm, untied LM head without bias, cross-entropy), M
      micro-batches of B sequences accumulated, then AdamW (beta 0.9/0.95,
      eps 1e-8, weight decay 0.01 on matrices): the median step time.
      Attention is F.scaled_dot_product_attention (what a PyTorch user runs).
  torch_reference.py sdpa DTYPE B S HEADS KV_HEADS D [...]
      causal F.scaled_dot_product_attention (grouped-query where KV_HEADS <
      HEADS) forward and backward at gpu_tests "[.flash_timing]"'s shapes and protocol:
      median of 20 CUDA-event-timed calls after 2 warm-ups, and TFLOP/s by
      the same causal model FLOPs (forward 2·B·heads·s²·d, backward 2.5x)

Prints a table and, last, one JSON line with the figures."""
import argparse
import json
import math
import statistics
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def cuda_times(fn, reps, warmup):
    times = []
    for i in range(warmup + reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end) / 1e3)
    return times


def sdpa(groups):
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    out = []
    for name, b, s, heads, kv_heads, d in groups:
        dt = dtypes[name]
        q = (torch.rand(b, heads, s, d, device="cuda", dtype=dt) * 2 - 1).requires_grad_()
        k = (torch.rand(b, kv_heads, s, d, device="cuda", dtype=dt) * 2 - 1).requires_grad_()
        v = (torch.rand(b, kv_heads, s, d, device="cuda", dtype=dt) * 2 - 1).requires_grad_()
        gqa = {"enable_gqa": True} if kv_heads != heads else {}
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
        grad = torch.rand_like(o)
        forward = cuda_times(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa), 20, 2)
        backward = cuda_times(lambda: torch.autograd.grad(o, (q, k, v), grad, retain_graph=True), 20, 2)
        flops = 2.0 * b * heads * s * s * d
        f, g = statistics.median(forward), statistics.median(backward)
        print(f"sdpa {name} B {b} s {s} heads {heads} kv_heads {kv_heads} d {d}: forward {1e3 * f:.3f} ms "
              f"({flops / f / 1e12:.1f} TFLOP/s), backward {1e3 * g:.3f} ms ({2.5 * flops / g / 1e12:.1f} TFLOP/s)")
        out.append({"dtype": name, "B": b, "s": s, "heads": heads, "kv_heads": kv_heads, "d": d,
                    "forward_s": f, "backward_s": g})
    return {"sdpa": out}


def gemm(shapes):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    gen = torch.Generator(device="cuda").manual_seed(1)
    rows = []
    print(f"torch {torch.__version__} matmul TFLOP/s on {torch.cuda.get_device_name()} (median of 20)")
    print(f"{'M':>6} {'N':>6} {'K':>6} {'fp32':>10} {'bf16':>10} {'fp16':>10}")
    for M, N, K in shapes:
        row = {"M": M, "N": N, "K": K}
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
            a = (torch.rand(M, K, device="cuda", generator=gen) * 2 - 1).to(dtype)
            b = (torch.rand(K, N, device="cuda", generator=gen) * 2 - 1).to(dtype)
            t = statistics.median(cuda_times(lambda: a @ b, 20, 3))
            row[name] = 2.0 * M * N * K / t / 1e12
        rows.append(row)
        print(f"{M:>6} {N:>6} {K:>6} {row['fp32']:>10.1f} {row['bf16']:>10.1f} {row['fp16']:>10.1f}")
    return {"torch": torch.__version__, "gemm_tflops": rows}


def causal_attention(q, k, v):
    """softmax(q kᵀ / √d) v with a causal mask: F.scaled_dot_product_attention where
    PyTorch has it (2.0 on), else written out (Debian 12's PyTorch 1.13)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    s = q.shape[-2]
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    return F.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v


class Block(nn.Module):
    def __init__(self, h, heads, ffn):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, ffn), nn.Linear(ffn, h)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        a = causal_attention(q, k, v).transpose(1, 2).reshape(b, s, h)
        x = x + self.proj(a)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.tok, self.pos = nn.Embedding(a.vocab, a.hidden), nn.Embedding(a.seq, a.hidden)
        self.blocks = nn.ModuleList(Block(a.hidden, a.heads, a.ffn) for _ in range(a.layers))
        self.ln = nn.LayerNorm(a.hidden)
        self.head = nn.Linear(a.hidden, a.vocab, bias=False)
        for p in self.parameters():
            nn.init.normal_(p, std=0.02) if p.dim() == 2 else nn.init.zeros_(p)
        for blk in self.blocks:
            for p in (blk.proj.weight, blk.fc2.weight):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * a.layers))
            for ln in (blk.ln1, blk.ln2):
                nn.init.ones_(ln.weight)
        nn.init.ones_(self.ln.weight)

    def forward(self, tokens, targets):
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln(x))
        # reshape, not view: targets are a column slice of the token rows (not contiguous when mbs > 1)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def adamw(model, **kwargs):
    """AdamW as pipebench's: beta 0.9/0.95, eps 1e-8, weight decay 0.01 on the weight matrices."""
    decay = [p for p in model.parameters() if p.dim() == 2 and p is not model.tok.weight and p is not model.pos.weight]
    rest = [p for p in model.parameters() if all(p is not d for d in decay)]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                             lr=3e-4, betas=(0.9, 0.95), eps=1e-8, **kwargs)


def gpt(a):
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    torch.manual_seed(0)
    model = Gpt(a).to(device="cuda", dtype=dtype)
    opt = adamw(model, fused=True)
    gen = torch.Generator(device="cuda").manual_seed(2)
    batches = [torch.randint(0, a.vocab, (a.mbs, a.seq + 1), device="cuda", generator=gen) for _ in range(a.m)]

    def step():
        for tok in batches:
            (model(tok[:, :-1], tok[:, 1:]) / a.m).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    times = cuda_times(step, a.steps, a.warmup)
    params = sum(p.numel() for p in model.parameters())
    median = statistics.median(times)
    print(f"torch {torch.__version__} GPT step on {torch.cuda.get_device_name()}: {params / 1e6:.1f} M parameters, "
          f"{a.dtype}, {a.m} x {a.mbs} x {a.seq} tokens: median {median * 1e3:.2f} ms over {a.steps} steps "
          f"(min {min(times) * 1e3:.2f}, max {max(times) * 1e3:.2f}); peak memory "
          f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    return {"torch": torch.__version__, "gpt_step_time_median_s": median, "gpt_step_times_s": times,
            "parameters": params, "peak_memory_bytes": torch.cuda.max_memory_allocated()}


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("gemm", "gpt", "sdpa"):
        print(__doc__)
        return 2
    if not torch.cuda.is_available():
        print("torch_reference: no CUDA device visible to PyTorch", file=sys.stderr)
        return 7
    if sys.argv[1] == "gemm":
        dims = [int(x) for x in sys.argv[2:]] or [4096, 4096, 4096]
        if len(dims) % 3:
            print("torch_reference gemm: give M N K triples", file=sys.stderr)
            return 2
        out = gemm([dims[i:i + 3] for i in range(0, len(dims), 3)])
    elif sys.argv[1] == "sdpa":
        a = sys.argv[2:] or ["bf16", "1", "8192", "32", "8", "128"]
        if len(a) % 6:
            print("torch_reference sdpa: give DTYPE B S HEADS KV_HEADS D groups", file=sys.stderr)
            return 2
        out = sdpa([(a[i], *map(int, a[i + 1:i + 6])) for i in range(0, len(a), 6)])
    else:
        p = argparse.ArgumentParser(prog="torch_reference.py gpt")
        for k in ("hidden", "layers", "heads", "ffn", "seq", "vocab", "mbs", "m"):
            p.add_argument(f"--{k}", type=int, required=True)
        p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
        p.add_argument("--steps", type=int, default=7)
        p.add_argument("--warmup", type=int, default=2)
        out = gpt(p.parse_args(sys.argv[2:]))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
