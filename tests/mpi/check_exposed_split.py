#!/usr/bin/env python3
"""summary.json's exposed data-parallel synchronisation split by what the ranks
waited for (issue 68): without ZeRO-1 all of it is the gradient reductions'
(the all-gather part 0, the reduction part the whole exposed median, within
0.2 ms: the records' parts and the step's figure are timed by separate polls,
check_bucket_launch.py); sharded (zero1, zero2, fsdp in the run's name) the
parameter all-gathers after the optimizer are exposed (> 0), and those inside
the first forwards (grad_sync = "overlap", or fsdp) only where a forward
waited for them (>= 0).
    check_exposed_split.py SUMMARY.json"""
import json
import math
import sys

runs = json.load(open(sys.argv[1]))["runs"]
checked, failed = 0, []
for r in runs:
    g = r["metrics"].get("grad_sync") if r.get("metrics") else None
    if not g or r.get("status") != "ok":
        continue
    red, gat, exp = g["exposed_reduce_median_s"], g["exposed_gather_median_s"], g["exposed_median_s"]
    name = r["run"]
    if red is None or gat is None:
        failed.append(f"{name}: no split ({red}, {gat})")
    elif any(k in name for k in ("zero1", "zero2", "fsdp")):
        in_forward = "overlap" in name or "fsdp" in name
        if not (gat >= 0 if in_forward else gat > 0) or not red >= 0:
            failed.append(f"{name}: the all-gather part {gat}, the reductions' {red} (expected "
                          f"{'>= 0' if in_forward else '> 0'} and >= 0)")
    elif gat != 0 or not math.isclose(red, exp, rel_tol=0, abs_tol=2e-4):
        failed.append(f"{name}: reduce {red} gather {gat}, exposed {exp}")
    checked += 1
print(f"{checked} run(s) with replicas checked")
for f in failed:
    print("FAIL", f)
sys.exit(1 if failed or checked == 0 else 0)
