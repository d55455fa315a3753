#!/usr/bin/env bash
# Two launches of one Slurm job started together (a job step array, a script
# running two workloads) ask for the same results name, NAME-<job id>.h5:
# both must keep their results (issue 33: one lost its file in 6 of 6 tries,
# "cannot rename ...-777.h5.partial.tmp ... No such file or directory").
# Usage: same_job_id.sh MPIEXEC PIPEBENCH JOB OUT [TRIES]
set -uo pipefail
mpiexec=$1 pipebench=$2 job=$3 out=$4 tries=${5:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 SLURM_JOB_ID=777
rm -rf "$out"
failures=0
for t in $(seq 1 "$tries"); do
  dir=$out/try$t
  "$mpiexec" -np 1 "$pipebench" run "$job" --run baseline -o "$dir" --label L > "$out.a$t.log" 2>&1 &
  a=$!
  "$mpiexec" -np 1 "$pipebench" run "$job" --run baseline -o "$dir" --label L > "$out.b$t.log" 2>&1 &
  b=$!
  wait $a; ra=$?
  wait $b; rb=$?
  files=$(find "$dir" -name '*-777*.h5' | wc -l)
  left=$(find "$dir" -name '*.partial*' -o -name '*.claim' | wc -l)
  echo "try $t: exits $ra $rb, $files results file(s), $left leftover(s): $(find "$dir" -name '*.h5' -printf '%f ')"
  if ((ra != 0 || rb != 0 || files != 2 || left != 0)); then
    failures=$((failures + 1))
    grep -h "pipebench:" "$out.a$t.log" "$out.b$t.log"
  fi
done
echo "failures: $failures of $tries"
((failures == 0))
