#!/usr/bin/env python3
"""torch_llama_step.py HIDDEN LAYERS HEADS KV_HEADS FFN SEQ VOCAB MBS M WARMUP STEPS

The training step of pipebench's cpu backend on its llama block, in PyTorch, for
bench/whole/cpu_vs_torch.sh: tools/torch_llama.py's model (the one tests/llama checks the cpu
backend's losses against), fp32, M micro-batches of MBS sequences accumulated, global-norm
clipping at 1.0, torch.optim.AdamW (betas 0.9/0.95, weight decay 0.01), one thread. Prints the
median step time over STEPS steps after WARMUP, in seconds.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from torch_llama import Llama  # noqa: E402
from torch_step import median_step_s  # noqa: E402


def main():
    h, layers, heads, kv_heads, ffn, seq, vocab, mbs, m, warmup, steps = map(int, sys.argv[1:12])
    torch.set_num_threads(1)
    model = Llama(dict(hidden=h, layers=layers, heads=heads, kv_heads=kv_heads, ffn_hidden=ffn, seq_len=seq, vocab=vocab,
                       rope_theta=10000.0, norm_eps=1e-5), seed=1)
    params = [p for p, _ in model.params]
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01)
    print(f"{median_step_s(model.loss, params, opt, vocab, mbs, seq, m, warmup, steps):.6f}")


if __name__ == "__main__":
    main()
