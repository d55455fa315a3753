#!/usr/bin/env bash
# The nightly report with one job's folder absent (its job was cancelled
# before writing anything): the report is written, the job is under missing
# results, and --fail-on-failure exits 5 (issue 33: exit 2 and no report).
# A file whose runs were skipped (not measured) fails --fail-on-failure too.
# Usage: nightly_missing.sh PIPEBENCH FIXTURES OUT
set -uo pipefail
pipebench=$1 fix=$2 out=$3
rm -rf "$out"
failures=0
check() { if eval "$2"; then echo "ok:   $1"; else echo "FAIL: $1"; failures=$((failures + 1)); fi; }
present=$fix/nightly absent=$fix/nosuch_job/nightly-20261201
"$pipebench" report "$present" "$absent" --expect nightly_probe --expect nosuch_job -o "$out/r1" > "$out.log" 2>&1; rc=$?
check "absent folder: exit $rc, report written" "[[ $rc == 0 && -f $out/r1/index.html ]]"
check "absent job listed as missing" "grep -q '\"nosuch_job\"' $out/r1/summary.json && grep -q 'Missing results' $out/r1/index.html"
check "absent folder listed as skipped" "grep -q 'nosuch_job/nightly-20261201' $out/r1/summary.json"
"$pipebench" report "$present" "$absent" --expect nightly_probe --expect nosuch_job -o "$out/r2" --fail-on-failure > /dev/null 2>&1; rc=$?
check "--fail-on-failure with a missing job: exit $rc (want 5)" "[[ $rc == 5 ]]"
"$pipebench" report "$absent" -o "$out/r3" > /dev/null 2>&1; rc=$?
check "without --expect a missing input is a usage error: exit $rc (want 2)" "[[ $rc == 2 ]]"
skipped=$(find "$fix/inputs/runner_schedules" -name '*.h5' | head -1)
"$pipebench" report "$skipped" -o "$out/r4" --fail-on-failure > /dev/null 2>&1; rc=$?
check "--fail-on-failure with skipped runs: exit $rc (want 5)" "[[ $rc == 5 ]]"
echo "failures: $failures"
((failures == 0))
