#!/usr/bin/env bash
# bad_label.sh PIPEBENCH JOB LABEL: `run --label LABEL` must be a usage error
# (exit 2) that says what a label may be, before anything runs or is written.
out=$("$1" run "$2" --dry-run -o "${TMPDIR:-/tmp}/pipebench-bad-label-$$" --label "$3" 2>&1)
rc=$?
[[ $rc -eq 2 ]] || { echo "FAIL: --label '$3': exit $rc, expected 2: $out"; exit 1; }
grep -q 'a label is one folder name' <<< "$out" || { echo "FAIL: --label '$3': message: $out"; exit 1; }
echo "ok: --label '$3' refused: $out"
