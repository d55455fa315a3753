#!/usr/bin/env python3
"""The nightly trend chart shows at a glance what the verdict says (issue 33).

From one real nightly results file, writes 3, 60 and 365 nights: its
counted steps replaced by its median times log-normal night and step noise
(the newest night 10% slower), so the verdict does not depend on how noisy the
machine was when the file was made. Reports the newest against the others. In each report's trend chart, measured by headless
Chromium's layout (getBBox of every element): every label and point lies
inside the chart's frame; the y axis does not start at zero and says where
it starts; the history's median and the regression bar are drawn; the
flagged night is ringed and labelled with its verdict; and the judged
night's point stands clear of the bar, at least 10 px above it (a 10%
regression is not a bump of a few pixels). Screenshots of each chart are
written next to the reports (trend-N.png).

Usage: check_trend_chart.py PIPEBENCH NIGHTLY.h5 OUTDIR
"""
import datetime
import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import h5py

from nightly_report import nightly_report, run_record

CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# Measures the chart: the frame (the svg's viewBox), every text's and
# circle's box as drawn (rotation included), in the svg's own units.
PROBE = """<script>(function(){var s=document.querySelector('svg');var vb=s.viewBox.baseVal;var o=s.getBoundingClientRect();
var k=vb.width/o.width;var out=[];
s.querySelectorAll('text,circle').forEach(function(e){var b=e.getBoundingClientRect();
out.push([e.tagName,(e.getAttribute('class')||''),e.textContent.slice(0,60),(b.left-o.left)*k,(b.top-o.top)*k,b.width*k,b.height*k,
e.getAttribute('stroke')||'']);});
document.body.setAttribute('data-chart',JSON.stringify({w:vb.width,h:vb.height,items:out}));})();</script>"""


def nights(src, out, n, slow):
    random.seed(n)
    hist, tonight = os.path.join(out, "history"), os.path.join(out, "tonight")
    os.makedirs(hist)
    os.makedirs(tonight)
    t0 = datetime.datetime(2026, 12, 1, 19, 55) - datetime.timedelta(days=n - 1)
    with h5py.File(src, "r") as f:
        r = f["runs"]["pipe"]
        base = statistics.median(x for x, w in zip(r["step_time_s"][()], r["is_warmup"][()]) if not w)
    for i in range(n):
        last = i == n - 1
        dest = os.path.join(tonight if last else hist, f"n{i:03d}.h5")
        shutil.copy(src, dest)
        with h5py.File(dest, "r+") as f:
            f.attrs["created_utc"] = (t0 + datetime.timedelta(days=i)).strftime("%Y-%m-%dT%H:%M:%SZ")
            r = f["runs"]["pipe"]
            night = math.exp(0.004 * random.gauss(0, 1)) * (slow if last else 1.0)
            # Counted steps are the file's median times the modelled noise alone:
            # the real run's own step noise (a loaded machine) would make the
            # verdict this test expects depend on the machine (issue 33's CI).
            t = [x if w else base * night * math.exp(0.005 * random.gauss(0, 1))
                 for x, w in zip(r["step_time_s"][()], r["is_warmup"][()])]
            r["step_time_s"][...] = t
            counted = sorted(x for x, w in zip(t, r["is_warmup"][()]) if not w)
            r.attrs["step_time_median_s"] = counted[len(counted) // 2]
    return hist, tonight


def chart_page(index, dest):
    page = open(index, encoding="utf-8").read()
    css = re.search(r"<style>.*?</style>", page, re.S).group(0)
    at = page.find("median step time per results file")
    svg = page[page.rfind("<svg", 0, at):page.find("</svg>", at) + 6]
    with open(dest, "w", encoding="utf-8") as f:
        f.write(f"<html><head>{css}</head><body style='margin:0;background:#fff'>{svg}</body></html>")
    return svg


def main():
    pipebench, src, out = sys.argv[1:4]
    chrome = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chrome:
        print("FAIL: chromium is not installed (scripts/test.sh installs Debian's chromium)")
        return 1
    shutil.rmtree(out, ignore_errors=True)
    problems = []
    for n in (3, 60, 365):
        d = os.path.join(out, f"n{n}")
        hist, tonight = nights(src, d, n, 1.10)
        rep = os.path.join(d, "report")
        p, summary = nightly_report(pipebench, tonight, [hist], rep)
        trend = run_record(summary, "pipe")["trend"]
        svg = chart_page(os.path.join(rep, "index.html"), os.path.join(d, "chart.html"))
        page = open(os.path.join(d, "chart.html"), encoding="utf-8").read().replace("</body>", PROBE + "</body>")
        open(os.path.join(d, "chart-probe.html"), "w", encoding="utf-8").write(page)
        profile = tempfile.mkdtemp()
        dom = subprocess.run([chrome, *CHROME_FLAGS, f"--user-data-dir={profile}", "--dump-dom",
                              "file://" + os.path.join(d, "chart-probe.html")], capture_output=True, text=True, timeout=120).stdout
        subprocess.run([chrome, *CHROME_FLAGS, f"--user-data-dir={profile}", "--window-size=920,340", "--hide-scrollbars",
                        f"--screenshot={os.path.join(out, f'trend-{n}.png')}", "file://" + os.path.join(d, "chart.html")],
                       capture_output=True, timeout=120)
        m = re.search(r'data-chart="([^"]*)"', dom)
        if not m:
            problems.append(f"{n} nights: the chart was not measured")
            continue
        chart = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
        w, h = chart["w"], chart["h"]
        outside = [it[:3] for it in chart["items"] if it[3] < -0.5 or it[4] < -0.5 or it[3] + it[5] > w + 0.5 or it[4] + it[6] > h + 0.5]
        want_verdict = "insufficient history" if n == 3 else "regression"
        label = next((it[2] for it in chart["items"] if it[1] == "marker"), "")
        ring = next((it for it in chart["items"] if it[0] == "circle" and it[7]), None)
        ylabel = next((it[2] for it in chart["items"] if it[2].startswith("step time")), "")
        band = re.search(r'<rect x="[\d.]+" y="([\d.]+)" width="[\d.]+" height="([\d.]+)" fill="#f3e6c4">', svg)
        print(f"{n} nights: exit {p.returncode}, verdict {trend['verdict']}, marker '{label}', y label '{ylabel}', "
              f"{len(chart['items'])} elements, {len(outside)} outside the frame")
        if outside:
            problems.append(f"{n} nights: outside the frame: {outside[:5]}")
        if trend["verdict"] != want_verdict or want_verdict not in label:
            problems.append(f"{n} nights: verdict {trend['verdict']}, marker {label!r}; expected {want_verdict}")
        if "axis from" not in ylabel or "axis from 0 s" in ylabel:
            problems.append(f"{n} nights: the y axis does not say where it starts (not at 0): {ylabel!r}")
        if "history median" not in svg or not band:
            problems.append(f"{n} nights: no history median or regression bar drawn")
        elif ring and n > 3:
            top_of_bar = float(band.group(1))
            ring_centre = ring[4] + ring[6] / 2
            if not ring_centre < top_of_bar - 10:
                problems.append(f"{n} nights: the 10% slower night (y={ring_centre:.0f}) is not clear of the bar (top {top_of_bar:.0f})")
    for p in problems:
        print("FAIL:", p)
    print(f"screenshots: {out}/trend-{{3,60,365}}.png")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
