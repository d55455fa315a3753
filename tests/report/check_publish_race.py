#!/usr/bin/env python3
"""`pipebench report` while a launch checkpoints and publishes (issue 33, defect 9).

A writer thread does what a launch's ResultsWriter does to a results folder,
as fast as it can: a new checkpoint written to NAME.h5.partial.tmp and renamed
over NAME.h5.partial, then published (NAME.h5 linked, the checkpoint
unlinked), then the next launch's (four names in turn, the oldest file moved
out of the folder to free its name). Meanwhile `pipebench report FOLDER` runs
again and again: every report must exit 0 and every file it lists must be
either reported or skipped with its reason — never "exit 1: ... .h5.partial:
not a readable HDF5 file" (1 in 34 before the report held what it read).

Usage: check_publish_race.py PIPEBENCH RESULTS.h5 OUTDIR [REPORTS]
"""
import os
import shutil
import subprocess
import sys
import threading
import time


def main():
    pipebench, src, out = sys.argv[1:4]
    reports = int(sys.argv[4]) if len(sys.argv) > 4 else 40
    shutil.rmtree(out, ignore_errors=True)
    folder = os.path.join(out, "results")
    os.makedirs(folder)
    data = open(src, "rb").read()
    stop = threading.Event()
    cycles = [0]

    def writer():
        n = 0
        while not stop.is_set():
            name = os.path.join(folder, f"launch{n % 4}.h5")
            if os.path.exists(name):  # archived out of the folder: the name is free for the next launch
                os.rename(name, os.path.join(out, "archived.h5"))
            for _ in range(3):  # checkpoints, each renamed over the last
                with open(name + ".partial.tmp", "wb") as f:
                    f.write(data)
                os.rename(name + ".partial.tmp", name + ".partial")
            os.link(name + ".partial", name)  # publish
            os.unlink(name + ".partial")
            n += 1
            cycles[0] = n
            time.sleep(0.001)

    # One published file first, so that every report has a file to read.
    with open(os.path.join(folder, "first.h5"), "wb") as f:
        f.write(data)
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    problems = []
    for i in range(reports):
        p = subprocess.run([pipebench, "report", folder, "-o", os.path.join(out, "report")], capture_output=True, text=True)
        if p.returncode != 0:
            problems.append(f"report {i}: exit {p.returncode}: {p.stderr.strip().splitlines()[-3:]}")
    stop.set()
    t.join()
    print(f"{reports} reports during {cycles[0]} publish cycles: {len(problems)} failed")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
