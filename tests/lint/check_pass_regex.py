#!/usr/bin/env python3
"""check_pass_regex.py --root DIR

A test's PASS_REGULAR_EXPRESSION is a CMake list: a ';' inside the string
splits it into alternatives, any one of which passes the test, so the rest
of the expression stops being checked (cli.tune_70b's answer line and
mpi.rank_mismatch's warnings were checked up to their first ';' only, until
this check). Use '.' for a literal semicolon. Prints FILE:LINE for each
offence; exit 1 when there is one.
"""
import argparse
import pathlib
import re
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--root", required=True)
root = pathlib.Path(parser.parse_args().root)
bad = 0
for path in sorted(root.glob("tests/**/CMakeLists.txt")):
    for n, line in enumerate(path.read_text().splitlines(), 1):
        for m in re.finditer(r'PASS_REGULAR_EXPRESSION\s+"((?:[^"\\]|\\.)*)"', line):
            if ";" in m.group(1):
                print(f"{path.relative_to(root)}:{n}: PASS_REGULAR_EXPRESSION holds ';' (a list separator: the test "
                      f"passes when any piece matches); write '.' for it")
                bad += 1
print(f"{bad} violation(s)")
sys.exit(1 if bad else 0)
