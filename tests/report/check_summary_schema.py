#!/usr/bin/env python3
"""Every summary.json under the given folders (what the other tests'
`pipebench report` calls wrote) validates against docs/summary.schema.json,
and every run in it carries seed 004's record. Runs after the tests that
write them (ctest DEPENDS); at least MIN files must be found.
    check_summary_schema.py SCHEMA MIN DIR..."""
import json
import os
import sys

import jsonschema

schema_path, minimum, dirs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
schema = json.load(open(schema_path))
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema)
seed004 = {"workload", "hardware", "metrics", "evidence_level", "failure", "decision"}

found, runs, bad = 0, 0, []
for d in dirs:
    for root, _, files in os.walk(d):
        if "summary.json" not in files:
            continue
        path = os.path.join(root, "summary.json")
        found += 1
        try:
            doc = json.load(open(path))
        except ValueError as e:
            bad.append(f"{path}: not JSON: {e}")
            continue
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
        for e in errors[:3]:
            bad.append(f"{path}: {'/'.join(str(p) for p in e.path)}: {e.message[:300]}")
        for r in doc.get("runs", []):
            runs += 1
            missing = seed004 - set(r)
            if missing:
                bad.append(f"{path}: run {r.get('run')}: missing {sorted(missing)}")
print(f"{found} summary.json file(s), {runs} run record(s) checked against {schema_path}")
for b in bad:
    print("FAIL:", b)
assert found >= minimum, f"found {found} summary.json file(s), expected at least {minimum}"
assert not bad, f"{len(bad)} problem(s)"
print("PASS")
