#!/usr/bin/env bash
# setup_hang.sh MPIEXEC PIPEBENCH JOB OUTDIR: rank 1 hangs in a run's set-up
# (PIPEBENCH_FAULT=setup@two_stage_pipeline:1:0, as NCCL's bootstrap can).
# The run's watchdog is armed before the set-up (issue 72), so the launch
# ends (exit 124) after (steps + 1) x step_timeout_s + 30 s of grace, and the
# results file records the run as interrupted, not a launch that hangs.
set -u
mpiexec=$1 pb=$2 job=$3 out=$4
rm -rf "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PIPEBENCH_FAULT=setup@two_stage_pipeline:1:0
timeout 120 "$mpiexec" -np 2 --oversubscribe -x PIPEBENCH_FAULT "$pb" run "$job" --backend sim --run two_stage_pipeline \
  -n 2 -w 0 --set train.step_timeout_s=0.2 -o "$out" > "$out.log" 2>&1
rc=$?
cat "$out.log"
[[ $rc -ne 0 ]] || { echo "FAIL: the launch exited 0"; exit 1; }
grep -q "watchdog: run two_stage_pipeline did not finish" "$out.log" || { echo "FAIL: no watchdog message (exit $rc)"; exit 1; }
f=$(find "$out" -name '*.h5' | head -1)
[[ -n $f ]] || { echo "FAIL: no results file"; exit 1; }
h5dump -a /runs/two_stage_pipeline/failure_kind "$f" | grep -q '"interrupted"' || { echo "FAIL: the run is not recorded as interrupted"; h5dump -a /runs/two_stage_pipeline/failure_kind "$f"; exit 1; }
echo "PASS (exit $rc)"
