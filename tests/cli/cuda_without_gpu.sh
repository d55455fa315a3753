#!/usr/bin/env bash
# `pipebench run --backend cuda` where no GPU can be used (this CI machine:
# no device and no driver; or a build without CUDA) fails fast on every rank
# with exit 7 and one line on stderr, and still writes a results file in
# which every run failed with kind "environment" (seed 004: the record keeps
# the failure), which `pipebench report` reads. Skipped (77) where a GPU is
# usable: tests/gpu covers that machine.
#   cuda_without_gpu.sh MPIEXEC PIPEBENCH JOB OUTDIR
set -uo pipefail
mpiexec=$1 pipebench=$2 job=$3 outdir=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "SKIP: a GPU is visible here (nvidia-smi -L); the no-GPU path is checked on machines without one"
  exit 77
fi
rm -rf "$outdir"
mkdir -p "$(dirname "$outdir")"
"$mpiexec" -np 2 --oversubscribe "$pipebench" run "$job" --backend cuda -o "$outdir" >"$outdir.stdout" 2>"$outdir.stderr"
rc=$?
cat "$outdir.stderr"
[[ $rc -eq 7 ]] || { echo "FAIL: exit $rc, expected 7"; exit 1; }
lines=$(grep -c '^pipebench:' "$outdir.stderr")
[[ $lines -eq 1 ]] || { echo "FAIL: $lines 'pipebench:' lines on stderr, expected exactly 1"; exit 1; }
grep -q '^pipebench: no usable GPU: ' "$outdir.stderr" || { echo "FAIL: the line does not start with 'pipebench: no usable GPU: '"; exit 1; }
file=$(sed -n 's/^results (the failure, kind environment): //p' "$outdir.stdout")
[[ -n $file && -f $file ]] || { echo "FAIL: no results file named on stdout:"; cat "$outdir.stdout"; exit 1; }
"$pipebench" report "$file" -o "$outdir/report" >/dev/null || { echo "FAIL: report could not read $file"; exit 1; }
python3 - "$outdir/report/summary.json" <<'PY' || exit 1
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
assert runs, "no runs in the summary"
for r in runs:
    assert r["status"] == "failed" and r["failure"]["kind"] == "environment", r
    assert "no usable GPU" in r["failure"]["message"] or "driver" in r["failure"]["message"] or "CUDA" in r["failure"]["message"], r
    assert r["decision"] == "not_applicable", r
print(f"{len(runs)} run(s) recorded with failure kind environment")
assert json.load(open(sys.argv[1]))["any_failure"] is True
PY
"$pipebench" report "$file" -o "$outdir/report_fail" --fail-on-failure >/dev/null 2>&1
frc=$?
[[ $frc -eq 5 ]] || { echo "FAIL: report --fail-on-failure exited $frc, expected 5"; exit 1; }
echo PASS
