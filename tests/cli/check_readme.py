#!/usr/bin/env python3
"""Every command in the README's ```sh blocks runs as written (exit 0) on
this machine, in order, in a scratch folder that links the checkout's build/
and jobs/ — except the ones listed in SKIP with the reason (they need a GPU,
Slurm, the set-up scripts, a release build, or minutes of cpu trials that
tests/probe and tests/tune cover). Prints what it ran and skipped.
    check_readme.py README BUILD_DIR SOURCE_DIR SCRATCH"""
import os
import re
import shutil
import subprocess
import sys
import time

readme, build, source, scratch = sys.argv[1:5]
SKIP = [
    (r"^bash scripts/", "the set-up commands: CI runs them"),
    (r"gpu|CUDA_VISIBLE_DEVICES", "needs a GPU (tests/gpu)"),
    (r"sbatch|srun|slurm/", "needs Slurm (tests/slurm)"),
    (r"^cmake |build-release", "a second build (CI builds the default preset)"),
    (r"bench/whole/sim_bubble.sh", "a whole-run benchmark, minutes"),
    (r"bench/whole/cpu_vs_torch.sh", "a whole-run benchmark, minutes; needs python3-torch, which set-up does not install"),
    (r"--confirm --verify", "4 minutes of cpu trials and runs (tests/tune covers --confirm and --verify)"),
    (r"pipebench probe jobs/default.toml", "a minute of cpu trials (tests/probe covers the probe)"),
    (r"run jobs/llama_long_cpu.toml", "20 s of 4K-token runs: ctest mpi.cpu.llama_long_job runs it and checks the losses"),
]

commands = []
block = False
for line in open(readme, encoding="utf-8"):
    if line.startswith("```"):
        block = line.strip() == "```sh"
        continue
    if block and line.strip() and not line.lstrip().startswith("#"):
        commands.append(line.rstrip("\n"))
assert len(commands) >= 20, f"only {len(commands)} commands found in {readme}"

shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)
os.symlink(build, os.path.join(scratch, "build"))
for d in ("jobs", "tools", "bench", "slurm", "scripts", "docs"):
    os.symlink(os.path.join(source, d), os.path.join(scratch, d))
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
failed, ran = [], 0
for cmd in commands:
    reason = next((why for pattern, why in SKIP if re.search(pattern, cmd)), None)
    if reason:
        print(f"skip  {cmd[:100]}\n      ({reason})")
        continue
    start = time.time()
    p = subprocess.run(["bash", "-c", cmd], cwd=scratch, env=env, capture_output=True, text=True, timeout=600)
    ran += 1
    print(f"rc {p.returncode:<3} {time.time() - start:6.1f} s  {cmd[:100]}")
    if p.returncode != 0:
        failed.append(cmd)
        print(p.stdout[-1500:], p.stderr[-1500:])
print(f"{ran} command(s) ran, {len(commands) - ran} skipped, {len(failed)} failed")
assert not failed, failed
print("PASS")
