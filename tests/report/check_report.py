#!/usr/bin/env python3
"""Checks a report built from tests/report fixtures against the HDF5 files:
the comparison tables' figures equal the files' (Markdown cells and
summary.json), hostile strings are escaped, failed runs appear with their
kind, the truncated file is reported as skipped.
    check_report.py REPORT_DIR INPUTS_DIR"""
import glob
import json
import math
import os
import re
import sys

import h5py

report, inputs = sys.argv[1], sys.argv[2]
html = open(os.path.join(report, "index.html"), encoding="utf-8").read()
md = open(os.path.join(report, "report.md"), encoding="utf-8").read()
summary = json.load(open(os.path.join(report, "summary.json"), encoding="utf-8"))
problems = []


def check(cond, what):
    if not cond:
        problems.append(what)


def fmt_seconds(s):  # the report's format_seconds
    if math.isnan(s):
        return "-"
    if abs(s) >= 1:
        return f"{s:.3f} s"
    if abs(s) >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.1f} us"


def attr(g, k):
    v = g.attrs[k]
    return v.decode() if isinstance(v, bytes) else v


records = {(os.path.realpath(r["file"]), r["run"]): r for r in summary["runs"]}
checked_rows = 0
checked_predictions = 0
for path in sorted(glob.glob(os.path.join(inputs, "**", "*.h5"), recursive=True)):
    if path.endswith("truncated.h5"):
        continue
    with h5py.File(path, "r") as f:
        for name, g in f["runs"].items():
            rec = records.get((os.path.realpath(path), name))
            check(rec is not None, f"summary.json lacks {path}:{name}")
            if rec is None:
                continue
            check(rec["status"] == attr(g, "status"), f"{name}: status")
            check(rec["failure_kind"] == attr(g, "failure_kind"), f"{name}: failure kind")
            for key, hkey in [("step_time_median_s", "step_time_median_s"), ("bubble_measured", "bubble_measured_median"),
                              ("bubble_analytic", "bubble_analytic"), ("peak_mem_max_bytes", "peak_mem_max_bytes")]:
                a, b = rec[key], float(g.attrs[hkey])
                check((a is None and math.isnan(b)) or (a is not None and a == b), f"{name}: {key} {a} != {b}")
            # The plan beside the measurement: every measured run; the planner's
            # memory is what the sim and cpu backends' trackers record, exactly.
            pred = rec.get("prediction", "absent")
            measured = attr(g, "status") == "ok" and not math.isnan(float(g.attrs["step_time_median_s"]))
            if not measured:
                check(pred is None, f"{name}: an unmeasured run has no prediction ({pred})")
            else:
                check(isinstance(pred, dict), f"{name}: no prediction in summary.json")
                if isinstance(pred, dict):
                    rows = {row["metric"]: row for row in pred["rows"]}
                    step, mem = rows.get("step time (median)"), rows.get("peak memory, largest rank")
                    check(step is not None and step["measured"] == rec["step_time_median_s"] and step["planned"] > 0,
                          f"{name}: prediction step row {step}")
                    check(mem is not None and mem["planned"] == mem["measured"] == rec["peak_mem_max_bytes"],
                          f"{name}: planned peak memory is not the measured one: {mem}")
                    backend = attr(g, "backend")
                    # cpu: planned at the run's own measured compute rate (no device model describes the machine).
                    want_basis = "sim backend's modelled speed" if backend == "sim" else "this run's own measured compute rate"
                    check(want_basis in pred["basis"], f"{name}: prediction basis {pred['basis']!r} for backend {backend}")
                    check(("bubble" in rows) == (int(g.attrs["pipeline_size"]) > 1), f"{name}: bubble row iff p > 1")
                    check(re.search(r"\| peak memory, largest rank \| ([^|]+) \| \1 \| \+0\.0% \|", md) is not None,
                          f"{name}: the prediction table's memory row not in report.md")
                    checked_predictions += 1
            base = attr(g, "baseline")
            if base and attr(g, "status") == "ok" and attr(f["runs"][base], "status") == "ok":
                # The Markdown comparison table: "| step time (median) | <baseline> | <pipeline> | Δ |"
                want = (f"| step time (median) | {fmt_seconds(float(f['runs'][base].attrs['step_time_median_s']))} | "
                        f"{fmt_seconds(float(g.attrs['step_time_median_s']))} |")
                check(want in md, f"{name}: comparison row {want!r} not in report.md")
                def fraction(x):  # the report's fraction cell: a percentage, 2 decimals, "-" when there is none
                    return "-" if math.isnan(float(x)) else f"{100 * float(x):.2f}%"
                want_b = (f"| bubble analytic (% of step) | {fraction(f['runs'][base].attrs['bubble_analytic'])} | "
                          f"{fraction(g.attrs['bubble_analytic'])} |")
                check(want_b in md, f"{name}: comparison row {want_b!r} not in report.md")
                checked_rows += 1
check(checked_rows >= 3, f"only {checked_rows} comparison tables checked")
check(checked_predictions >= 8, f"only {checked_predictions} predictions checked")

# Failed runs are listed with their kind, in every output.
oom = [r for r in summary["runs"] if r["run"] == "oom"]
check(len(oom) == 1 and oom[0]["status"] == "failed" and oom[0]["failure_kind"] == "oom", "oom run in summary.json")
check(re.search(r"<td>oom</td><td>failed</td>.*?oom on rank 0: rank 0: out of memory", html, re.S) is not None,
      "oom run with its kind and message in the HTML run table")
check("| oom | failed |" in md, "oom run in report.md")
check(any(r["status"] == "skipped" for r in summary["runs"]), "skipped runs are listed")

# Legends per mode: an inference timeline has no backward and no optimizer.
gantts = re.findall(r'<svg[^>]*aria-label="([^"]*): measured step[^"]*"(.*?)</svg>', html, re.S)
inference = [body for name, body in gantts if name == "inference2"]
training = [body for name, body in gantts if name != "inference2"]
check(len(inference) >= 1 and len(training) >= 1, f"measured timelines: {[n for n, _ in gantts]}")
for body in inference:
    check(">end of step</text>" in body and "reduction + optimizer" not in body and ">backward" not in body,
          "the inference timeline's legend: forward and end of step only")
for body in training:
    check(">reduction + optimizer</text>" in body, "a training timeline's legend names the reduction and optimizer")

# Units on the axes: the loss in nats, times in seconds, memory in binary units.
for label in (">loss (nats: mean token cross-entropy)</text>", ">step time (s)</text>", ">time since the step barrier (s)</text>"):
    check(label in html, f"axis label {label!r}")

# Escaping: the hostile description appears only escaped.
check("<script>" not in html.lower(), "an unescaped <script> in index.html")
# report.md too: Markdown renderers pass raw HTML through.
check("<script" not in md.lower() and "<b>bold" not in md, "raw HTML from the workload in report.md")
check("&lt;script&gt;alert('pipebench')&lt;/script&gt; &amp; \"quoted\" &lt;b&gt;bold&lt;/b&gt;" in md,
      "the escaped description in report.md")
# A Markdown link from a job string stays text (issue 33: it was a live javascript: link).
check("\\[x\\](javascript:alert(1))" in md and "[x](javascript" not in md, "a job string's [x](javascript:...) is a live link in report.md")
check("&lt;script&gt;alert(&#39;pipebench&#39;)&lt;/script&gt; &amp; &quot;quoted&quot; &lt;b&gt;bold&lt;/b&gt;" in html,
      "the escaped description")
# The truncated file is skipped with a message.
check(any(s["path"].endswith("truncated.h5") for s in summary["skipped"]), "truncated.h5 not listed as skipped")
check("truncated.h5" in html and "Skipped files" in html, "truncated.h5 not reported in the HTML")
# Self-contained: no external resources, no scripts.
check(not re.search(r"(src|href)=\"https?:", html), "external resource in index.html")
check(html.count("<svg") >= 8, f"only {html.count('<svg')} charts")

# The answer first: the verdict table before the trends and the jobs' sections,
# failed and skipped runs at its top.
verdicts = html.find('id="verdicts"')
check(verdicts > 0 and verdicts < html.find("<h2>Job") and ("id=\"trends\"" not in html or verdicts < html.find('id="trends"')),
      "the verdict table is not the first section")
table = html[verdicts:html.find("</table>", verdicts)]
classes = re.findall(r'<tr(?: class="(\w*)")?>', table)
flags = [c in ("failed", "skipped") for c in classes[1:]]  # after the header row
check(any(flags) and flags == sorted(flags, reverse=True), f"failures are not first in the verdict table: {classes}")
check(md.find("## Verdicts") < md.find("## Job"), "report.md does not start with its verdicts")

for p in problems:
    print("FAIL:", p)
print(f"{len(problems)} problems; {checked_rows} comparison tables checked")
sys.exit(1 if problems else 0)
