#!/usr/bin/env python3
"""Fuzzing `pipebench plan`, `report` and `compare` with mutated inputs (issues 13, 34).

From a fixed seed, makes five kinds of cases:
  toml  mutated workloads (jobs/*.toml and tests/data/*/*.toml): values replaced by
        hostile ones (huge and negative integers, literals beyond int64 and double,
        NaN, control characters, deep nesting, long arrays), lines deleted, duplicated,
        swapped, bytes flipped, text truncated, [[run]] tables repeated;
  set   jobs/default.toml with 1-3 hostile `--set key=value` overrides;
  csv   mutated schedule files (schedule = "file:PATH", issue 39): every training run of
        jobs/schedules.toml and tests/data/parallel/dp_cpu.toml exported in both CSV forms
        (compute only, and PyTorch's compute_comms with sends, receives and REDUCE_GRAD),
        plus the hand-written tests/data/parallel/dp_interleaved_comms.csv; cells replaced by
        hostile ones (numbers past int32 and int64, negative, stages and micro-batches out of
        range, unknown kinds, broken OVERLAP_F_B pairs), deleted, duplicated, swapped within
        and across ranks (mismatched transfers, deadlocks), lines deleted, duplicated and
        swapped, bytes flipped, text truncated, CRLF line ends, a byte-order mark, huge lines;
        planned with the run's own virtual_stages_per_rank, some also written back out
        (--export-schedule csv-comms) or as JSON;
  h5    mutations of real results files: bit flips, truncation, attributes replaced
        by arrays / wrong types / hostile strings / extreme numbers, datasets emptied,
        reshaped, retyped or declared huge, objects deleted, run groups renamed, the
        stored job_toml replaced by a mutated workload;
  cli   every numeric option of report, compare, trace and tune given a hostile value (0, -1,
        past int32 and int64, 1e400, nan, inf, text, hex, spaces): refused with a message, or
        accepted; a non-finite number accepted is a failure (nan passes CLI::Range);
and runs `pipebench plan` (toml, set, csv) or `pipebench report` / `pipebench compare` (h5: every
third file as compare's reference, every third as its candidate beside an intact file) on each with a
timeout. Every case ends in exactly one outcome:
  accepted  exit 0 (report: summary.json, compare: compare.json is valid JSON)
  error     a clear refusal: plan exits 2, 3 or 4 with a "pipebench:" message; report
            exits 1 saying the file was skipped, compare that it cannot read the reference (also when, under ASan, the sanitizer
            stopped the report's child process inside libhdf5 itself: counted apart)
  crash     killed by a signal, exit >= 128, or a sanitizer report on stderr
  hang      still running at the timeout
  unclear   anything else: another exit code, an empty message, a raw control
            character (ESC, NUL, ...) or bytes that are not UTF-8 in the output,
            invalid summary.json
Crashes, hangs and unclear outcomes fail the run; each is kept under
OUT/failures/<case>/ with its input and a `repro.sh`.

With --run-accepted N, the first N accepted csv cases and the first N accepted toml cases that
can run here (cpu or sim, at most 8 ranks) are also run under mpirun: a schedule the validator
accepted must complete (2 counted steps), never deadlock or record a failure; a workload (1
counted step) must write its results file with every run as the plan's memory says: out of
memory exactly where the plan's peak is above memory_capacity (nan and timeout failures, from a
mutated learning rate or step timeout, pass; an `error` does not), every completed run at its
planned peak bytes on every rank, and a sim workload (run on the virtual clock without jitter)
with every run completed at the plan's timeline (tests/mpi/check_virtual_clock.py: bubble, busy
time, step time, synchronisation). One that does not is kept like a crash.

Usage: fuzz.py PIPEBENCH REPO OUT --good FILE.h5 [--good ...] [--seed N]
               [--toml N] [--set N] [--csv N] [--h5 N] [--cli N] [--timeout S] [--jobs N] [--name NAME]
               [--run-accepted N] [--run-timeout S]
Prints one line of figures per kind and writes OUT/figures.json.
"""
import argparse
import concurrent.futures
import glob
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib

import h5py
import numpy as np

SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "SUMMARY: UndefinedBehaviorSanitizer")
RAW_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]")  # newline and tab are text

# ---- hostile values ----------------------------------------------------------

INTS = ["0", "-1", "1", "2", "3", "7", "64", "1024", "1025", "65536", "65537", "1048576", "1048577", "4194305",
        "16777217", "2147483647", "2147483648", "536870912", "600000000", "9223372036854775807",
        "9223372036854775808", "-9223372036854775809", "18446744073709551615", "0x7fffffffffffffff", "0b11",
        "0o777", "1_000_000", "+5", "-0", "99_999_999_999_999_999_999"]
FLOATS = ["1e400", "-1e400", "nan", "inf", "-inf", "1e-400", "0.0", "-0.0", "1.5", "3.4e38", "1e-300"]
STRINGS = ['""', '"gpipe"', '"1f1b"', '"eager-1f1b"', '"fill_drain"', '"inference"', '"balanced"', '"adamw"',
           '"sim"', '"cuda"', '"nccl"', '"4GiB"', '"1 EiB"', '"0B"', '"16EiB"', '"-1GiB"', '"nanGiB"',
           '"1e30 GiB"', '"\\u001b[31m"', '"a\\u0000b"', '"../../x"', '"<script>alert(1)</script>"',
           '"' + "x" * 5000 + '"', '"ünï"', '"\\n\\r\\t"']
COMPOSITES = ["[]", "[1,2]", "[0]", "[-1, 9]", '[1, "a"]', "[" * 40 + "]" * 40, "[" * 31 + "]" * 31,
              "[" + ",".join(["1"] * 100000) + "]", "[2147483647, 2147483647]", "{}", "{a = 1}", "true",
              "1979-05-27T07:32:00Z", "[[1],[2]]"]
VALUES = INTS + FLOATS + STRINGS + COMPOSITES

KEYS = ["schema", "job.name", "job.description", "model.kind", "model.hidden", "model.layers", "model.heads",
        "model.ffn_hidden", "model.seq_len", "model.vocab", "model.dtype", "model.seed", "train.optimizer",
        "train.learning_rate", "train.warmup", "train.repeats", "train.max_repeats", "train.grad_clip", "train.step_timeout_s",
        "device.backend", "device.memory_capacity", "device.threads_per_rank", "device.sim_flops_per_s",
        "device.sim_link_latency_us", "device.sim_link_gbps", "device.transport"]
RUN_KEYS = ["name", "pipeline_size", "micro_batch_size", "num_microbatches", "schedule", "mode", "layers_per_stage",
            "layers_per_stage_origin", "remainder", "balance_by", "baseline", "unknown_key"]
BAD_SPECS = ["=", "model", "a..b=1", "model.hidden.x=1", "run.x=1", "run.nope.hidden=1", ".=.", "run..x=1",
             "model.hidden", "=1", "run.single_stage_baseline=1", "job=1", "model=[1]"]


def hostile_value(rng):
    return rng.choice(VALUES)


def flip_bits(text, rng):
    """1-8 random bits of the text's bytes flipped (undecodable bytes kept as surrogates)."""
    b = bytearray(text.encode("utf-8", "surrogateescape"))
    for _ in range(rng.randint(1, 8)):
        if b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    return b.decode("utf-8", "surrogateescape")


# ---- TOML workloads ------------------------------------------------------------

KEY_LINE = re.compile(r"^(\s*[A-Za-z_\"][^=]*=\s*)(.*)$")


def mutate_toml(text, rng):
    """One to three random mutations of workload text."""
    for _ in range(rng.randint(1, 3)):
        lines = text.split("\n")
        op = rng.randrange(11)
        keyed = [i for i, l in enumerate(lines) if KEY_LINE.match(l)]
        if op <= 2 and keyed:  # the most telling mutation: a value replaced
            i = rng.choice(keyed)
            lines[i] = KEY_LINE.match(lines[i]).group(1) + hostile_value(rng)
        elif op == 3 and lines:
            del lines[rng.randrange(len(lines))]
        elif op == 4 and lines:
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])
        elif op == 5 and len(lines) > 1:
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == 6:
            i = rng.randrange(len(lines) + 1)
            key = rng.choice(RUN_KEYS + [k.split(".")[-1] for k in KEYS])
            lines.insert(i, f"{key} = {hostile_value(rng)}")
        elif op == 7 and len(text) < 100_000:  # [[run]] tables repeated (once: a repeat of repeats grew to 24 GB)
            run = text[text.find("[[run]]"):] if "[[run]]" in text else "[[run]]\nname = \"r\"\n"
            n = rng.choice([2, 10, 300, 1001, 1500])
            n = min(n, max(2, 2_000_000 // max(1, len(run))))  # at most ~2 MB: past the 1 MiB limit, not 100 MB
            unique = rng.random() < 0.7
            blocks = [re.sub(r'name = "([^"]*)"', lambda m, k=k: f'name = "{m.group(1)}_{k}"', run) if unique else run
                      for k in range(n)]
            lines = (text + "\n" + "\n".join(blocks)).split("\n")
        elif op == 8:
            text = flip_bits(text, rng)
            continue
        elif op == 9:
            text = text[: rng.randrange(len(text) + 1)]  # truncated
            continue
        else:
            i = rng.randrange(len(lines) + 1)
            lines.insert(i, rng.choice(["[", "[[run]]", "[model]", "[device", "]]", "= 1", "x = ", '"""', "'''",
                                        "[job.sub]", "a.b.c = 1", "\x1b[31m", "\x00"]))
        text = "\n".join(lines)
    return text


def toml_cases(repo, n, rng, out):
    seeds = sorted(glob.glob(os.path.join(repo, "jobs", "*.toml")) +
                   glob.glob(os.path.join(repo, "tests", "data", "*", "*.toml")))
    texts = [open(p, encoding="utf-8").read() for p in seeds]
    cases = []
    for k in range(n):
        path = os.path.join(out, f"toml_{k}.toml")
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(mutate_toml(rng.choice(texts), rng))
        cases.append(("toml", f"toml_{k}", ["plan", path], [path]))
    return cases


def set_cases(repo, n, rng):
    job = os.path.join(repo, "jobs", "default.toml")
    runs = re.findall(r'^name = "([^"]+)"', open(job).read(), re.M)[1:]
    cases = []
    for k in range(n):
        args = ["plan", job]
        for _ in range(rng.randint(1, 3)):
            if rng.random() < 0.08:
                spec = rng.choice(BAD_SPECS)
            else:
                key = rng.choice(KEYS) if rng.random() < 0.6 else f"run.{rng.choice(runs)}.{rng.choice(RUN_KEYS)}"
                value = hostile_value(rng)
                if len(value) > 50000:  # one argument may hold at most 128 KiB
                    value = "[" + ",".join(["1"] * 20000) + "]"
                if rng.random() < 0.2:  # unquoted text is taken as a string; raw control characters too
                    value = rng.choice(["gpipe", "a\x1bb", "x y", "\x07", "1f1b", "4 GiB", "a\"b", "a\\b"])
                spec = f"{key}={value}"
            args += ["--set", spec.replace("\x00", "\x01")]  # argv cannot hold NUL
        cases.append(("set", f"set_{k}", args, []))
    return cases


# ---- schedule CSV files ------------------------------------------------------------

CSV_JOBS = (os.path.join("jobs", "schedules.toml"), os.path.join("tests", "data", "parallel", "dp_cpu.toml"))
CSV_NUMBERS = ["0", "1", "3", "7", "8", "9", "63", "64", "-1", "-0", "+1", "01", "2147483647", "2147483648",
               "4294967296", "9223372036854775807", "9223372036854775808", "99999999999999999999", "1e3", "0x10", " 1"]
CSV_KINDS = ["F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "REDUCE_GRAD", "UNSHARD", "RESHARD",
             "OVERLAP_F_B", "f", "X", "SEND", "RECV_W", "FF", ""]
CSV_CELLS = ["", " ", ",", ";", "()", "()OVERLAP_F_B", "(0F0)OVERLAP_F_B", "(0F0;)OVERLAP_F_B", "(;0B0)OVERLAP_F_B",
             "(0F0;1B0;2B0)OVERLAP_F_B", "((0F0;1B0))OVERLAP_F_B", "(0F0;1B0)", "(0F0;1B0)OVERLAP_F_", "(0B0;1F0)OVERLAP_F_B",
             "(0F0;0F0)OVERLAP_F_B", "(0SEND_F0;1B0)OVERLAP_F_B", "(0F0;1W0)OVERLAP_F_B", "0F0;1B0", "\"0F0\"", "0 F 0",
             "\x1b[31m", "\x00", "ü", "0F" + "9" * 400, "x" * 5000, "0REDUCE_GRAD0", "REDUCE_GRAD", "0UNSHARD7"]


def hostile_cell(rng):
    r = rng.random()
    if r < 0.35:
        return rng.choice(CSV_NUMBERS) + rng.choice(CSV_KINDS) + rng.choice(CSV_NUMBERS + [""])
    if r < 0.5:
        return (f"({rng.choice(CSV_NUMBERS)}F{rng.choice(CSV_NUMBERS)};"
                f"{rng.choice(CSV_NUMBERS)}{rng.choice(['B', 'I', 'W', 'F'])}{rng.choice(CSV_NUMBERS)})OVERLAP_F_B")
    return rng.choice(CSV_CELLS)


def mutate_csv(text, rng):
    """One to three random mutations of schedule CSV text."""
    for _ in range(rng.randint(1, 3)):
        rows = [line.split(",") for line in text.split("\n")]
        cells = [(i, j) for i, row in enumerate(rows) for j in range(len(row))]
        op = rng.randrange(12)
        if op <= 2 and cells:  # a cell replaced: the most telling mutation
            i, j = rng.choice(cells)
            rows[i][j] = hostile_cell(rng)
        elif op == 3 and cells:  # a cell deleted: a missing action or transfer
            i, j = rng.choice(cells)
            del rows[i][j]
        elif op == 4 and cells:  # a cell duplicated: an action run twice
            i, j = rng.choice(cells)
            rows[i].insert(j, rows[i][j])
        elif op == 5 and cells:  # two cells swapped, on one rank or across ranks: reordered, mismatched, deadlocked
            (i, j), (k, l) = rng.choice(cells), rng.choice(cells)
            rows[i][j], rows[k][l] = rows[k][l], rows[i][j]
        elif op == 6 and cells:  # a number in a cell changed by one
            i, j = rng.choice(cells)
            rows[i][j] = re.sub(r"\d+", lambda m: str(max(0, int(m.group()) + rng.choice([-1, 1]))), rows[i][j], count=1)
        elif op == 7 and rows:  # a rank's line deleted, duplicated or two lines swapped
            i, k = rng.randrange(len(rows)), rng.randrange(len(rows))
            choice = rng.randrange(3)
            if choice == 0:
                del rows[i]
            elif choice == 1:
                rows.insert(i, list(rows[i]))
            else:
                rows[i], rows[k] = rows[k], rows[i]
        elif op == 8:
            text = flip_bits(text, rng)
            continue
        elif op == 9:
            text = text[: rng.randrange(len(text) + 1)]  # truncated
            continue
        elif op == 10:
            text = rng.choice(["\ufeff" + text, text.replace("\n", "\r\n"), "# a comment\n" + text, text + "\n\n",
                               "0,1,2,3\n" + text, text.replace(",", ", ")])
            continue
        else:  # a line made huge: a rank with 100,000 actions
            i = rng.randrange(len(rows)) if rows else 0
            if rows:
                rows[i] = (rows[i] * (100_000 // max(1, len(rows[i])) + 1))[:100_000]
        text = "\n".join(",".join(row) for row in rows)
    return text


def csv_seeds(pipebench, repo):
    """(job, run, virtual_stages_per_rank, CSV text) for every training run of CSV_JOBS in both forms."""
    seeds = []
    for rel in CSV_JOBS:
        job = os.path.join(repo, rel)
        out = subprocess.run([pipebench, "plan", job, "--format", "json"], check=True, capture_output=True, text=True)
        for r in json.loads(out.stdout)["runs"]:
            if r["mode"] != "train":
                continue
            for form in ("csv", "csv-comms"):
                text = subprocess.run([pipebench, "plan", job, "--run", r["name"], "--export-schedule", form],
                                      check=True, capture_output=True, text=True).stdout
                seeds.append((job, r["name"], r["virtual_stages_per_rank"], text))
    by_hand = os.path.join(repo, "tests", "data", "parallel", "dp_interleaved_comms.csv")
    seeds.append((os.path.join(repo, "tests", "data", "parallel", "dp_cpu.toml"), "interleaved_1f1b_overlap", 2,
                  open(by_hand, encoding="utf-8").read()))
    return seeds


def csv_cases(pipebench, repo, n, rng, out):
    seeds = csv_seeds(pipebench, repo) if n else []
    cases = []
    for k in range(n):
        job, run, v, text = rng.choice(seeds)
        path = os.path.join(out, f"csv_{k}.csv")
        with open(path, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
            f.write(mutate_csv(text, rng))
        if rng.random() < 0.1:  # the stages per rank wrong too
            v = rng.choice([1, 2, 3, 4, 64])
        args = ["plan", job, "--run", run, "--set", f"run.{run}.schedule=file:{path}",
                "--set", f"run.{run}.virtual_stages_per_rank={v}"]
        r = rng.random()
        if r < 0.2:
            args += ["--export-schedule", rng.choice(["csv", "csv-comms"])]
        elif r < 0.4:
            args += ["--format", "json"]
        cases.append(("csv", f"csv_{k}", args, [path]))
    return cases


# ---- numeric command-line options ----------------------------------------------------

# Every numeric option of the commands that run without MPI, with what it needs around it
# (GOOD: an intact results file; OUT: a fresh output path). probe and run launch ranks: their
# numeric options share the same validators (cli_validators.cpp, CLI::Range on integers).
CLI_OPTIONS = [
    (["report", "GOOD", "-o", "OUT"], ["--threshold", "--alpha", "--min-history", "--noise-k"]),
    (["compare", "GOOD", "GOOD", "-o", "OUT"], ["--tolerance"]),
    (["trace", "GOOD", "-o", "OUT.json"], ["--step"]),
    (["tune", "jobs/default.toml", "--ranks", "4", "-o", "OUT.toml"],
     ["--global-batch", "--num-microbatches", "--bubble-target", "--top", "--virtual-stages", "--data-parallel",
      "--tensor-parallel", "--trial-timeout", "--steps"]),
    (["tune", "jobs/default.toml", "-o", "OUT.toml"], ["--ranks", "--gpus"]),
    (["tune", "jobs/default.toml", "--gpus", "4", "-o", "OUT.toml"], ["--gpus-per-node"]),
]
CLI_VALUES = ["0", "-1", "1", "2", "0.5", "0.01", "2147483647", "2147483648", "9223372036854775808", "1e400", "-1e400",
              "nan", "NaN", "inf", "-inf", "1e-400", "", "abc", "0x10", " 5", "5 ", "1_000", "5%", "\x1b[31m", "all",
              "99999999999999999999"]
NON_FINITE = {"1e400", "-1e400", "nan", "NaN", "inf", "-inf"}


def cli_cases(repo, goods, n, rng, out):
    """Up to n (command, option, value) cases of the cross product, in a seeded order."""
    every = [(base, opt, value) for base, opts in CLI_OPTIONS for opt in opts for value in CLI_VALUES]
    rng.shuffle(every)
    cases = []
    for k, (base, opt, value) in enumerate(every[:n]):
        dest = os.path.join(out, f"cli_{k}")
        args = []
        for a in base:
            if a == "GOOD":
                a = goods[k % len(goods)]
            elif a.startswith("OUT"):
                a = dest + a[3:]
            elif a.startswith("jobs/"):
                a = os.path.join(repo, a)
            args.append(a)
        value = value.replace("\\x1b", "\x1b")
        cases.append(("cli", f"cli_{k}", args + [opt, value], []))
    return cases


# ---- HDF5 results files ----------------------------------------------------------

def hdf5_objects(f):
    groups, datasets = [], []
    f.visititems(lambda name, obj: (datasets if isinstance(obj, h5py.Dataset) else groups).append(name))
    attrs = [("/", a) for a in f.attrs] + [(o, a) for o in groups + datasets for a in f[o].attrs]
    return groups, datasets, attrs


def hostile_attr(rng, old):
    choices = [
        lambda: np.array([old] * rng.choice([0, 2, 1000])) if not isinstance(old, np.ndarray) else old[:0],
        lambda: np.int64(rng.choice([-1, 0, 2**31 - 1, 2**62, -2**63, 2**63 - 1])),
        lambda: np.float64(rng.choice([float("nan"), float("inf"), -1e300, 0.0])),
        lambda: rng.choice(["", "\x1b[31mred", "a\x00b", "x" * 100000, "ünï", "<script>", "../x"]),
        lambda: np.array(["a", "b"], dtype=h5py.string_dtype()),
        lambda: np.zeros((3, 3)),
    ]
    return rng.choice(choices)()


def hostile_dataset(rng, data):
    flat = np.asarray(data).reshape(-1) if np.asarray(data).dtype.fields is None else np.asarray(data)
    choices = [
        lambda: flat[:0],
        lambda: flat[: max(0, len(flat) // 2)],
        lambda: np.concatenate([flat, flat]) if flat.dtype.fields is None else flat,
        lambda: np.array([b"x"] * max(1, len(flat)), dtype=h5py.string_dtype()),
        lambda: np.full(max(1, len(flat)), rng.choice([np.nan, np.inf, -1.0, 1e308])),
        lambda: np.full(max(1, len(flat)), rng.choice([-1, 2**31 - 1, -2**63]), dtype=np.int64),
        lambda: np.zeros((2, 2, 2)),
        lambda: np.float64(1.0),
    ]
    return rng.choice(choices)()


def mutate_h5(path, rng):
    with h5py.File(path, "r+") as f:
        for _ in range(rng.randint(1, 3)):
            groups, datasets, attrs = hdf5_objects(f)
            op = rng.randrange(8)
            if op <= 1 and attrs:
                obj, name = rng.choice(attrs)
                old = f[obj].attrs[name]
                del f[obj].attrs[name]
                f[obj].attrs[name] = hostile_attr(rng, old)
            elif op == 2 and attrs:
                obj, name = rng.choice(attrs)
                del f[obj].attrs[name]
            elif op <= 4 and datasets:
                name = rng.choice(datasets)
                if f[name].size > 10_000_000:  # an earlier mutation declared it huge: never read it
                    continue
                data = f[name][()]
                del f[name]
                if rng.random() < 0.15:
                    f.create_dataset(name, shape=(1 << 40,), dtype=np.float64, chunks=(1024,))
                else:
                    f[name] = hostile_dataset(rng, data)
            elif op == 5 and (groups or datasets):
                name = rng.choice(groups + datasets)
                if name in f:
                    del f[name]
            elif op == 6 and "runs" in f and len(f["runs"]):
                f["runs"].move(rng.choice(list(f["runs"])), rng.choice(["a\x1b[31m", "../up", "x" * 300, "ü", "a b"]))
            elif "job_toml" in f.attrs:
                text = f.attrs["job_toml"]
                text = text.decode() if isinstance(text, bytes) else str(text)
                del f.attrs["job_toml"]
                f.attrs["job_toml"] = mutate_toml(text, rng).encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def h5_cases(goods, n, rng, out):
    cases = []
    for k in range(n):
        good = rng.choice(goods)
        path = os.path.join(out, f"h5_{k}.h5")
        raw = open(good, "rb").read()
        kind = rng.random()
        if kind < 0.25:  # bit flips in the raw bytes
            b = bytearray(raw)
            for _ in range(rng.choice([1, 4, 16, 64])):
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            open(path, "wb").write(bytes(b))
        elif kind < 0.35:
            open(path, "wb").write(raw[: rng.randrange(len(raw))])
        else:
            shutil.copy(good, path)
            try:
                mutate_h5(path, rng)
            except (OSError, ValueError, TypeError, KeyError) as e:  # h5py refused this mutation: keep the copy
                print(f"note: h5_{k}: mutation not applied ({e.__class__.__name__})", file=sys.stderr)
        # Every third file goes to `compare` instead, as the reference or as the candidate of an intact file.
        where = os.path.join(out, f"report_{k}")
        if k % 3 == 1:
            args = ["compare", path, good, "-o", where]
        elif k % 3 == 2:
            args = ["compare", good, path, "-o", where]
        else:
            args = ["report", path, "-o", where]
        cases.append(("h5", f"h5_{k}", args, [path]))
    return cases


# ---- running and judging -----------------------------------------------------------

# A frame without a symbol has two spaces before its "(module+offset)".
FRAME = re.compile(r"^\s+#\d+ 0x[0-9a-f]+\s+(?:in (\S+) )?\(?(\S*)", re.M)


def sanitizer_in_libhdf5(text):
    """Whether every sanitizer report in `text` stops first inside libhdf5: the
    report reads each file in a child process first, because HDF5 1.10.8 itself
    overruns memory on some damaged files (H5HG_read trusts a flipped length);
    such a child is stopped and the file skipped, which is the design, not a
    fault of pipebench's code. A report whose first frame outside the sanitizer
    runtime is pipebench's own is a crash."""
    reports = [r for r in re.split(r"==\d+==ERROR: |runtime error:", text)[1:]]
    if not reports:
        return False
    for r in reports:
        frames = [m.group(0) for m in FRAME.finditer(r)]
        first = next((f for f in frames if "libsanitizer" not in f and "__interceptor" not in f), "")
        if "libhdf5" not in first:
            return False
    return True


def judge(kind, rc, stdout, stderr, report_dir):
    """(outcome, why, isolated_library_fault)."""
    outcome, why = judge_exit(kind, rc, stdout, stderr, report_dir)
    text = stderr.decode("utf-8", "replace")
    if any(m in text for m in SANITIZER_MARKS):
        # The file refused (report, compare's reference: "error") or listed as
        # unreadable beside the others (compare's candidate: "accepted").
        if kind == "h5" and outcome in ("error", "accepted") and "the HDF5 library" in text and sanitizer_in_libhdf5(text):
            return outcome, "", True
        return "crash", "sanitizer report", False
    return outcome, why, False


def judge_exit(kind, rc, stdout, stderr, report_dir):
    text = stderr.decode("utf-8", "replace")
    if rc < 0 or rc >= 128:
        return "crash", f"exit {rc}"
    if RAW_CONTROL.search(stdout) or RAW_CONTROL.search(strip_sanitizer(stderr)):
        return "unclear", "raw control character in the output"
    try:  # a damaged byte is printed as \xNN, never passed through (printable, units.hpp)
        stdout.decode("utf-8")
        strip_sanitizer(stderr).decode("utf-8")
    except UnicodeDecodeError as e:
        return "unclear", f"output not UTF-8 ({e.reason} at byte {e.start})"
    written = "compare.json" if os.path.exists(os.path.join(report_dir or "", "compare.json")) else "summary.json"
    if rc == 0:
        if kind == "h5":
            try:
                json.load(open(os.path.join(report_dir, written), encoding="utf-8"))
            except (OSError, ValueError) as e:
                return "unclear", f"{written}: {e}"
        return "accepted", ""
    if kind == "h5":
        low = (text + stdout.decode("utf-8", "replace")).lower()
        # report: every input skipped; compare: the reference unreadable.
        ok = rc == 1 and ("skipped" in low or "no readable" in low or "cannot read the reference" in low)
        return ("error", "") if ok else ("unclear", f"exit {rc}")
    if kind == "cli":  # tune's exit 5 is an answer: nothing fits, or no layout is usable
        answer = stdout.decode("utf-8", "replace") + text
        if rc == 5 and ("nothing fits" in answer or "is usable with these options" in answer):
            return "accepted", ""
        ok = rc in (2, 3) and text.strip()  # CLI11's "--opt: ..." or pipebench's message
        return ("error", "") if ok else ("unclear", f"exit {rc}")
    if rc in (2, 3, 4) and "pipebench" in text and text.strip():
        return "error", ""
    return "unclear", f"exit {rc}"


def strip_sanitizer(stderr):
    """stderr without sanitizer reports (their stack lines are not pipebench's messages)."""
    cut = re.search(rb"==\d+==ERROR: |runtime error:", stderr)
    return stderr[: cut.start()] if cut else stderr


def run_case(pipebench, case, timeout, env):
    kind, name, args, _ = case
    report_dir = args[args.index("-o") + 1] if kind in ("h5", "cli") else None
    start = time.monotonic()
    try:
        p = subprocess.run([pipebench] + args, capture_output=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        return case, "hang", f"still running after {timeout} s", (e.stderr or b"")[-20000:], time.monotonic() - start, False
    outcome, why, library = judge(kind, p.returncode, p.stdout, p.stderr, report_dir)
    if kind == "cli" and outcome == "accepted" and args[-1] in NON_FINITE:  # nan passes CLI::Range's comparisons
        outcome, why = "unclear", f"{args[-2]} {args[-1]} was accepted"
    if report_dir and outcome in ("accepted", "error"):
        shutil.rmtree(report_dir, ignore_errors=True)
    return case, outcome, why, p.stderr[-20000:], time.monotonic() - start, library


def keep_failure(out, pipebench, case, outcome, why, stderr):
    kind, name, args, inputs = case
    d = os.path.join(out, "failures", name)
    os.makedirs(d, exist_ok=True)
    for p in inputs:  # the cases folder is removed at the end: the repro names the kept copies
        kept = shutil.copy(p, d)
        args = [a.replace(p, os.path.abspath(kept)) for a in args]
    with open(os.path.join(d, "repro.sh"), "w") as f:
        f.write("#!/bin/sh\n# " + f"{outcome}: {why}\n" + shlex.join([pipebench] + args) + "\n")
    with open(os.path.join(d, "stderr.txt"), "wb") as f:
        f.write(stderr)


def launch(cmd, timeout, env):
    """(exit code, stderr) of cmd in its own process group; exit None when it was still running at the
    timeout (the whole group is then killed: mpirun and every rank it started)."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        _, stderr = p.communicate(timeout=timeout)
        return p.returncode, stderr[-20000:]
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        _, stderr = p.communicate()
        return None, stderr[-20000:]


def workload_device(path):
    """The accepted workload's [device] table (None when Python's TOML parser cannot read what toml11
    took: such a case is left to plan)."""
    try:
        with open(path, "rb") as f:
            device = tomllib.load(f).get("device", {})
        return device if isinstance(device, dict) else None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, AttributeError, ValueError):
        return None


# What an accepted workload may cost to be run here: runs (each builds its model), and on the cpu
# backend the planned FLOPs of one step over every run and rank (jobs/default.toml: 1e11, ~3 s).
MAX_RUNS, MAX_CPU_FLOPS = 16, 1e12


def affordable(device, plan):
    """Whether an accepted workload can run here within the run timeout: cpu or sim, at most 8 ranks,
    MAX_RUNS runs and (cpu) MAX_CPU_FLOPS per step; sim runs on the virtual clock, at any speed."""
    backend = device.get("backend", "cpu") if device is not None else None
    runs = plan["runs"]
    if backend not in ("cpu", "sim") or len(runs) > MAX_RUNS or max(r["ranks"] for r in runs) > 8:
        return False
    if backend == "sim":
        return True
    flops_per_s = device.get("sim_flops_per_s", 2e12)  # the planner's busy times are at this speed
    if "preset" in device or not isinstance(flops_per_s, (int, float)):
        return False
    return sum(sum(r["simulated"]["busy_s"]) * r["ranks"] / r["pipeline_size"] for r in runs) * flops_per_s <= MAX_CPU_FLOPS


# A sim workload runs on the virtual clock without jitter: no sleeping (a mutated sim_flops_per_s
# cannot make it run for hours), and its timeline is then the plan's (check_virtual_clock.py).
SIM_EXACT = ["--set", "device.sim_clock=virtual", "--set", "device.sim_jitter=0"]


def timeline_disagrees(pipebench, repo, path, results_dir):
    """check_virtual_clock.py's problems with a sim run against the plan ("" when none)."""
    files = glob.glob(os.path.join(results_dir, "**", "*.h5"), recursive=True)
    check = os.path.join(repo, "tests", "mpi", "check_virtual_clock.py")
    p = subprocess.run([sys.executable, check, pipebench, path, *SIM_EXACT, files[0]], capture_output=True, text=True)
    return "; ".join(l for l in p.stdout.splitlines() if l.startswith("FAIL"))[:1500] or \
        (f"check_virtual_clock.py exit {p.returncode}: {p.stderr[-300:]}" if p.returncode else "")


def memory_verdicts_disagree(plan, results_dir):
    """The runs whose outcome contradicts the plan's memory ("" when none): predicted above the
    capacity but not failed out of memory, out of memory though predicted to fit, or completed with
    a rank's measured peak not its stage's planned bytes (planner = measured to the byte on cpu and
    sim; docs/parallel.md)."""
    files = glob.glob(os.path.join(results_dir, "**", "*.h5"), recursive=True)
    if len(files) != 1:
        return f"{len(files)} results files written"
    text = lambda v: v.decode() if isinstance(v, bytes) else str(v)
    wrong = []
    with h5py.File(files[0], "r") as f:
        for r in plan["runs"]:
            g = f["runs"].get(r["name"])
            if g is None:
                wrong.append(f"{r['name']}: not in the results file")
                continue
            status, kind = text(g.attrs["status"]), text(g.attrs.get("failure_kind", ""))
            if status == "skipped" or (status == "failed" and kind != "oom" and kind != "error"):
                continue  # nan, timeout: a mutated learning rate or step_timeout_s, not memory
            peak = max(stage["capacity_fraction"] for stage in r["memory"])
            oom = status == "failed" and kind == "oom"
            if (peak > 1.0) != oom or kind == "error":
                wrong.append(f"{r['name']}: plan peak {peak:.4f} of capacity, run {status} {kind}: "
                             f"{text(g.attrs.get('failure_message', ''))[:300]}")
            elif status == "ok":
                measured = g["peak_mem_bytes"][:]
                stage = g["pipeline_rank"][:] if "pipeline_rank" in g else range(len(measured))
                planned = {s_["stage"]: s_["total_bytes"] for s_ in r["memory"]}
                off = [(k, int(m), planned.get(int(st))) for k, (m, st) in enumerate(zip(measured, stage))
                       if int(m) != planned.get(int(st))]
                if off:
                    wrong.append(f"{r['name']}: (rank, measured, planned) peak bytes {off[:4]}")
    return "; ".join(wrong)


def run_accepted(pipebench, repo, results, n, out, timeout, env):
    """Runs the first n accepted csv and the first n accepted toml cases that can run here under
    mpirun (affordable()). A schedule the validator accepted must run to the end (2 counted steps,
    no warm-up), never deadlock or fail; a workload (1 counted step) must end with
    a results file whose every run agrees with the plan's memory (out of memory exactly where the
    plan's peak is above the capacity, else at its planned bytes) and, on the sim backend's
    virtual clock, with the plan's timeline. Returns (figures, failures), failures as
    (case, outcome, why, stderr)."""
    mpirun = shutil.which("mpirun")
    figures, failures = {}, []
    env = dict(env, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for want in ("csv", "toml"):
        fig = figures[want] = {"cases": 0, "ran": 0, "failed": 0, "hang": 0}
        for kind, name, args, inputs in (r[0] for r in results if r[0][0] == want and r[1] == "accepted"):
            if fig["cases"] == n:
                break
            plan_args = [a for a in args if a not in ("--export-schedule", "csv", "csv-comms", "--format", "json")]
            device = workload_device(inputs[0]) if want == "toml" else None
            backend = device.get("backend", "cpu") if device is not None else None
            if backend == "sim":
                plan_args += SIM_EXACT
            plan = json.loads(subprocess.run([pipebench] + plan_args + ["--format", "json"], capture_output=True,
                                             text=True, env=env).stdout)
            if want == "toml" and not affordable(device, plan):
                continue
            if mpirun is None:
                raise SystemExit("fuzz.py: --run-accepted needs mpirun on PATH")
            fig["cases"] += 1
            results_dir = os.path.join(out, "cases", name + ".results")
            steps = ["-n", "2"] if want == "csv" else ["-n", "1"]
            ranks = max(r["ranks"] for r in plan["runs"])
            cmd = [mpirun, "-np", str(ranks), "--oversubscribe", pipebench, "run"] + plan_args[1:] + steps + \
                ["-w", "0", "-o", results_dir]
            case = (want + "-run", name + "-run", cmd[1:], inputs)
            rc, stderr = launch(cmd, timeout, env)
            if rc is None:
                why = f"still running after {timeout} s"
            elif want == "csv":
                why = f"exit {rc}" if rc != 0 else ""
            else:  # 5: a run failed (judged against the plan below), 8: ranks idled
                why = f"exit {rc}" if rc not in (0, 5, 8) else memory_verdicts_disagree(plan, results_dir)
                if not why and backend == "sim" and rc != 5:  # every run completed: its timeline too
                    why = timeline_disagrees(pipebench, repo, inputs[0], results_dir)
            if why:
                fig["hang" if rc is None else "failed"] += 1
                failures.append((case, "hang" if rc is None else "run failed", why, stderr))
                continue
            fig["ran"] += 1
            shutil.rmtree(results_dir, ignore_errors=True)
    return figures, failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pipebench")
    ap.add_argument("repo")
    ap.add_argument("out")
    ap.add_argument("--good", action="append", required=True, help="a real results file to mutate (repeatable)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--toml", type=int, default=320)
    ap.add_argument("--set", type=int, default=120, dest="sets")
    ap.add_argument("--csv", type=int, default=120)
    ap.add_argument("--h5", type=int, default=110)
    ap.add_argument("--cli", type=int, default=120,
                    help=f"numeric command-line option cases (at most the {len(CLI_VALUES) * sum(len(o) for _, o in CLI_OPTIONS)} of the cross product)")
    ap.add_argument("--run-accepted", type=int, default=0, metavar="N",
                    help="also run the first N accepted csv and toml cases under mpirun: each must run as planned")
    ap.add_argument("--run-timeout", type=float, default=120.0)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--name", default="fuzz", help="names the build in the figures (release, sanitize)")
    a = ap.parse_args()

    shutil.rmtree(a.out, ignore_errors=True)
    cases_dir = os.path.join(a.out, "cases")
    os.makedirs(cases_dir)
    rng = random.Random(a.seed)
    cases = toml_cases(a.repo, a.toml, rng, cases_dir) + set_cases(a.repo, a.sets, rng) + \
        csv_cases(a.pipebench, a.repo, a.csv, rng, cases_dir) + h5_cases(a.good, a.h5, rng, cases_dir) + \
        cli_cases(a.repo, a.good, a.cli, rng, cases_dir)
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=0")  # Open MPI's and HDF5's allocations at exit are not ours

    start = time.monotonic()
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        for r in pool.map(lambda c: run_case(a.pipebench, c, a.timeout, env), cases):
            results.append(r)
    elapsed = time.monotonic() - start

    figures = {"name": a.name, "seed": a.seed, "elapsed_s": round(elapsed, 1), "kinds": {}}
    failed = 0
    for kind in ("toml", "set", "csv", "h5", "cli"):
        mine = [r for r in results if r[0][0] == kind]
        counts = {o: sum(1 for r in mine if r[1] == o) for o in ("accepted", "error", "crash", "hang", "unclear")}
        counts["cases"] = len(mine)
        counts["libhdf5_faults_isolated"] = sum(1 for r in mine if r[5])
        counts["slowest_s"] = round(max((r[4] for r in mine), default=0.0), 2)
        figures["kinds"][kind] = counts
        print(f"fuzz[{a.name}] {kind:4}: {counts['cases']} cases: {counts['accepted']} accepted, {counts['error']} clear "
              f"errors, {counts['crash']} crashes, {counts['hang']} hangs, {counts['unclear']} unclear "
              f"(slowest {counts['slowest_s']} s)"
              + (f"; {counts['libhdf5_faults_isolated']} memory errors inside libhdf5 caught by the report's "
                 "read-in-a-child and the file skipped" if counts["libhdf5_faults_isolated"] else ""))
    slowest = sorted(results, key=lambda r: -r[4])[:5]
    print(f"fuzz[{a.name}] slowest cases: " + ", ".join(f"{r[0][1]} {r[4]:.1f} s" for r in slowest))
    for case, outcome, why, stderr, _, _ in results:
        if outcome in ("crash", "hang", "unclear"):
            failed += 1
            keep_failure(a.out, a.pipebench, case, outcome, why, stderr)
            print(f"FAIL {case[1]}: {outcome}: {why}: {stderr.decode('utf-8', 'replace').strip()[-400:]}")
    if a.run_accepted:
        start = time.monotonic()
        ran, run_failures = run_accepted(a.pipebench, a.repo, results, a.run_accepted, a.out, a.run_timeout, env)
        ran["elapsed_s"] = round(time.monotonic() - start, 1)
        figures["run_accepted"] = ran
        for kind in ("csv", "toml"):
            r = ran[kind]
            print(f"fuzz[{a.name}] accepted {kind} cases run under mpirun: {r['cases']}: {r['ran']} as planned, "
                  f"{r['failed']} failed, {r['hang']} hangs")
        print(f"fuzz[{a.name}] runs took {ran['elapsed_s']} s")
        for case, outcome, why, stderr in run_failures:
            failed += 1
            keep_failure(a.out, shutil.which("mpirun"), case, outcome, why, stderr)
            print(f"FAIL {case[1]}: {outcome}: {why}: {stderr.decode('utf-8', 'replace').strip()[-400:]}")
    print(f"fuzz[{a.name}]: {len(results)} cases in {elapsed:.0f} s, seed {a.seed}; {failed} failure(s)"
          + (f" kept under {os.path.join(a.out, 'failures')}" if failed else ""))
    with open(os.path.join(a.out, "figures.json"), "w") as f:
        json.dump(figures, f, indent=1)
    shutil.rmtree(cases_dir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
