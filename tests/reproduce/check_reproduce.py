#!/usr/bin/env python3
"""`pipebench rerun` and `pipebench compare` end to end (docs/reproduce.md).

Usage: check_reproduce.py SCENARIO PIPEBENCH MPIEXEC REPO OUT

  cpu        run tests/data/reproduce/repro_cpu.toml on 2 ranks; rerun it: the new file names
             the original (results_id, sha256) and compare finds losses, gradient norms,
             clipping and memory bit-identical, with a timing verdict and its interval;
             rerun with OPENBLAS_NUM_THREADS=2 --set device.threads_per_rank=2 (named in the
             environment and the workload; memory identical) and with --set model.seed=99
             (a deviation: numerics not reproduced from step 0, memory identical, exit 9
             under --fail-on-difference); report cites every file's sha256.
  main_job   jobs/default.toml (4 counted steps) rerun: losses bit for bit, memory to the byte.
  sim        repro_sim.toml (virtual clock, seeded jitter): a plain rerun reproduces every
             figure; sim_load 1.3 is not reproduced (ratio 1.3), sim_load 1.05 inconclusive
             (its interval straddles +5%); memory identical; the loss not applicable.
  refusals   rerun refuses too few ranks (naming mpirun -np), an unknown run, a damaged file,
             a probe summary and the cuda backend without a GPU; compare refuses an unreadable
             reference, lists an unreadable candidate as not reproduced, refuses a bad
             tolerance and a references file with an error (file:line); references judge.
Exact quantities only: the machine may be loaded, so timing verdicts on cpu are checked
for form, never for value.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys

import h5py
import jsonschema

SCENARIO, PIPEBENCH, MPIEXEC, REPO, OUT = sys.argv[1:6]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
ENV.pop("PIPEBENCH_SYSTEM", None)
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def sh(args, np=None, env=None, expect=None):
    cmd = ([MPIEXEC, "-np", str(np), "--oversubscribe"] if np else []) + [PIPEBENCH] + args
    p = subprocess.run(cmd, capture_output=True, text=True, env=env or ENV, timeout=600)
    if expect is not None and p.returncode != expect:
        print(p.stdout[-3000:], p.stderr[-3000:])
        check(False, f"{' '.join(args[:2])}: exit {p.returncode}, expected {expect}")
    return p


def only_h5(folder):
    found = [os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs if f.endswith(".h5")]
    assert len(found) == 1, (folder, found)
    return found[0]


def run(job, name, np=2, args=()):
    sh(["run", os.path.join(REPO, "tests/data/reproduce", job), "-o", os.path.join(OUT, name), *args], np=np, expect=0)
    return only_h5(os.path.join(OUT, name))


def rerun(ref, name, np=2, args=(), env=None):
    sh(["rerun", ref, "-o", os.path.join(OUT, name), *args], np=np, env=env, expect=0)
    return only_h5(os.path.join(OUT, name))


SCHEMA = jsonschema.Draft202012Validator(json.load(open(os.path.join(REPO, "docs/compare.schema.json"))))


def compare(ref, *cands, args=(), expect=0):
    out = os.path.join(OUT, "cmp-" + "-".join(os.path.basename(os.path.dirname(os.path.dirname(c))) for c in cands))
    p = sh(["compare", ref, *cands, "-o", out, *args], expect=expect)
    for f in ("index.html", "report.md", "compare.json", "artifact.md"):
        check(os.path.getsize(os.path.join(out, f)) > 0, f"compare wrote {f}")
    doc = json.load(open(os.path.join(out, "compare.json")))
    errors = [f"{'/'.join(map(str, e.path))}: {e.message[:200]}" for e in SCHEMA.iter_errors(doc)]
    check(not errors, f"compare.json valid against docs/compare.schema.json {errors[:3]}")
    return doc, p


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def run_of(doc, cand_index, name):
    return next(r for r in doc["candidates"][cand_index]["runs"] if r["run"] == name)


def check_of(run, what):
    return next(n for n in run["numerics"] if n["check"].startswith(what))


def figure(run, name):
    return next(f for f in run["performance"] if f["figure"].startswith(name))


def env_row(doc, cand_index, name):
    return next(e for e in doc["candidates"][cand_index]["environment"] if e["name"] == name)


def workload_keys(run):
    return {w["key"]: (w["reference"], w["candidate"]) for w in run["workload_differences"]}


def scenario_cpu():
    ref = run("repro_cpu.toml", "ref")
    with h5py.File(ref) as f:
        ref_id = f.attrs["results_id"]
        ref_id = ref_id.decode() if isinstance(ref_id, bytes) else ref_id
    same = rerun(ref, "same")
    with h5py.File(same) as f:
        a = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        check(a["reproduces_id"] == ref_id, "rerun: reproduces_id is the original's results_id")
        check(a["reproduces_sha256"] == sha256(ref), "rerun: reproduces_sha256 is the original's sha256")
        check(a["reproduces_path"] == ref, "rerun: reproduces_path")
        check(len(f.attrs["deviations"]) == 0, "rerun: no deviations")
        check(a["results_id"] != ref_id, "rerun: a results_id of its own")
    doc, _ = compare(ref, same)
    check(doc["reference"]["sha256"] == sha256(ref), "compare.json cites the reference's sha256")
    check(doc["candidates"][0]["sha256"] == sha256(same), "compare.json cites the candidate's sha256")
    for name in ("base", "pipe"):
        r = run_of(doc, 0, name)
        for what in ("loss", "gradient norm", "clipped", "memory"):
            check(check_of(r, what)["verdict"] == "reproduced", f"same machine, {name}: {what} reproduced")
        check("bit-identical" in check_of(r, "loss")["evidence"], f"{name}: the loss is bit-identical")
        for fig in ("median step time", "throughput", "slowest stage"):
            f = figure(r, fig)
            check(f["verdict"] in ("reproduced", "not reproduced", "inconclusive") and f["ratio_low"] <= f["ratio"] <= f["ratio_high"],
                  f"{name}: {fig} judged with its interval ({f['verdict']}: {f['ratio']:.3f} in [{f['ratio_low']:.3f}, {f['ratio_high']:.3f}])")
        check(figure(r, "peak memory")["verdict"] == "reproduced", f"{name}: peak memory reproduced")
        check(not r["workload_differences"], f"{name}: no workload difference")
    check(figure(run_of(doc, 0, "base"), "bubble")["verdict"] == "not applicable", "a single-stage bubble is not applicable")
    # The artifact description pastes as it is: the workload, the commands.
    art = open(os.path.join(OUT, "cmp-same", "artifact.md")).read()
    check("## Hardware" in art and "## Expected results" in art and "pipebench rerun " + ref in art and "[[run]]" in art,
          "artifact.md: hardware, the rerun command, the workload, the expected figures")

    env = dict(ENV, OPENBLAS_NUM_THREADS="2")
    threads = rerun(ref, "threads", args=["--set", "device.threads_per_rank=2"], env=env)
    seed = rerun(ref, "seed", args=["--set", "model.seed=99"])
    with h5py.File(seed) as f:
        check([d.decode() if isinstance(d, bytes) else d for d in f.attrs["deviations"]] == ["model.seed=99"],
              "rerun --set: recorded as a deviation")
    doc, _ = compare(ref, threads, seed)
    row = env_row(doc, 0, "$OPENBLAS_NUM_THREADS")
    check(row["differs"] and row["candidate"] == "2", "threads: $OPENBLAS_NUM_THREADS named in the environment")
    check(env_row(doc, 0, "BLAS")["differs"], "threads: the BLAS line (threads_per_rank) differs")
    for name in ("base", "pipe"):
        t = run_of(doc, 0, name)
        check(workload_keys(t).get("device.threads_per_rank") == ("1", "2"), f"threads, {name}: device.threads_per_rank 1 -> 2")
        check(check_of(t, "memory")["verdict"] == "reproduced", f"threads, {name}: memory identical")
        s = run_of(doc, 1, name)
        check(workload_keys(s).get("model.seed") == ("7", "99"), f"seed, {name}: model.seed 7 -> 99 in the workload")
        loss = check_of(s, "loss")
        check(loss["verdict"] == "not reproduced" and loss["first_differing_step"] == 0 and loss["max_rel_diff"] > 0,
              f"seed, {name}: the loss differs from step 0 (largest relative difference {loss['max_rel_diff']:.3g})")
        check(check_of(s, "memory")["verdict"] == "reproduced", f"seed, {name}: memory identical")
        check(s["verdict"] == "not reproduced", f"seed, {name}: not reproduced")
        check(any("model.seed" in why for why in s["reasons"]), f"seed, {name}: the reasons name model.seed")
    check(doc["candidates"][1]["deviations"] == ["model.seed=99"], "compare.json: the candidate's deviations")
    compare(ref, seed, args=["--fail-on-difference"], expect=9)

    # The report cites the file it judged.
    rep = os.path.join(OUT, "report")
    sh(["report", same, "-o", rep], expect=0)
    summary = json.load(open(os.path.join(rep, "summary.json")))
    check(all(r["file_sha256"] == sha256(same) for r in summary["runs"]), "report: summary.json cites the file's sha256")
    check(sha256(same) in open(os.path.join(rep, "report.md")).read(), "report: report.md cites the sha256")


def scenario_main_job():
    ref_dir = os.path.join(OUT, "ref")
    sh(["run", os.path.join(REPO, "jobs/default.toml"), "-o", ref_dir, "-n", "4"], np=2, expect=0)
    ref = only_h5(ref_dir)
    again = rerun(ref, "again")
    doc, _ = compare(ref, again)
    for name in ("single_stage_baseline", "two_stage_pipeline"):
        r = run_of(doc, 0, name)
        check(check_of(r, "loss")["verdict"] == "reproduced", f"the main job rerun, {name}: losses bit for bit")
        check(check_of(r, "memory")["verdict"] == "reproduced", f"the main job rerun, {name}: memory to the byte")
        st = figure(r, "median step time")
        print(f"     {name}: step time {st['verdict']}, {st['ratio']:.3f} in [{st['ratio_low']:.3f}, {st['ratio_high']:.3f}]")


def scenario_sim():
    ref = run("repro_sim.toml", "ref")
    same = rerun(ref, "same")
    slow = rerun(ref, "slow", args=["--set", "device.sim_load=1.3"])
    edge = rerun(ref, "edge", args=["--set", "device.sim_load=1.05"])
    doc, p = compare(ref, same, slow, edge)
    for name in ("base", "pipe"):
        r = run_of(doc, 0, name)
        check(r["verdict"] == "reproduced", f"plain rerun, {name}: reproduced ({r['reasons']})")
        check(check_of(r, "loss")["verdict"] == "not applicable", f"{name}: no loss on sim: not applicable")
        s = run_of(doc, 1, name)
        st = figure(s, "median step time")
        check(st["verdict"] == "not reproduced" and abs(st["ratio"] - 1.3) < 0.01 and st["ratio_low"] > 1.05,
              f"sim_load 1.3, {name}: step time not reproduced ({st['ratio']:.4f} in [{st['ratio_low']:.4f}, {st['ratio_high']:.4f}])")
        check(figure(s, "throughput")["verdict"] == "not reproduced", f"sim_load 1.3, {name}: throughput not reproduced")
        check(check_of(s, "memory")["verdict"] == "reproduced", f"sim_load 1.3, {name}: memory identical")
        check(workload_keys(s).get("device.sim_load") == ("(none)", "1.3"), f"sim_load 1.3, {name}: named in the workload")
        e = run_of(doc, 2, name)
        et = figure(e, "median step time")
        check(et["verdict"] == "inconclusive" and et["ratio_low"] < 1.05 < et["ratio_high"],
              f"sim_load 1.05, {name}: inconclusive, its interval straddles 1.05 ([{et['ratio_low']:.4f}, {et['ratio_high']:.4f}])")
        check(e["verdict"] == "inconclusive", f"sim_load 1.05, {name}: the run inconclusive")
    check(doc["verdict"] == "not reproduced", "overall: the worst run's verdict")
    check(doc["candidates"][0]["verdict"] == "reproduced" and doc["candidates"][2]["verdict"] == "inconclusive",
          "per candidate: reproduced, inconclusive")
    check(p.stdout.splitlines()[-2].startswith("compare: not reproduced"), "the console ends with the verdict")
    compare(ref, same, args=["--fail-on-difference"], expect=0)
    compare(ref, edge, args=["--fail-on-difference"], expect=0)  # inconclusive is not a difference
    compare(ref, slow, args=["--fail-on-difference"], expect=9)
    compare(ref, edge, args=["--tolerance", "10%", "--fail-on-difference"], expect=0)
    # The reference given again, or a copy of it, reproduces nothing (it said
    # "reproduced": every figure of a file agrees with itself).
    copy = os.path.join(OUT, "copy_of_ref.h5")
    shutil.copyfile(ref, copy)
    for cand, what in ((ref, "the reference itself"), (copy, "a byte copy of it")):
        doc, p = compare(ref, cand)
        r = run_of(doc, 0, "pipe")
        check(doc["verdict"] == "not applicable" and r["verdict"] == "not applicable"
              and "not a reproduction" in r["reasons"][0], f"{what} as the candidate: not applicable ({r['reasons'][:1]})")
        check(p.stdout.splitlines()[-2].startswith("compare: not applicable"), f"{what}: the console says so")
    # A file older than results_id: the same bytes tell.
    old, old_copy = os.path.join(OUT, "no_id.h5"), os.path.join(OUT, "no_id_copy.h5")
    shutil.copyfile(ref, old)
    with h5py.File(old, "r+") as f:
        del f.attrs["results_id"]
    shutil.copyfile(old, old_copy)
    doc, _ = compare(old, old_copy)
    r = run_of(doc, 0, "pipe")
    check(r["verdict"] == "not applicable" and "byte copy" in r["reasons"][0], f"no results_id, a byte copy: {r['reasons'][:1]}")


def write_refs(text):
    path = os.path.join(OUT, "references.toml")
    open(path, "w").write(text)
    return path


def scenario_refusals():
    ref = run("repro_sim.toml", "ref")
    p = sh(["rerun", ref, "-o", os.path.join(OUT, "np1")], np=1, expect=2)
    check("needs 2 ranks" in p.stderr and "mpirun -np 2 pipebench rerun" in p.stderr, f"too few ranks: {p.stderr.strip()}")
    check(not os.path.exists(os.path.join(OUT, "np1")), "too few ranks: nothing written")
    # The suggested command is the one given, deviations and all (it once dropped the --set and reran something else).
    p = sh(["rerun", ref, "--set", "train.repeats=3", "-o", os.path.join(OUT, "np1")], np=1, expect=2)
    check(f"mpirun -np 2 pipebench rerun {ref} --set train.repeats=3 -o {os.path.join(OUT, 'np1')}" in p.stderr,
          f"too few ranks, with a deviation: {p.stderr.strip()}")
    one = rerun(ref, "np1-base", np=1, args=["--run", "base"])
    check(os.path.exists(one), "rerun --run base on 1 rank runs")
    # A file of one run of its workload: rerun runs that run alone (it once ran every run of the recorded
    # workload text, the ones the original never ran included).
    sub = run("repro_sim.toml", "sub", np=1, args=["--run", "base"])
    again = rerun(sub, "sub-again", np=1)
    with h5py.File(again) as f:
        check(sorted(f["runs"].keys()) == ["base"], f"rerun of a one-run file runs that run only: {sorted(f['runs'].keys())}")
    # A run with replicas needs all its ranks, p x d, not its pipeline's p (it once started on 2 of 4).
    dp = run("repro_sim.toml", "dp", np=4, args=["--run", "pipe", "--set", "run.pipe.data_parallel=2"])
    p = sh(["rerun", dp, "-o", os.path.join(OUT, "dp-np2")], np=2, expect=2)
    check("run pipe needs 4 ranks and this launch has 2: mpirun -np 4 pipebench rerun" in p.stderr,
          f"too few ranks for p x d: {p.stderr.strip()}")
    check(not os.path.exists(os.path.join(OUT, "dp-np2")), "too few ranks for p x d: nothing written")
    # A file schedule reruns from the CSV text the results file records, not from the path: the CSV gone,
    # the rerun still runs the measured schedule (docs/reproduce.md).
    work = os.path.join(OUT, "file_schedule")
    os.makedirs(work)
    for f in ("schedules.toml", "schedule_p2_split.csv"):
        shutil.copy(os.path.join(REPO, "tests/data/runner", f), work)
    sh(["run", os.path.join(work, "schedules.toml"), "--run", "file2", "-o", os.path.join(work, "ref")], np=2, expect=0)
    os.remove(os.path.join(work, "schedule_p2_split.csv"))
    csv_rerun = rerun(only_h5(os.path.join(work, "ref")), "file_schedule_rerun", np=2)
    with h5py.File(csv_rerun) as f:
        status = f["runs/file2"].attrs["status"]
        status = status.decode() if isinstance(status, bytes) else status
        check(status == "ok" and sorted(f["runs"].keys()) == ["file2"], f"a file schedule reruns without its CSV: {status}")
    p = sh(["rerun", ref, "--run", "nope"], np=1, expect=2)
    check("has no run \"nope\" (its runs: base, pipe)" in p.stderr, f"unknown run: {p.stderr.strip()}")
    damaged = os.path.join(OUT, "damaged.h5")
    open(damaged, "wb").write(open(ref, "rb").read()[:3000])
    p = sh(["rerun", damaged], np=1, expect=2)
    check("pipebench: rerun:" in p.stderr and "damaged.h5" in p.stderr, f"damaged: {p.stderr.strip()}")
    probe = os.path.join(OUT, "probe.h5")
    shutil.copy(ref, probe)
    with h5py.File(probe, "a") as f:
        f.attrs["role"] = "probe"
    p = sh(["rerun", probe], np=1, expect=2)
    check("probe's summary" in p.stderr, f"probe summary: {p.stderr.strip()}")
    cuda = os.path.join(OUT, "cuda.h5")
    shutil.copy(ref, cuda)
    with h5py.File(cuda, "a") as f:
        text = f.attrs["job_toml"]
        text = text.decode() if isinstance(text, bytes) else text
        lines = [l for l in text.replace('backend = "sim"', 'backend = "cuda"').splitlines()
                 if not l.startswith(("sim_clock", "sim_jitter"))]  # the virtual clock is the sim backend's
        f.attrs["job_toml"] = "\n".join(lines) + "\n"
    p = sh(["rerun", cuda], np=2, expect=7)
    check("cuda backend" in p.stderr and ("no usable GPU" in p.stderr or "without CUDA" in p.stderr), f"cuda: {p.stderr.strip()}")
    p = sh(["rerun", ref, "--set", "model.hidden=-1"], np=1, expect=3)
    check(":/job_toml (--set model.hidden=-1)" in p.stderr, f"a bad deviation: {p.stderr.strip()}")

    # compare: damaged inputs, bad options.
    same = rerun(ref, "same")
    p = sh(["compare", damaged, same, "-o", os.path.join(OUT, "c1")], expect=1)
    check("cannot read the reference" in p.stderr, f"damaged reference: {p.stderr.strip()}")
    doc, p = compare(ref, same, damaged)
    check(doc["skipped"] and doc["skipped"][0]["path"] == damaged and doc["verdict"] == "not reproduced",
          "a damaged candidate: skipped with its reason, not reproduced")
    check("skipped" in p.stderr, "a damaged candidate: said on stderr")
    p = sh(["compare", ref, same, "-o", os.path.join(OUT, "c2"), "--tolerance", "five"], expect=2)
    check("--tolerance five" in p.stderr, f"bad tolerance: {p.stderr.strip()}")
    # A bare number above 1 is refused (it once meant ±500%), with the percentage it was surely meant as.
    p = sh(["compare", ref, same, "-o", os.path.join(OUT, "c2"), "--tolerance", "5"], expect=2)
    check("a bare number is a fraction of at most 1 (5 would be ±500%): write 5%" in p.stderr, f"bare 5: {p.stderr.strip()}")
    check(not os.path.exists(os.path.join(OUT, "c2")), "bare 5: nothing written")

    # references: errors with file:line, within / outside / logged / no reference.
    bad = write_refs('schema = 1\n[system.lab.repro_sim.pipe]\nstep_time_s = [1.0, -0.05, 0.05, "ms"]\n')
    p = sh(["compare", ref, same, "-o", os.path.join(OUT, "c3"), "--references", bad], expect=3)
    check("references.toml:3: system.lab.repro_sim.pipe.step_time_s" in p.stderr, f"references error: {p.stderr.strip()}")
    p = sh(["report", same, "-o", os.path.join(OUT, "r3"), "--references", bad], expect=3)
    check("references.toml:3:" in p.stderr, "report --references: the same error")
    with h5py.File(same) as f:
        run_attrs = f["runs/pipe"].attrs
        step = float(run_attrs["step_time_median_s"])
        mem = int(run_attrs["peak_mem_max_bytes"])
        base_step = float(f["runs/base"].attrs["step_time_median_s"])
    fp = f"sim | {open('/proc/cpuinfo').read().split('model name')[1].split(':', 1)[1].splitlines()[0].strip()} | 2 ranks"
    good = write_refs(f'schema = 1\n[system.lab]\nfingerprint = "{fp}"\n[system.lab.repro_sim.pipe]\n'
                      f'step_time_s = [{step}, -0.05, 0.05, "s"]\npeak_mem_bytes = [{mem - 1}, 0, 0]\n'
                      f'[system."*".repro_sim.base]\nstep_time_s = [{base_step * 2}, -0.1, 0.1]\n')
    doc, _ = compare(ref, same, args=["--references", good])
    checks = {(c["run"], c["figure"]): c for c in run_of(doc, 0, "pipe")["references"] + run_of(doc, 0, "base")["references"]}
    check(checks[("pipe", "step_time_s")]["verdict"] == "within", "references: step time within, matched by fingerprint")
    check(checks[("pipe", "step_time_s")]["matched_by"] == "fingerprint", "references: matched by the hardware fingerprint")
    check(checks[("pipe", "peak_mem_bytes")]["verdict"] == "outside", "references: one byte over is outside")
    check(checks[("base", "step_time_s")]["verdict"] == "logged", "references: '*' only logs (base is twice off)")
    check(run_of(doc, 0, "pipe")["verdict"] == "not reproduced" and run_of(doc, 0, "base")["verdict"] == "reproduced",
          "references: outside makes the run not reproduced; logged does not")
    p = sh(["report", same, "-o", os.path.join(OUT, "r4"), "--references", good, "--fail-on-regression"], expect=6)
    check("peak_mem_bytes outside its reference on system lab" in p.stderr, "report --references: outside fails a nightly")
    by_env = rerun(ref, "by-env", env=dict(ENV, PIPEBENCH_SYSTEM="lab"))
    with h5py.File(by_env) as f:
        system = f.attrs["system"]
        check((system.decode() if isinstance(system, bytes) else system) == "lab", "$PIPEBENCH_SYSTEM is recorded as system")
    doc, _ = compare(ref, by_env, args=["--references", good])
    named_checks = [c for c in run_of(doc, 0, "pipe")["references"] if c["figure"] == "step_time_s"]
    check(named_checks and named_checks[0]["matched_by"] == "name", "a system named at run time is matched by its name")
    named = rerun(ref, "named", args=["--system", "cluster"])
    p = sh(["report", named, "-o", os.path.join(OUT, "r5"), "--references", good, "--fail-on-regression"], expect=0)
    summary = json.load(open(os.path.join(OUT, "r5", "summary.json")))
    verdicts = {(c["run"], c["verdict"]) for c in summary["references"]}
    check(("pipe", "no reference") in verdicts and ("base", "logged") in verdicts,
          f"a system named at run time without references: reported, never failed ({sorted(verdicts)})")


{"cpu": scenario_cpu, "main_job": scenario_main_job, "sim": scenario_sim, "refusals": scenario_refusals}[SCENARIO]()
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
