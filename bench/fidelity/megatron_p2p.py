#!/usr/bin/env python3
"""megatron_p2p.py PIPEBENCH [--check]

What Megatron-LM's point-to-point pattern would cost the pipelined time rows
of docs/fidelity.md (Korthikanti et al. 2022's 175B, 530B and 1T), with
nothing else changed. Each run's schedule — 1F1B, or interleaved 1F1B in
Megatron-LM's order — is replayed with the plan's own action times
(`simulated.forward_s` / `backward_s` per virtual stage, `transfer_s`) twice:

* as pipebench runs it: a send posts without blocking, a compute waits for
  the input it receives. An implementation of the cost-weighted simulation
  apart from lib/schedule's, so it must give the plan's makespan;
  `--check` exits 1 when it does not (the test `bench.megatron_p2p`).
* as Megatron-LM of 2022 runs it (megatron/schedules.py,
  megatron/p2p_communication.py): after each compute — in the interleaved
  steady state after each forward-backward pair — one batched call posts the
  step's sends and receives and the rank waits for all of them; a transfer
  starts when both its ends have posted, so a forward's output leaves only
  after the backward paired with it. Without sequence parallelism Megatron
  scatters the boundary tensor over the tensor ranks (1/t of it over each
  rank's rail) and all-gathers it over NVLink on arrival, counted here in the
  transfer.

Each row: the plan's iteration, the same with Megatron's pattern (the plan's
time after the makespan — the optimizer — added to the replayed makespan),
and both against the published time.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fidelity  # noqa: E402  (the rows and the plan cache)


def megatron_order(p, v, m, r):
    """Rank r's items in Megatron-LM's order: ('F'|'B', virtual stage, micro-batch)
    computes and ('comm', [(send|recv, tensor)]) batched calls. A tensor is
    ('act', stage it enters, mb) or ('grad', stage it enters, mb)."""
    last = p * v - 1
    total = m * v

    def chunk(k, forward):
        c = (k % (p * v)) // p
        return c if forward else v - 1 - c

    def stage(k, forward):
        return chunk(k, forward) * p + r

    def mb(k):
        return (k // (p * v)) * p + k % p if v > 1 else k

    def send_f(k):
        s = stage(k, True)
        return [] if s == last else [("send", ("act", s + 1, mb(k)))]

    def recv_f(k):
        s = stage(k, True)
        return [] if s == 0 or k >= total else [("recv", ("act", s, mb(k)))]

    def send_b(k):
        s = stage(k, False)
        return [] if s == 0 else [("send", ("grad", s - 1, mb(k)))]

    def recv_b(k):
        s = stage(k, False)
        return [] if s == last or k >= total else [("recv", ("grad", s, mb(k)))]

    F = lambda k: ("F", stage(k, True), mb(k))
    B = lambda k: ("B", stage(k, False), mb(k))
    items = []
    if v == 1:  # forward_backward_pipelining_without_interleaving
        warmup = min(p - r - 1, m)
        for k in range(warmup):
            items += [("comm", recv_f(k)), F(k), ("comm", send_f(k))]
        if warmup < m:
            items.append(("comm", recv_f(warmup)))
        for i in range(m - warmup):
            k = warmup + i
            items += [F(k), ("comm", send_f(k) + recv_b(i)), B(i)]
            items.append(("comm", send_b(i) + (recv_f(k + 1) if i < m - warmup - 1 else [])))
        for i in range(m - warmup, m):
            items += [("comm", recv_b(i)), B(i), ("comm", send_b(i))]
        return items
    # forward_backward_pipelining_with_interleaving
    all_warmup = m == p
    warmup = total if all_warmup else min((p - r - 1) * 2 + (v - 1) * p, total)
    items.append(("comm", recv_f(0)))
    for k in range(warmup):
        extra = recv_b(0) if k == warmup - 1 and not all_warmup else []
        items += [F(k), ("comm", send_f(k) + recv_f(k + 1) + extra)]
    for i in range(total - warmup):
        k = warmup + i
        items += [F(k), B(i), ("comm", send_f(k) + send_b(i) + recv_f(k + 1) + recv_b(i + 1))]
    if all_warmup:
        items.append(("comm", recv_b(0)))
    for k in range(total - warmup, total):
        items += [B(k), ("comm", send_b(k) + recv_b(k + 1))]
    return items


def run_in_order(order, advance, what):
    """Each rank's items in order: advance(r, item) moves rank r past `item`
    and returns True, or returns False while it waits; until no rank moves.
    Exits naming `what` if a rank is left waiting (a deadlock)."""
    pos, moved = [0] * len(order), True
    while moved:
        moved = False
        for r, items in enumerate(order):
            while pos[r] < len(items) and advance(r, items[pos[r]]):
                pos[r] += 1
                moved = True
    if any(pos[r] < len(items) for r, items in enumerate(order)):
        sys.exit(f"{what} deadlocked")


def replay_async(p, v, m, forward, backward, transfer):
    """pipebench's execution: computes in Megatron's order, sends never block."""
    last = p * v - 1
    end, clock = {}, [0.0] * p

    def advance(r, item):
        kind, s, j = item
        if kind == "F":
            dep, hop = (("F", s - 1, j), transfer) if s > 0 else (None, 0.0)
        else:
            dep, hop = (("B", s + 1, j), transfer) if s < last else (("F", s, j), 0.0)
        if dep is not None and dep not in end:
            return False
        start = max(clock[r], end[dep] + hop if dep else 0.0)
        clock[r] = start + (forward if kind == "F" else backward)[s]
        end[item] = clock[r]
        return True

    run_in_order([[it for it in megatron_order(p, v, m, r) if it[0] != "comm"] for r in range(p)], advance,
                 f"p {p}, v {v}, m {m}: the replay")
    return max(clock)


def replay_megatron(p, v, m, forward, backward, transfer):
    """Megatron's execution: batched calls that wait for every send and receive."""
    posted, clock = {}, [0.0] * p

    def advance(r, item):
        if item[0] != "comm":
            clock[r] += (forward if item[0] == "F" else backward)[item[1]]
            return True
        for op, tensor in item[1]:
            posted.setdefault((op, tensor), clock[r])
        peers = [posted.get(("recv" if op == "send" else "send", tensor)) for op, tensor in item[1]]
        if None in peers:
            return False
        clock[r] = max([clock[r]] + [max(posted[(op, t)], peer) + transfer for (op, t), peer in zip(item[1], peers)])
        return True

    run_in_order([megatron_order(p, v, m, r) for r in range(p)], advance, f"p {p}, v {v}, m {m}: Megatron's pattern")
    return max(clock)


def scatter_gather_s(run, device):
    """Megatron's transfer without sequence parallelism: 1/t of the boundary
    tensor over the inter-node rail, then an all-gather of it over NVLink."""
    model = run["model"]
    t = run["tensor_parallel"]
    tensor = run["micro_batch_size"] * model["seq_len"] * model["hidden"] * 2
    rail = device["inter_node_latency_us"] * 1e-6 + tensor / t / (device["inter_node_gbps"] / 8 * 1e9)
    gather = device["intra_node_latency_us"] * 1e-6 + (t - 1) / t * tensor / (device["intra_node_gbps"] / 8 * 1e9)
    return rail + gather


def rows(pipebench):
    out = []
    for label, job, name, published, _ in fidelity.TIME_ROWS:
        plan = fidelity.plan(pipebench, job)
        run = plan[name]
        if run["pipeline_size"] == 1:
            continue
        run = dict(run, model=fidelity.plan_model(pipebench, job))
        sim = run["simulated"]
        p, v, m = run["pipeline_size"], run["virtual_stages_per_rank"] or 1, run["num_microbatches"]
        replayed = replay_async(p, v, m, sim["forward_s"], sim["backward_s"], sim["transfer_s"])
        transfer = sim["transfer_s"] if run["sequence_parallel"] else scatter_gather_s(run, run["time_model"]["device"])
        megatron = replay_megatron(p, v, m, sim["forward_s"], sim["backward_s"], transfer)
        after = run["time_model"]["iteration_s"] - sim["makespan_s"]
        out.append((label, published, sim["makespan_s"], replayed, run["time_model"]["iteration_s"], megatron + after))
    return out


def main():
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    table = rows(args[0])
    print("| time row | published | planned | error | Megatron's p2p | error |\n|---|---:|---:|---:|---:|---:|")
    bad = []
    for label, published, makespan, replayed, planned, megatron in table:
        print(f"| {label} | {published:.2f} s | {planned:.2f} s | {100 * (planned / published - 1):+.1f}% "
              f"| {megatron:.2f} s | {100 * (megatron / published - 1):+.1f}% |")
        if abs(replayed - makespan) > 1e-9 * makespan:
            bad.append(f"{label}: the replay gives a makespan of {replayed:.9f} s, the plan {makespan:.9f} s")
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad and "--check" in args else 0


if __name__ == "__main__":
    sys.exit(main())
