"""The timed PyTorch training step both cpu_vs_torch.sh peers share
(torch_gpt_step.py, torch_llama_step.py): M micro-batches of MBS random
sequences accumulated (each loss divided by M), global-norm clipping at 1.0,
the optimizer's step, gradients zeroed in place. Returns the median step time
in seconds over STEPS steps after WARMUP.
"""
import statistics
import time

import torch


def median_step_s(loss, params, opt, vocab, mbs, seq, m, warmup, steps):
    data = [torch.randint(0, vocab, (mbs, seq + 1)) for _ in range(m)]
    times = []
    for step in range(warmup + steps):
        t0 = time.perf_counter()
        for batch in data:
            (loss(batch[:, :-1], batch[:, 1:]) / m).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=False)
        if step >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)
