#!/usr/bin/env python3
"""torch_gpt_step.py HIDDEN LAYERS HEADS FFN SEQ VOCAB MBS M WARMUP STEPS

The training step of pipebench's cpu backend in PyTorch, for
bench/whole/cpu_vs_torch.sh: the GPT and AdamW of tools/torch_reference.py
(docs/cpu-backend.md's model), on the CPU in fp32, M micro-batches of MBS
sequences accumulated, global-norm clipping at 1.0, one thread. Prints the
median step time over STEPS steps after WARMUP, in seconds.
"""
import os
import sys
from types import SimpleNamespace

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from torch_reference import Gpt, adamw  # noqa: E402
from torch_step import median_step_s  # noqa: E402


def main():
    h, layers, heads, ffn, seq, vocab, mbs, m, warmup, steps = map(int, sys.argv[1:11])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Gpt(SimpleNamespace(hidden=h, layers=layers, heads=heads, ffn=ffn, seq=seq, vocab=vocab))
    opt = adamw(model)
    print(f"{median_step_s(model, list(model.parameters()), opt, vocab, mbs, seq, m, warmup, steps):.6f}")


if __name__ == "__main__":
    main()
